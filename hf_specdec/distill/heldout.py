"""A held-out evaluation of a feature head that its training data cannot leak into.

Contract: `evaluate_heldout(target, tokenizer, head, requests, train_records)` first checks on token ids
that no request shares a run of `ngram` tokens with any training prompt (a request shorter than that:
that its whole token sequence does not occur in one) and raises `HeldOutLeakError` naming the requests
otherwise; then the fp32 target answers every request greedily, its hidden states are recomputed in
memory (no stored float16 features), and the head is measured along those responses: on-path
acceptance at gamma = 1, agreement per draft depth 1..4, and depth-1 top-1/2/4/8 coverage.

The requests: the hand-written `HELDOUT_REQUESTS`, and/or Magpie requests (`magpie_data.generate_data`
with `--requests-only`) made from a seed that no training file records (`check_seeds`).

Why an n-gram of 8 tokens: a shared run of 8 tokens (about 6 English words) inside two user messages is
a copied phrase or a shared template, not chance wording; shorter runs ("how do I make a", "can you
explain what") are everyday phrasing that any large chat corpus repeats. Requests are compared by
their tokens inside the chat template (`request_ids`), so the check sees them exactly as training does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

import torch

from hf_specdec.errors import HeldOutLeakError

from .data import Record, encode_prompt, eos_ids
from .generation import PLACEHOLDER, magpie_prefix
from .heldout_requests import HELDOUT_REQUESTS

NGRAM = 8


def request_ids(tokenizer, request: str) -> list[int]:
    """The request's own tokens as they sit inside the chat template (between the user prefix and the
    template's suffix); its plain encoding when the tokenizer has no chat template."""
    if not getattr(tokenizer, "chat_template", None):
        return tokenizer(request, add_special_tokens=False)["input_ids"]
    ids = encode_prompt(tokenizer, request)
    prefix, suffix = magpie_prefix(tokenizer), _template_suffix(tokenizer)
    inside = len(ids) - len(prefix) - len(suffix)
    if inside > 0 and ids[: len(prefix)] == prefix and ids[len(ids) - len(suffix) :] == suffix:
        return ids[len(prefix) : len(ids) - len(suffix)]
    return tokenizer(request, add_special_tokens=False)["input_ids"]


def _template_suffix(tokenizer) -> list[int]:
    """Token ids the chat template puts after a user message (end of turn, the assistant's opening)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": PLACEHOLDER}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer(text[text.index(PLACEHOLDER) + len(PLACEHOLDER) :], add_special_tokens=False)["input_ids"]


def _ngrams(ids: Sequence[int], n: int) -> set[tuple[int, ...]]:
    return {tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)}


class LeakFilter:
    """The token runs that would leak `requests` (token ids): every `ngram`-token run of each, or the whole
    request when it is shorter. `find(prompt)` names the first request a prompt leaks, or None."""

    def __init__(self, requests: Sequence[Sequence[int]], ngram: int = NGRAM):
        self.runs: dict[tuple[int, ...], list[int]] = {}  # a run -> every request that has it, in order
        for index, ids in enumerate(requests):
            for run in (_ngrams(ids, ngram) if len(ids) >= ngram else {tuple(ids)}):
                self.runs.setdefault(run, []).append(index)
        self.lengths = sorted({len(run) for run in self.runs})

    def find(self, prompt: Sequence[int]) -> tuple[int, tuple[int, ...]] | None:
        """(request index, shared run) for the first run of `prompt` that leaks a request, else None."""
        prompt = list(prompt)
        for n in self.lengths:
            for i in range(len(prompt) - n + 1):
                indices = self.runs.get(tuple(prompt[i : i + n]))
                if indices:
                    return indices[0], tuple(prompt[i : i + n])
        return None


def heldout_filter(tokenizer, requests: Sequence[str] = HELDOUT_REQUESTS, ngram: int = NGRAM) -> LeakFilter:
    """A LeakFilter of `requests` (default: the hand-written ones) as the tokenizer's chat template holds them."""
    return LeakFilter([request_ids(tokenizer, r) for r in requests], ngram)


def find_leaks(
    requests: Sequence[Sequence[int]], train_prompts: Iterable[Sequence[int]], ngram: int = NGRAM
) -> dict[int, tuple[int, ...]]:
    """{request index: a token run it shares with a training prompt} for every leaked request.

    A request of at least `ngram` tokens leaks when any of its `ngram`-token runs occurs in a training
    prompt; a shorter one when its whole token sequence does.
    """
    leak_filter = LeakFilter(requests, ngram)
    leaks: dict[int, tuple[int, ...]] = {}
    for prompt in train_prompts:
        prompt = list(prompt)
        for n in leak_filter.lengths:
            for i in range(len(prompt) - n + 1):
                run = tuple(prompt[i : i + n])
                for index in leak_filter.runs.get(run, ()):  # every request with this run leaks, not the first only
                    leaks.setdefault(index, run)
    return leaks


def check_disjoint(tokenizer, requests: Sequence[str], train_records: Iterable[Record], ngram: int = NGRAM) -> None:
    """Raises HeldOutLeakError when a request shares `ngram` tokens with a training prompt (see find_leaks)."""
    leaks = find_leaks([request_ids(tokenizer, r) for r in requests],
                       (record.ids[: record.prompt_len] for record in train_records), ngram)
    if leaks:
        named = "; ".join(f"{requests[i]!r} (shares {tokenizer.decode(list(run))!r})" for i, run in sorted(leaks.items()))
        raise HeldOutLeakError(
            f"{len(leaks)} held-out request(s) share a run of {ngram} tokens (or all their tokens) with a training "
            f"prompt, so the evaluation would measure recall: {named}. Remove them from the held-out requests "
            "(or the training data), or write new ones."
        )


def without_leaks(
    tokenizer, requests: Sequence[str], train_records: Iterable[Record], ngram: int = NGRAM
) -> tuple[list[str], list[str]]:
    """(the requests that share no `ngram`-token run with a training prompt, those that do), each in order: for
    Magpie requests, which the target wrote at random and which may repeat its everyday phrasing; hand-written
    ones are checked with `check_disjoint`, which refuses instead."""
    leaks = find_leaks([request_ids(tokenizer, r) for r in requests],
                       (record.ids[: record.prompt_len] for record in train_records), ngram)
    return ([r for i, r in enumerate(requests) if i not in leaks], [r for i, r in enumerate(requests) if i in leaks])


def read_seeds(paths: Iterable[str | Path]) -> set[int]:
    """The base seeds recorded in data files (`magpie_data` writes a "seed" per line)."""
    seeds = set()
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    seed = json.loads(line).get("seed")
                    if seed is not None:
                        seeds.add(int(seed))
    return seeds


def check_seeds(heldout_paths: Sequence[str | Path], train_paths: Sequence[str | Path]) -> None:
    """Raises HeldOutLeakError when a held-out Magpie file was made from a seed a training file records."""
    shared = read_seeds(heldout_paths) & read_seeds(train_paths)
    if shared:
        raise HeldOutLeakError(
            f"held-out requests were made from seed(s) {sorted(shared)} that the training data also used; make "
            "them again with a seed no training file records (magpie-data --seed)."
        )


def read_requests(paths: Sequence[str | Path]) -> list[str]:
    """The "prompt" (request text) of every line of Magpie data files, in order, without repeats."""
    requests: dict[str, None] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                obj = json.loads(line) if line.strip() else {}
                if obj.get("prompt"):
                    requests.setdefault(obj["prompt"], None)
    return list(requests)


@torch.inference_mode()
def evaluate_heldout(
    target,
    tokenizer,
    head,
    requests: Sequence[str],
    train_records: Sequence[Record],
    *,
    max_new_tokens: int = 96,
    batch_size: int = 16,
    depth: int = 4,
    ngram: int = NGRAM,
    responses: str | Path | None = None,
    progress: bool = True,
) -> dict:
    """Check disjointness (raises HeldOutLeakError), answer `requests` greedily with the fp32 `target`
    (kept in `responses` JSONL when given, so a rerun at the same `max_new_tokens` reuses them) and measure
    `head` along the answers.

    Returns:
        {"alpha_gamma1", "per_depth" (1..depth), "coverage" {1, 2, 4, 8}, "positions", "requests", ...}.
    """
    from .feature_head import evaluate_feature_head
    from .features import features_in_memory
    from .generation import Sampling, stream_generate

    check_disjoint(tokenizer, requests, train_records, ngram)
    eos = eos_ids(target, tokenizer)
    by_prompt: dict[str, Record] = {}
    if responses is not None and Path(responses).exists():  # answers kept by an earlier run at the same cap
        for line in Path(responses).read_text().splitlines():
            obj = json.loads(line)
            if obj.get("max_new_tokens") == max_new_tokens:
                by_prompt[obj["prompt"]] = Record(obj["ids"], obj["prompt_len"], True, obj["prompt"])
    todo = [r for r in requests if r not in by_prompt]
    out = open(responses, "a") if responses is not None else None
    try:
        for index, ids, response in stream_generate(
            target, (encode_prompt(tokenizer, r) for r in todo), eos_ids=eos, max_new_tokens=max_new_tokens,
            batch_size=batch_size, sampling=Sampling(),
        ):
            record = Record(ids + response, len(ids), True, todo[index])
            by_prompt[record.prompt] = record
            if out is not None:
                out.write(json.dumps({"ids": record.ids, "prompt_len": record.prompt_len, "greedy": True,
                                      "prompt": record.prompt, "max_new_tokens": max_new_tokens}) + "\n")
                out.flush()
    finally:
        if out is not None:
            out.close()
    records = [by_prompt[r] for r in requests]
    num_layers = target.config.get_text_config().num_hidden_layers
    layers = sorted({*head.feature_layers_for(num_layers), num_layers})
    store = features_in_memory(target, records, layers, progress=progress)
    agreement = evaluate_feature_head(head, target, records, store, depth=depth, max_new_tokens=max_new_tokens)
    return {**agreement.as_dict(), "requests": len(records), "max_new_tokens": max_new_tokens,
            "response_tokens": sum(r.response_len for r in records), "ngram": ngram}
