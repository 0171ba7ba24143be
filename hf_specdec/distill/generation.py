"""Fast data generation for distillation: continuous batching over a stream of prompts, and prompts the
target writes itself (Magpie).

Contract: `stream_generate(target, prompts, ...)` decodes a stream of token-id prompts `batch_size` rows
at a time and yields (prompt index, prompt ids, response ids) as each row finishes; a finished row is
replaced by the next prompt in place (its cache columns are dropped and the new prompt is fed in the
same forward that continues the other rows, several refills sharing one forward), so no compute is spent
on rows that are done. `magpie_prefix(tokenizer)` is the chat template up to where a user message
starts: sampled from there, the target writes user requests in its own distribution, with no
hand-written list (Xu et al. 2024, "Magpie").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

from hf_specdec.cache import CachedModel

PLACEHOLDER = "\u2063HF_SPECDEC_USER\u2063"


@dataclass(frozen=True)
class Sampling:
    """How rows pick tokens: greedy (temperature 0) or sampled with temperature and top-p."""

    temperature: float = 0.0
    top_p: float = 1.0

    def processors(self) -> LogitsProcessorList:
        processors = LogitsProcessorList()
        if self.temperature > 0:
            processors.append(TemperatureLogitsWarper(self.temperature))
            if self.top_p < 1.0:
                processors.append(TopPLogitsWarper(self.top_p))
        return processors


def magpie_prefix(tokenizer) -> list[int]:
    """Token ids of the chat template up to the start of a user message (its default system turn
    included), found by rendering a placeholder message and cutting at it."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": PLACEHOLDER}], tokenize=False)
    prefix = text[: text.index(PLACEHOLDER)]
    return tokenizer(prefix, add_special_tokens=False)["input_ids"]


@torch.inference_mode()
def stream_generate(
    target,
    prompts: Iterable[Sequence[int]],
    *,
    eos_ids: Iterable[int],
    max_new_tokens: int,
    batch_size: int = 32,
    sampling: Sampling = Sampling(),
    generator: torch.Generator | None = None,
    refill_at: float = 0.25,
) -> Iterator[tuple[int, list[int], list[int]]]:
    """Yields (index, prompt ids, response ids) for every prompt, in the order rows finish; a response
    ends after its first end-of-sequence token or at `max_new_tokens`.

    Finished rows wait until `refill_at` of the batch is free (or the prompts run out), then are refilled
    together, so the wide forward that feeds new prompts is shared. Row r of a batch draws its tokens from
    `generator` (or the global RNG) in step order, so a seeded run repeats.
    """
    device = next(target.parameters()).device
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
    processors = sampling.processors()
    prompt_iter = enumerate(prompts)
    pending: list[tuple[int, list[int]]] = []  # prompts read but not yet in a row

    def next_prompts(count: int) -> list[tuple[int, list[int]]]:
        while len(pending) < count:
            item = next(prompt_iter, None)
            if item is None:
                break
            pending.append((item[0], list(item[1])))
        taken, pending[:] = pending[:count], pending[count:]
        return taken

    first = next_prompts(batch_size)
    if not first:
        return
    rows = len(first)
    longest = max(len(ids) for _, ids in first)
    width = longest + max_new_tokens + 1
    sequences = torch.zeros(rows, width, dtype=torch.long)  # [rows, width] each row's tokens from column 0
    lens = torch.zeros(rows, dtype=torch.long)  # [rows]
    prompt_lens = torch.zeros(rows, dtype=torch.long)
    owner: list[tuple[int, list[int]] | None] = [None] * rows  # the prompt each row decodes
    cached = CachedModel(target, rows, torch.device("cpu"))
    zeros = torch.zeros(rows, dtype=torch.long)

    def place(row: int, item: tuple[int, list[int]]) -> None:
        nonlocal sequences, width
        ids = item[1]
        if len(ids) + max_new_tokens + 1 > width:  # a longer prompt than any so far: widen the buffer
            grown = torch.zeros(rows, len(ids) + max_new_tokens + 1, dtype=torch.long)
            grown[:, :width] = sequences
            sequences, width = grown, grown.shape[1]
        sequences[row, : len(ids)] = torch.tensor(ids)
        lens[row] = prompt_lens[row] = len(ids)
        owner[row] = item

    for row, item in enumerate(first):
        place(row, item)
    while any(item is not None for item in owner):
        live = torch.tensor([item is not None for item in owner])
        ends = torch.where(live, lens, cached.num_cached)  # finished rows feed nothing (and widen nothing)
        logits, _ = cached.forward(sequences, zeros, ends, 1)
        scores = logits[:, 0].to(device="cpu")  # [rows, vocab]
        if sampling.temperature > 0:
            scores = processors(sequences[:, : int(lens.max())], scores)
            probs = scores.softmax(dim=-1)
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            tokens = scores.argmax(dim=-1)
        for row in live.nonzero().squeeze(1).tolist():
            sequences[row, lens[row]] = tokens[row]
            lens[row] += 1
            new = int(lens[row] - prompt_lens[row])
            if bool((eos == tokens[row]).any()) or new >= max_new_tokens:
                index, ids = owner[row]
                yield index, ids, sequences[row, prompt_lens[row] : lens[row]].tolist()
                owner[row] = None
        free = [row for row, item in enumerate(owner) if item is None]
        if free and (len(free) >= refill_at * rows or not any(item is not None for item in owner)):
            # Drop the finished rows' cache columns; the next forward feeds their new prompts.
            keep = cached.num_cached.clone()
            keep[free] = 0
            cached.rollback(keep, slack=max_new_tokens)
            for row, item in zip(free, next_prompts(len(free))):
                place(row, item)
            for row in free:
                if owner[row] is None:
                    lens[row] = 0
