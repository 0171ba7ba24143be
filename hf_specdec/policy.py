"""How many tokens to draft per step, per row: a fixed gamma, or a length that follows acceptance.

Contract: a policy is a frozen, validated description, safe to reuse across generate() calls; the
per-call state is the [batch] tensor of draft lengths the loop holds (`initial_lengths`, then
`next_lengths` after every verification). A policy decides how many tokens are proposed, never which
are kept, so it cannot change what is generated, only how fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hf_specdec.errors import InvalidGammaError


def _check_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidGammaError(f"{name} must be an int >= {low}, got {value!r}.")


@dataclass(frozen=True, kw_only=True)
class DraftPolicy:
    """Drafts `max_gamma` tokens per row every step; `gamma=4` means `DraftPolicy(max_gamma=4)`.

    Args:
        max_gamma: most tokens drafted per row and step (>= 1).
        min_confidence: confidence stop, in [0, 1]: a row stops drafting after a token its drafter gave
            probability below this, under generate()'s processors (temperature, top-k, ...), as
            llama.cpp's --draft-p-min and transformers' assistant_confidence_threshold do; rows stop
            independently, and the step's drafting ends when every row has stopped or reached its
            length. The doubtful token is still verified (dropping it would bias sampling). 0 disables
            the stop. Only drafters that score their proposals use it (`ModelDrafter`); prompt lookup
            ignores it.
    """

    max_gamma: int = 4
    min_confidence: float = 0.0

    def __post_init__(self) -> None:
        _check_int("max_gamma", self.max_gamma, 1)
        if isinstance(self.min_confidence, bool) or not 0.0 <= self.min_confidence <= 1.0:
            raise InvalidGammaError(f"min_confidence must be a probability in [0, 1], got {self.min_confidence!r}.")

    def initial_lengths(self, batch_size: int, device: torch.device) -> torch.Tensor:
        """[batch] long: each row's draft length for the first step."""
        return torch.full((batch_size,), self.max_gamma, dtype=torch.long, device=device)

    def next_lengths(
        self,
        lengths: torch.Tensor,  # [batch] long, this step's draft lengths
        active: torch.Tensor,  # [batch] bool, rows that took part in this step
        num_drafted: torch.Tensor,  # [batch] long, drafts proposed (<= lengths)
        num_accepted: torch.Tensor,  # [batch] long, drafts accepted
    ) -> torch.Tensor:
        """[batch] long: each row's draft length for the next step, in [1, max_gamma]."""
        return lengths


@dataclass(frozen=True, kw_only=True)
class HeuristicDraftPolicy(DraftPolicy):
    """transformers' "heuristic" schedule, per row: start at `start_gamma`; after a step in which the
    row's drafts were all accepted draft `increase` more, after a rejection `decrease` fewer, within
    [1, max_gamma]. A row that drafted nothing (prompt lookup found no match) keeps its length.

    `gamma="auto"` means `HeuristicDraftPolicy()`: these defaults, confidence stop at 0.4.

    Unlike transformers, "all accepted" compares with what was drafted, not with the length: a row
    whose draft the confidence stop cut short, and was then fully accepted, still grows.
    """

    max_gamma: int = 16
    min_confidence: float = 0.4
    start_gamma: int = 4
    increase: int = 2
    decrease: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_int("start_gamma", self.start_gamma, 1)
        _check_int("increase", self.increase, 0)
        _check_int("decrease", self.decrease, 0)
        if self.start_gamma > self.max_gamma:
            raise InvalidGammaError(
                f"start_gamma ({self.start_gamma}) must not exceed max_gamma ({self.max_gamma})."
            )

    def initial_lengths(self, batch_size: int, device: torch.device) -> torch.Tensor:
        return torch.full((batch_size,), self.start_gamma, dtype=torch.long, device=device)

    def next_lengths(self, lengths, active, num_drafted, num_accepted) -> torch.Tensor:
        drafted = active & (num_drafted > 0)  # [batch]
        step = torch.where(num_accepted == num_drafted, self.increase, -self.decrease)  # [batch]
        return torch.where(drafted, lengths + step, lengths).clamp(1, self.max_gamma)

