"""Timing primitives: tokens/s of a generate() callable over a prompt set, single-step costs, the bound.

Contract: `time_generate` warms up, then times every batch of the same left-padded prompts with the
same seeds, and counts generated tokens up to each row's first EOS; nothing here knows which method
it times. `per_token_alpha` and `leviathan_speedup` give the bound (step costs come from
`hf_specdec.distill.step_cost_ms`, which the distill tool reports too).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from hf_specdec.stats import SpeculativeStats

#: generate(inputs, stats, **generate_kwargs) -> sequences; `stats` is a SpeculativeStats to fill or None.
GenerateFn = Callable[..., torch.Tensor]


@dataclass
class Measurement:
    """One method timed over one prompt set."""

    tokens: int  # generated tokens, each row counted up to and including its first EOS
    seconds: float  # wall time of the timed calls (median over repeats)
    outputs: list[list[int]]  # per prompt, the generated tokens that were counted
    stats: SpeculativeStats | None  # hf_specdec's counters, None for other methods

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def generated_tokens(sequences: torch.Tensor, prompt_len: int, eos_ids: set[int]) -> list[list[int]]:
    """Each row's new tokens (sequences [rows, length]) up to and including its first EOS."""
    rows = []
    for row in sequences[:, prompt_len:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in eos_ids), len(row))
        rows.append(row[:end])
    return rows


def time_generate(
    generate: GenerateFn,
    batches: list[dict[str, torch.Tensor]],
    generate_kwargs: dict,
    eos_ids: set[int],
    *,
    seed: int = 0,
    repeats: int = 1,
    warmup_tokens: int = 8,
    collect_stats: bool = False,
) -> Measurement:
    """Times `generate` over `batches` after one short warm-up call on the first batch.

    Batch i is generated with the global RNG seeded `seed + i`, so every method sees the same seeds.
    Outputs and stats come from the first repeat; `seconds` is the median total over `repeats`.
    """
    warmup_kwargs = {**generate_kwargs, "max_new_tokens": min(warmup_tokens, generate_kwargs["max_new_tokens"])}
    torch.manual_seed(seed)
    generate(batches[0], None, **warmup_kwargs)

    totals, outputs = [], []
    stats = SpeculativeStats() if collect_stats else None
    for repeat in range(repeats):
        total = 0.0
        for index, inputs in enumerate(batches):
            torch.manual_seed(seed + index)
            start = time.perf_counter()
            sequences = generate(inputs, stats if repeat == 0 else None, **generate_kwargs)
            total += time.perf_counter() - start
            if repeat == 0:
                outputs.extend(generated_tokens(sequences, inputs["input_ids"].shape[1], eos_ids))
        totals.append(total)
    return Measurement(
        tokens=sum(len(row) for row in outputs), seconds=statistics.median(totals), outputs=outputs, stats=stats
    )


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
