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
from typing import Callable, ClassVar, Iterable, Iterator, Protocol, Sequence

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


@dataclass(frozen=True)
class RowOptions:
    """How one prompt is decoded when a stream mixes kinds of work: its sampling, its own length cap (at
    most the stream's `max_new_tokens`) and the generator its draws come from (an engine that draws with
    its own RNG seeds it from `generator.initial_seed()`)."""

    sampling: Sampling
    max_new_tokens: int
    generator: torch.Generator | None = None


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
    options=None,
) -> Iterator[tuple[int, list[int], list[int]]]:
    """Yields (index, prompt ids, response ids) for every prompt, in the order rows finish; a response
    ends after its first end-of-sequence token or at `max_new_tokens`.

    A row that finishes takes the next prompt at once: the new prompts are prefilled in a forward of
    their own rows (a scratch cache), and their cache columns are spliced into the batch's
    (`CachedModel.splice`), so the running rows never compute a prompt's width. Tokens are drawn from
    `generator` (or the global RNG) in step order, so a seeded run repeats.

    `prompts` is asked for more whenever rows are free, so it may be an iterator that a consumer extends
    while it receives results (a finished request adds its answer's prompt): it may run dry and offer more
    later. With `options` (prompt index -> RowOptions), each prompt has its own sampling, cap and
    generator, so one stream can mix greedy and sampled answers and requests, and a prompt's tokens depend
    on no other prompt's draws.
    """
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
    processors = sampling.processors()
    stream = iter(prompts)
    taken = 0  # prompts started so far: the next one's index
    rows = batch_size
    width = max_new_tokens + 1  # grows with the longest prompt seen
    sequences = torch.zeros(rows, width, dtype=torch.long)  # [rows, width] each row's tokens from column 0
    lens = torch.zeros(rows, dtype=torch.long)  # [rows]
    prompt_lens = torch.zeros(rows, dtype=torch.long)
    limits = torch.full((rows,), max_new_tokens, dtype=torch.long)  # [rows] each row's own cap
    owner: list[tuple[int, list[int]] | None] = [None] * rows  # the prompt each row decodes
    row_options: list[RowOptions | None] = [None] * rows
    cached = CachedModel(target, rows, torch.device("cpu"))

    def pick(scores: torch.Tensor, context: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """[n] next tokens of `rows` from their raw logits [n, vocab]."""
        if options is None:
            if sampling.temperature <= 0:
                return scores.argmax(dim=-1)
            probs = processors(context, scores).softmax(dim=-1)
            return torch.multinomial(probs, 1, generator=generator).squeeze(1)
        tokens = torch.empty(len(rows), dtype=torch.long)
        groups: dict[Sampling, list[int]] = {}
        for i, row in enumerate(rows):
            groups.setdefault(row_options[row].sampling, []).append(i)
        for group_sampling, members in groups.items():
            if group_sampling.temperature <= 0:
                tokens[members] = scores[members].argmax(dim=-1)
                continue
            probs = group_sampling.processors()(context[members], scores[members]).softmax(dim=-1)
            for j, i in enumerate(members):
                tokens[i] = torch.multinomial(probs[j], 1, generator=row_options[rows[i]].generator)[0]
        return tokens

    def take(count: int) -> list[tuple[int, list[int]]]:
        """Up to `count` next prompts with their indices; fewer when the stream has run dry for now."""
        nonlocal taken
        items = []
        while len(items) < count:
            ids = next(stream, None)
            if ids is None:
                break
            items.append((taken, list(ids)))
            taken += 1
        return items

    def append(row: int, token: int):
        """Adds a token to a row; returns the finished (index, prompt, response) or None."""
        sequences[row, lens[row]] = token
        lens[row] += 1
        if token in eos or int(lens[row] - prompt_lens[row]) >= int(limits[row]):
            index, ids = owner[row]
            owner[row] = None
            return index, ids, sequences[row, prompt_lens[row] : lens[row]].tolist()
        return None

    def fill(free: list[int]) -> list[tuple[int, list[int], list[int]]]:
        """Starts the next prompts in the `free` rows: prefill apart, splice, first token."""
        nonlocal sequences, width
        items = take(len(free))
        if not items:
            return []
        free = free[: len(items)]
        longest = max(len(ids) for _, ids in items)
        if longest + max_new_tokens + 1 > width:  # a longer prompt than any so far: widen the buffer
            grown = torch.zeros(rows, longest + max_new_tokens + 1, dtype=torch.long)
            grown[:, :width] = sequences
            sequences, width = grown, grown.shape[1]
        scratch_ids = torch.zeros(len(items), longest, dtype=torch.long)
        scratch_lens = torch.tensor([len(ids) for _, ids in items])
        for i, (row, (index, ids)) in enumerate(zip(free, items)):
            scratch_ids[i, : len(ids)] = torch.tensor(ids)
            sequences[row, : len(ids)] = scratch_ids[i, : len(ids)]
            lens[row] = prompt_lens[row] = len(ids)
            owner[row] = (index, list(ids))
            if options is not None:
                row_options[row] = options(index)
                limits[row] = min(row_options[row].max_new_tokens, max_new_tokens)
        scratch = CachedModel(target, len(items), torch.device("cpu"))
        logits, _ = scratch.forward(scratch_ids, torch.zeros_like(scratch_lens), scratch_lens, 1)
        keep = cached.num_cached.clone()
        keep[free] = 0
        cached.rollback(keep, slack=max_new_tokens)  # the finished rows' columns go
        cached.splice(torch.tensor(free), scratch)
        tokens = pick(logits[:, 0], scratch_ids, free)
        return [done for row, token in zip(free, tokens.tolist()) if (done := append(row, token)) is not None]

    pending = fill(list(range(rows)))
    while pending or any(item is not None for item in owner):
        yield from pending
        live = [row for row, item in enumerate(owner) if item is not None]
        if not live:
            pending = fill(list(range(rows)))
            continue
        ends = cached.num_cached.clone()
        ends[live] = lens[live]  # live rows feed their last token; the others nothing
        logits, _ = cached.forward(sequences, torch.zeros_like(lens), ends, 1)
        tokens = pick(logits[live, 0], sequences[live, : int(lens.max())], live)
        pending = [done for row, token in zip(live, tokens.tolist()) if (done := append(row, token)) is not None]
        free = [row for row, item in enumerate(owner) if item is None]
        if free:
            pending += fill(free)


class Engine(Protocol):
    """What decodes the data tool's job stream (`magpie_data`): `stream` keeps `stream_generate`'s contract
    with per-prompt `options`. `name` is recorded with the data (items depend on the engine's arithmetic and
    RNG); `generation_config` is the target's, whose end-of-sequence ids the tool stops on."""

    name: str
    generation_config: object

    def stream(self, prompts: Iterable[Sequence[int]], *, eos_ids: Iterable[int], max_new_tokens: int,
               batch_size: int, options: Callable[[int], RowOptions]) -> Iterator[tuple[int, list[int], list[int]]]:
        ...


class TorchEngine:
    """The default engine: the transformers target itself, through `stream_generate`."""

    name: ClassVar[str] = "torch"

    def __init__(self, target):
        self.target = target
        self.generation_config = target.generation_config

    def stream(self, prompts, *, eos_ids, max_new_tokens, batch_size, options):
        return stream_generate(self.target, prompts, eos_ids=eos_ids, max_new_tokens=max_new_tokens,
                               batch_size=batch_size, options=options)
