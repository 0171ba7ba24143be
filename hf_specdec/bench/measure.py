"""Timing primitives: tokens/s of a generate() callable over a prompt set, single-step costs, the bound.

Contract: `time_side_by_side` warms up each method, then times every batch of the same left-padded
prompts with the same seeds, the methods interleaved, and counts generated tokens up to each row's first
EOS; nothing here knows which method it times. `paired_speedup` compares two of its measurements call by
call, and `median_interval` says how far the noise leaves that median uncertain. `per_token_alpha` and
`leviathan_speedup` give the bound (step costs come from `hf_specdec.distill.step_cost_ms`, which the distill tool
reports too). `first_difference` says where two greedy outputs part and whether the target's own top two logits were
a near-tie there.
"""

from __future__ import annotations

import gc
import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from hf_specdec.stats import SpeculativeStats

#: generate(inputs, stats, **generate_kwargs) -> sequences; `stats` is a SpeculativeStats to fill or None.
GenerateFn = Callable[..., torch.Tensor]

#: Top-two logit gap below which a greedy choice is a near-tie: bf16 rounds logits near 16 to steps of 0.0625,
#: and plain generate() itself flips such ties between batch sizes in half precision.
TIE_TOLERANCE = 0.25


@dataclass(frozen=True)
class Difference:
    """Where a greedy output first parts from plain generate()'s: new-token `index`, the two tokens there, and
    the gap between the target's own top two logits at that point (from a full forward of the prompt and
    plain's tokens before it)."""

    index: int
    plain_token: int | None  # None: plain had ended
    other_token: int | None  # None: the other had ended
    gap: float | None  # None when plain had ended (nothing to compare)

    @property
    def near_tie(self) -> bool:
        return self.gap is not None and self.gap < TIE_TOLERANCE


@torch.no_grad()
def first_difference(target, prompt: list[int], plain: list[int], other: list[int]) -> Difference | None:
    """None when `other` equals `plain` (both new tokens only), else where and how they first differ."""
    if plain == other:
        return None
    first = next(i for i, (a, b) in enumerate(zip(plain + [None], other + [None])) if a != b)
    plain_token = plain[first] if first < len(plain) else None
    other_token = other[first] if first < len(other) else None
    if plain_token is None:
        return Difference(first, None, other_token, None)
    ids = torch.tensor([prompt + plain[:first]], device=target.device)
    top = target(input_ids=ids).logits[0, -1].float().topk(2).values
    return Difference(first, plain_token, other_token, float(top[0] - top[1]))


@dataclass
class Measurement:
    """One method timed over one prompt set: each timed call's wall time, the rest derived from it."""

    outputs: list[list[int]]  # per prompt, the generated tokens that were counted
    stats: SpeculativeStats | None  # hf_specdec's counters, None for other methods
    call_seconds: tuple[tuple[float, ...], ...]  # [repeat][batch] wall time of each timed call
    batch_tokens: tuple[int, ...]  # [batch] tokens counted in each batch's call

    @property
    def tokens(self) -> int:
        """Generated tokens, each row counted up to and including its first EOS."""
        return sum(self.batch_tokens)

    @property
    def repeat_seconds(self) -> tuple[float, ...]:
        """Wall time of each repeat's calls, in order."""
        return tuple(sum(repeat) for repeat in self.call_seconds)

    @property
    def seconds(self) -> float:
        """Wall time of the timed calls: the median over repeats."""
        return statistics.median(self.repeat_seconds)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @classmethod
    def mean_of(cls, timings: list[Measurement]) -> Measurement:
        """One method timed several times in one group (the same batches, the same tokens) as one baseline:
        each call's time is the mean of its timings' calls on that batch in that repeat, so a ratio to it
        carries less of the baseline's per-call noise; outputs and stats are the first timing's."""
        first = timings[0]
        if any(timing.batch_tokens != first.batch_tokens for timing in timings):
            raise ValueError("timings of one baseline must count the same tokens on every batch")
        call_seconds = tuple(
            tuple(statistics.fmean(calls) for calls in zip(*repeats))
            for repeats in zip(*(timing.call_seconds for timing in timings))
        )
        return cls(outputs=first.outputs, stats=first.stats, call_seconds=call_seconds, batch_tokens=first.batch_tokens)

    @property
    def repeat_tokens_per_s(self) -> list[float]:
        """tokens/s of each repeat (every repeat generates the same tokens: outputs come from the first)."""
        return [self.tokens / seconds if seconds > 0 else 0.0 for seconds in self.repeat_seconds]


def generated_tokens(sequences: torch.Tensor, prompt_len: int, eos_ids: set[int]) -> list[list[int]]:
    """Each row's new tokens (sequences [rows, length]) up to and including its first EOS."""
    rows = []
    for row in sequences[:, prompt_len:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in eos_ids), len(row))
        rows.append(row[:end])
    return rows


def paired_ratios(measured: Measurement, baseline: Measurement) -> list[float]:
    """`measured`'s speed over `baseline`'s, call by call: the ratio of their tokens/s on each batch in each repeat.
    Both must come from one `time_side_by_side`, where the two calls of a pair ran next to each other."""
    return [
        (measured.batch_tokens[batch] / ours) / (baseline.batch_tokens[batch] / theirs)
        for our_repeat, their_repeat in zip(measured.call_seconds, baseline.call_seconds)
        for batch, (ours, theirs) in enumerate(zip(our_repeat, their_repeat))
        if ours > 0 and theirs > 0 and baseline.batch_tokens[batch] > 0
    ]


def paired_speedup(measured: Measurement, baseline: Measurement) -> float:
    """The median of `paired_ratios`: a burst of load that slows a few calls moves a few pairs and not the median
    (a ratio of totals takes the burst whole)."""
    ratios = paired_ratios(measured, baseline)
    return statistics.median(ratios) if ratios else 0.0


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float, float] | None:
    """A distribution-free confidence interval for the median of the population `values` were drawn from (independent
    draws): the j-th smallest and j-th largest value, with j the largest whose coverage 1 - 2 P(Binomial(n, 1/2) < j)
    is at least `level`. Returns (low, high, coverage), or None where even the extremes cover less (n <= 4 at 0.9).
    8 values: the 2nd smallest and 2nd largest, 93 %; 16: the 5th, 92 %."""
    n, ranked = len(values), sorted(values)
    below, best = 0.0, None  # below = P(Binomial(n, 1/2) < j)
    for j in range(1, n // 2 + 1):
        below += math.comb(n, j - 1) / 2**n
        if 1 - 2 * below < level:
            break
        best = (ranked[j - 1], ranked[n - j], 1 - 2 * below)
    return best


def call_orders(methods: int, calls: int, seed: int = 0) -> list[list[int]]:
    """The order in which `time_side_by_side` runs its `methods` for each of its `calls` batch calls (repeats x batches,
    in turn): a fresh shuffle per call, seeded by `seed`, so every run of one group repeats the same orders."""
    order, shuffle, drawn = list(range(methods)), random.Random(seed).shuffle, []
    for _ in range(calls):
        shuffle(order)
        drawn.append(list(order))
    return drawn


def time_side_by_side(
    generates: list[GenerateFn],
    batches: list[dict[str, torch.Tensor]],
    generate_kwargs: dict,
    eos_ids: set[int],
    *,
    seed: int = 0,
    repeats: int = 1,
    warmup_tokens: int = 8,
    collect_stats: list[bool] | None = None,
) -> list[Measurement]:
    """Times `generates` over `batches`, each after one short warm-up call on the first batch, side by
    side: each batch is generated by every method in turn before the next batch, so a machine whose speed
    drifts (another process, a throttled core) slows every method alike and their ratios hold. The order is
    shuffled for every batch (seeded: `seed`), so no method always runs right after the same other one,
    and the garbage of one call is collected before the next is timed: a call ran measurably slower right
    after a drafting one. One method is simply timed alone.

    Batch i is generated with the global RNG seeded `seed + i`, so every method sees the same seeds.
    Returns one Measurement per method: outputs and stats (where `collect_stats` says) from the first
    repeat, and each call's time (`call_seconds`, [repeat][batch]; `seconds` is the median total over
    `repeats`).
    """
    collect_stats = collect_stats or [False] * len(generates)
    warmup_kwargs = {**generate_kwargs, "max_new_tokens": min(warmup_tokens, generate_kwargs["max_new_tokens"])}
    for generate in generates:
        torch.manual_seed(seed)
        generate(batches[0], None, **warmup_kwargs)

    stats = [SpeculativeStats() if wanted else None for wanted in collect_stats]
    calls = [[[0.0] * len(batches) for _ in range(repeats)] for _ in generates]  # [method][repeat][batch] seconds
    outputs: list[list[list[int]]] = [[] for _ in generates]
    batch_tokens: list[list[int]] = [[] for _ in generates]  # [method][batch]
    orders = iter(call_orders(len(generates), repeats * len(batches), seed))
    for repeat in range(repeats):
        for index, inputs in enumerate(batches):
            for method in next(orders):
                gc.collect()
                torch.manual_seed(seed + index)
                start = time.perf_counter()
                sequences = generates[method](inputs, stats[method] if repeat == 0 else None, **generate_kwargs)
                calls[method][repeat][index] = time.perf_counter() - start
                if repeat == 0:
                    rows = generated_tokens(sequences, inputs["input_ids"].shape[1], eos_ids)
                    outputs[method].extend(rows)
                    batch_tokens[method].append(sum(len(row) for row in rows))
    return [
        Measurement(
            outputs=rows, stats=method_stats, call_seconds=tuple(map(tuple, method_calls)), batch_tokens=tuple(tokens)
        )
        for rows, method_stats, method_calls, tokens in zip(outputs, stats, calls, batch_tokens)
    ]


def per_token_alpha(stats: SpeculativeStats, gamma: int) -> float:
    """Leviathan et al.'s alpha: the probability that a draft is accepted given that the ones before it
    were (not accepted / drafted, which falls with gamma). At a fixed `gamma` a step is a run of
    acceptances ended by one rejection unless all `gamma` drafts were accepted, so
    alpha = accepted / (accepted + rejections). Steps cut short near max_new_tokens count as rejections
    too; capping rejections at drafted - accepted removes those that drafted nothing (exact at gamma 1)."""
    accepted = int(stats.accepted.sum())
    rejections = min(int(stats.histogram[:gamma].sum()), int(stats.drafted.sum()) - accepted)
    return accepted / max(accepted + rejections, 1)


def leviathan_speedup(alpha: float, gamma: int, cost_ratio: float, verify_ratio: float = 1.0) -> float:
    """Expected walltime improvement (1 - a^(g+1)) / ((1 - a)(g c + v)) of Leviathan et al. (2023), eq. 3.

    Their bound takes v = 1: scoring g + 1 tokens costs one single-token target step, as on a GPU with
    spare compute. `verify_ratio` is the measured v (a (g+1)-token target forward / a 1-token one),
    which on a CPU is well above 1; the bound with it is what the hardware allows."""
    expected_tokens = gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return expected_tokens / (gamma * cost_ratio + verify_ratio)
