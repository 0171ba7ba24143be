"""How many tokens to draft per step, per row: a fixed gamma, a length that follows acceptance, or the
length that maximizes committed tokens per millisecond on the measured costs of this machine.

Contract: a policy is a frozen, validated description, safe to reuse across generate() calls and
threads; `policy.start(...)` gives each call a `DraftSchedule` holding what the call learns (each row's
next draft length, acceptance so far). A policy decides how many tokens are proposed, never which are
kept, so it cannot change what is generated, only how fast.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

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

    def start(
        self, target, drafter, batch_size: int, device: torch.device, max_new_tokens: int | None = None,
        do_sample: bool = False, vocab_size: int | None = None, generation_config=None,
    ) -> "DraftSchedule":
        """This call's schedule (`target`, `drafter`, `max_new_tokens`, `do_sample`, `vocab_size` (the width the
        call's compatibility check agreed on) and the call's `generation_config` are for policies that use them)."""
        return DraftSchedule(self, batch_size, device)

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



class DraftSchedule:
    """One call's draft lengths: `lengths` [batch] for the next step, `update` after every verification.
    `drafting_over` turns True once the call will draft nothing more (its lengths stay 0 to the end), so the loop can
    let the drafter go; a schedule that cannot tell leaves it False."""

    drafting_over: bool = False

    def __init__(self, policy: DraftPolicy, batch_size: int, device: torch.device):
        self.policy = policy
        self.lengths = policy.initial_lengths(batch_size, device)  # [batch] long

    def update(self, active: torch.Tensor, num_drafted: torch.Tensor, num_accepted: torch.Tensor) -> None:
        self.lengths = self.policy.next_lengths(self.lengths, active, num_drafted, num_accepted)

    def speedup_to_beat(self, active: torch.Tensor) -> float | None:
        """How much faster than plain steps a plain step over fewer rows must make the `active` rows ([batch] bool) for
        the loop to end the call's drafting and let rows that are done leave the batch (`loop._rows_to_keep`): what the
        next step's drafts are expected to give (1.0 when it drafts nothing), or None: the loop follows the schedule to
        the call's end (a caller's policy)."""
        return None


def expected_tokens(alpha: torch.Tensor, num_drafts: int) -> torch.Tensor:
    """Tokens a step commits with `num_drafts` drafts when each is accepted with probability `alpha`
    once the ones before it were: 1 + a + ... + a^k (Leviathan et al.)."""
    return sum(alpha**i for i in range(num_drafts + 1))


def best_draft_length(alpha: torch.Tensor, costs, max_gamma: int, min_gain: float = 0.0) -> int:
    """The number of drafts k in [0, max_gamma] that maximizes the committed tokens of the rows whose
    acceptance rates are `alpha` ([rows]) per millisecond: sum(expected_tokens) / costs.step_ms(k) (a whole
    loop step with k drafts: measured loop steps, or k * draft_ms + verify_ms(k + 1) for costs pinned by
    hand). A batched forward costs every row the same, so one k serves all rows. A length must beat the
    best shorter one (0: a plain step) by `min_gain` (a fraction) to be chosen: guards against drafting on noise
    in the measured costs and, in batches, on what the summed tokens do not see (the policy passes
    `CostAwareDraftPolicy.draft_gain`)."""
    # tokens[k] = sum over rows of 1 + a + ... + a^k, for every k at once (one pass: it runs every step).
    powers = alpha.double()[:, None] ** torch.arange(max_gamma + 1, dtype=torch.float64)  # [rows, max_gamma + 1]
    tokens = powers.cumsum(dim=1).sum(dim=0).tolist()
    best, best_rate = 0, tokens[0] / costs.step_ms(0)
    for k in range(1, max_gamma + 1):
        rate = tokens[k] / costs.step_ms(k)
        if rate > best_rate * (1 + min_gain):
            best, best_rate = k, rate
    return best


@dataclass(frozen=True, kw_only=True)
class CostAwareDraftPolicy(DraftPolicy):
    """The default when `gamma=` is not given: every step, the draft length (0 = a plain target step) that
    maximizes committed tokens per millisecond, from each row's acceptance so far and the costs of a
    drafter step and of target forwards of each width, timed on the user's own models and device.

    Costs are measured once per target, drafter, device, dtype, batch size, sampling mode and torch thread
    count (a few timed forwards on scratch caches and timed steps of scratch generate() calls with 0, 1 and 2
    drafts, before the first step; `hf_specdec.calibration`) and reused, so two identical calls in one
    process decide identically. A step with k drafts is priced from the measured loop steps, so the
    drafter's forward and the loop's own work per drafted token count, not only the target's forwards.
    A call whose drafts have all been rejected (`give_up_after` rejections or more, every row counted, and
    not one accepted draft) drafts nothing but probes, whatever the costs say: an acceptance that cannot
    be told from zero never pays, however cheap a wider forward measures (a 2-token forward can measure
    cheaper than a 1-token one on CPUs that compute bf16). Acceptance is tracked per row as decayed counts
    (`decay` per step, starting from a prior of `prior_alpha` worth `prior_weight` drafts per row: each row of a
    batch learns its acceptance over as many steps as a single row does. A prior shared among the rows (worth
    prior_weight / b drafts each) let one step in which the rows of a batch of 4 all missed (7 % of the steps of
    a head right 48 % of the time) stop a drafter that pays; a useless drafter is still dropped after
    `give_up_after` rejections in all, one or two steps of a batch). A call starts
    at one draft and drafts at most one more than a row has accepted so far, so a drafter that turns out
    useless costs single drafts before it is dropped. After choosing
    plain steps it probes with one draft, so a drafter that becomes useful later is used again. When a run
    of drafting steps ends although drafting pays on the evidence (the run's own acceptance, or the call's
    so far, is at least the break-even acceptance of one draft: an unlucky stretch pulled the decayed
    estimate down), the first probe comes after `probe_after` plain steps. Otherwise the first run waits as
    many plain steps as keep a probe's expected net cost (a drafter step and a 2-token instead of a 1-token
    forward, less what its draft saves at the call's acceptance so far, in a batch its slowest row's: the batch
    waits for that row; plus the drafter's catch-up on the tokens committed meanwhile, `StepCosts.catch_up_ms`)
    within `probe_budget` of the plain steps' time (at least `probe_after`): a drafter just
    short of the break-even is probed again soon, one that accepted nothing waits the whole extra cost's worth.
    Each probe that does not pay doubles the wait (at most `max_probe_interval`). A probe that falls due when
    fewer steps are left in the call (`max_new_tokens`) than the wait before it is not made, nor any later one:
    what a probe can win comes from the steps after it. Once no draft can come in the call any more, the schedule
    says so (`drafting_over`) and the loop lets the drafter go. In a batch a probe drafts for every row, so some row
    accepts by chance even when the drafter does not pay; acceptance counts, not a single accepted token, decide.
    A call's first run of drafting steps that has accepted a draft does not end before its rows have tried as
    many drafts as the priors of up to `THIN_RUN_ROWS` rows are worth: a few unlucky steps would otherwise
    cost the rest of the call.

    Args:
        max_gamma: most drafts per step considered.
        min_gain: a draft length must beat the best shorter one (0: a plain step) by this fraction of
            its rate (guards against drafting on noise in the measured costs).
        min_batch_gain: with 2 to 4 active rows, drafting must beat a plain step, and each longer draft the best
            shorter one, by this fraction (at least `min_gain`); with more rows by this fraction times the square of
            `slowest_row_spread(rows) / slowest_row_spread(4)` (batch 8: 1.87x, 16: 2.84x): a batch call lasts as long
            as its slowest row, and the tokens summed over rows do not see that. Why 8 %, and why squared: with the
            shipped head (right 0.50 of the time) drafting one token every step on the 48 held-out requests (fp32
            greedy, a row's steps exact at any batch size), a batch of 4 committed 1.37 tokens per forward and a batch
            of 8 1.31, where its rows commit 1.50 per step each: 8.7 % and 13 % short (the slowest row lags by chance,
            and rows differ: in the bench's chat batch of 8 the row that ran longest was the one the head was least
            often right on, 0.23); a bar g covers a shortfall s where 1 + g >= 1 / (1 - s): 9.5 % and 15 %. The
            spread alone grows 1.37x from 4 rows to 8 (10.9 %), its square 1.87x (15.0 %). With 5 % (batch 8: 6.8 %)
            the head drafted at fp32 batch 8 on an AMD EPYC Zen 4 (avx512_bf16, no AMX), where a 1-draft step costs
            1.36 plain steps, and ran 0.941x plain in the bench (docs/bench/issue24/batch-bar/); with 10.9 % 0.955x,
            and in model time (the real loop, steps priced at their calibrated costs) the worst of 16 runs at batch 8
            read 0.958x, against 0.988x with 15 % at about the same mean (docs/bench/issue24/batch-bar/b8_bar.txt).
            Measured on Zen 5 before: at bf16 batch 8 drafting that promised 1-3 % over plain steps ran 0.95-0.97x
            plain (docs/bench/issue24/b8/); at batch 4 on 48 held-out requests the default with a 2 % bar between
            lengths drafted 2 where a chain of 1 ran faster, 1.051x plain against 1.094x with a 5 % bar for every
            length (docs/bench/issue24/chaos/).
        give_up_after: rejections (all rows together) after which a call that has accepted no draft stops
            drafting except for probes.
        prior_alpha: each row's acceptance before its first draft (worth `prior_weight` drafts). None (the default):
            the drafter's own, where it declares one (`Drafter.expected_acceptance`, from `hf_specdec_acceptance` in
            its config.json: `hf-specdec distill` writes the acceptance it measured), else `DEFAULT_PRIOR_ALPHA`. Measured
            (AMD EPYC Zen 5, avx512_bf16, 48 held-out requests): the independent drafter, right 0.24 of the time, ran
            0.968x plain at fp32 batch 4 and 0.958x at bf16 batch 4 from 0.5, 0.996x and 0.994x from its own 0.241, and
            1.079x against 1.113x at bf16 batch 1 (docs/bench/issue24/prior-k/).
        trees: also consider draft trees (EAGLE-2's, `TreeDraftPolicy` shapes) where the drafter drafts them
            and the target takes tree masks: the call then runs in the tree loop when, on the measured costs
            and the prior acceptances, some tree beats the best chain (on CPUs that compute bf16, where a
            forward over 16 tokens costs little more than over 1), and each step picks a plain step, a chain or
            a tree from the acceptance observed per rank of candidate (`hf_specdec.tree_schedule`).
        max_nodes: most drafted nodes of a tree considered.
        prior_ranks: prior acceptance of a drafter's 2nd, 3rd, ... best candidate at a node (the best's is
            `prior_alpha`), worth `prior_weight` observations; its length gives the most children per node.
        costs: a `hf_specdec.calibration.StepCosts` (chains) or `TreeCosts` (chains and trees) to use
            instead of measuring (pins every decision, across processes too).
    """

    max_gamma: int = 6
    min_confidence: float = 0.0
    min_gain: float = 0.02
    min_batch_gain: float = 0.08
    prior_alpha: float | None = None  # None: the drafter's expected_acceptance, else DEFAULT_PRIOR_ALPHA
    prior_weight: float = 4.0
    decay: float = 0.95
    probe_after: int = 4
    max_probe_interval: int = 64
    probe_budget: float = 0.01
    give_up_after: int = 5  # a drafter right 39 % of the time meets 3 rejections first in 23 % of calls, 5 in 8 %
    trees: bool = True
    max_nodes: int = 32
    prior_ranks: tuple[float, ...] = (0.15, 0.08, 0.05)
    costs: object | None = None  # StepCosts, or TreeCosts

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("min_gain", "min_batch_gain", "prior_weight", "probe_budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidGammaError(f"{name} must be a finite number >= 0, got {value!r}.")
        prior, decay = self.prior_alpha, self.decay
        if prior is not None and (isinstance(prior, bool) or not isinstance(prior, (int, float)) or not 0 <= prior <= 1):
            raise InvalidGammaError(f"prior_alpha must be None (the drafter's own) or in [0, 1], got {prior!r}.")
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
            raise InvalidGammaError(f"decay must be in (0, 1], got {decay!r}.")
        _check_int("probe_after", self.probe_after, 1)
        _check_int("give_up_after", self.give_up_after, 1)
        _check_int("max_probe_interval", self.max_probe_interval, self.probe_after)
        if not self.probe_budget > 0:
            raise InvalidGammaError(f"probe_budget must be > 0, got {self.probe_budget!r}.")
        if not isinstance(self.trees, bool):
            raise InvalidGammaError(f"trees must be True or False, got {self.trees!r}.")
        _check_int("max_nodes", self.max_nodes, 1)
        ranks = self.prior_ranks
        if not isinstance(ranks, tuple) or not all(
            isinstance(a, (int, float)) and not isinstance(a, bool) and 0 <= a <= 1 for a in ranks
        ) or (DEFAULT_PRIOR_ALPHA if self.prior_alpha is None else self.prior_alpha) + sum(ranks) > 1:
            raise InvalidGammaError(
                f"prior_ranks must be a tuple of probabilities that sum with prior_alpha to at most 1, got {ranks!r}."
            )

    def for_drafter(self, drafter) -> "CostAwareDraftPolicy":
        """This policy with its prior acceptance settled for `drafter`: `prior_alpha` as given, else the drafter's own
        `expected_acceptance` (None for drafters that declare none, and for `drafter=None`), else `DEFAULT_PRIOR_ALPHA`.
        Where a declared acceptance and `prior_ranks` would sum past 1, the ranks' priors shrink to fit, in proportion."""
        if self.prior_alpha is not None:
            return self
        declared = getattr(drafter, "expected_acceptance", None)
        prior = DEFAULT_PRIOR_ALPHA if declared is None else declared
        ranks, room = self.prior_ranks, 1.0 - prior
        if sum(ranks) > room:
            ranks = tuple(a * room / sum(ranks) for a in ranks)
        return dataclasses.replace(self, prior_alpha=prior, prior_ranks=ranks)

    def draft_gain(self, rows: int) -> float:
        """How much a draft length must beat a plain step, or a shorter draft, by with `rows` active rows: `min_gain`
        alone; in a batch `min_batch_gain`, beyond 4 rows grown as the square of the expected maximum of that many rows'
        step counts (`slowest_row_spread`): the call waits for its slowest row, and the more rows, the further the
        slowest lags by chance and the likelier it is one the drafter is rarely right on (the measured shortfall grew
        1.5x from 4 rows to 8, the spread 1.37x)."""
        if rows <= 1:
            return self.min_gain
        return max(self.min_gain, self.min_batch_gain * max(1.0, slowest_row_spread(rows) / slowest_row_spread(4)) ** 2)

    def widths(self) -> tuple[int, ...]:
        """Target forward widths to time (others are interpolated): 1 .. 4, then every other."""
        return tuple(sorted({*range(1, min(self.max_gamma + 1, 4) + 1), *range(5, self.max_gamma + 2, 2), self.max_gamma + 1}))

    def tree_widths(self) -> tuple[int, ...]:
        """The widths above and every tree size the default considers (up to max_nodes + 1, the root included)."""
        from hf_specdec.tree_schedule import NODE_COUNTS

        sizes = {nodes + 1 for nodes in NODE_COUNTS if nodes <= self.max_nodes} | {self.max_nodes + 1}
        return tuple(sorted({*self.widths(), *sizes}))

    def start(
        self, target, drafter, batch_size: int, device: torch.device, max_new_tokens: int | None = None,
        do_sample: bool = False, vocab_size: int | None = None, generation_config=None,
        trees_possible: bool | Callable[[], bool] = False,
    ) -> "CostAwareSchedule":
        """This call's schedule: a `CostAwareTreeSchedule` (run by the tree loop) when `trees` is on, the loop found
        that this target and drafter can draft trees (`trees_possible`, or a function that finds out: asked only
        where trees might pay) and the measured costs say trees pay on the prior acceptances
        (`tree_schedule.trees_pay`); else a chain schedule. Tree costs are timed only where the chain's costs, read
        optimistically for trees, leave them a chance (`tree_schedule.trees_might_pay`)."""
        from hf_specdec.calibration import TreeCosts, step_costs, tree_costs
        from hf_specdec.tree_schedule import CostAwareTreeSchedule, trees_might_pay, trees_pay

        policy = self.for_drafter(drafter)  # the prior settled: the schedules read policy.prior_alpha

        @functools.cache
        def possible() -> bool:
            return bool(trees_possible() if callable(trees_possible) else trees_possible)

        costs = policy.costs
        if costs is None:
            costs = step_costs(target, drafter, batch_size, device, policy.widths(), do_sample, vocab_size, generation_config)
            if policy.trees and trees_might_pay(policy, costs) and possible():
                costs = tree_costs(target, drafter, batch_size, device, costs, policy.tree_widths(), do_sample, vocab_size,
                                   generation_config) or costs  # None: the tree loop's steps could not be timed
        if isinstance(costs, TreeCosts):
            if policy.trees and trees_pay(policy, costs, costs.chain) and possible():
                return CostAwareTreeSchedule(policy, costs, batch_size, device, max_new_tokens)
            costs = costs.chain
        return CostAwareSchedule(policy, costs, batch_size, device, max_new_tokens)


class CostAwareSchedule(DraftSchedule):
    """CostAwareDraftPolicy's state for one call: decayed per-row acceptance counts and the probe timer."""

    def __init__(
        self, policy: CostAwareDraftPolicy, costs, batch_size: int, device: torch.device, max_new_tokens: int | None = None
    ):
        self.policy, self.costs = policy, costs  # settled by `start`: prior_alpha is a number
        self.max_new_tokens = max_new_tokens  # None: the call's length is unknown, probes are never skipped
        self._committed = torch.zeros(batch_size, dtype=torch.long)  # [batch] tokens committed, as of the last full update
        self.accepted = torch.zeros(batch_size, dtype=torch.float64)  # [batch] decayed accepted drafts
        self.rejected = torch.zeros(batch_size, dtype=torch.float64)  # [batch] decayed rejections
        self.total_accepted = torch.zeros(batch_size, dtype=torch.long)  # [batch] drafts accepted in this call
        self.total_rejected = torch.zeros(batch_size, dtype=torch.long)  # [batch] rejections in this call
        # The first wait before any evidence: as many plain steps as keep a probe's extra cost within the budget.
        plain_ms, probe_ms = costs.step_ms(0), costs.step_ms(1)
        self.first_interval = self._budgeted_interval(0.0)
        self.probe_interval = self.first_interval
        # Drafting pays on average when each row's per-token acceptance reaches this (one draft vs a plain
        # step); never below 0, so that accepting nothing never counts as paying.
        self.break_even = max(0.0, probe_ms * (1 + policy.draft_gain(batch_size)) / plain_ms - 1)
        self.plain_steps = 0  # plain steps since the last draft
        self.run_accepted = self.run_rejected = 0  # in the current (or last) run of drafting steps
        self.run_probed = False  # the current (or last) run began with a probe
        self.stopped = False  # drafting has stopped once in this call (its first run is over)
        self.device = device
        self._active = torch.ones(batch_size, dtype=torch.bool)  # the rows the last decision was made for
        self._skipped = 0  # plain steps that took the shortcut in `update` since the last full update
        self.lengths = self._lengths(self._active, probing=False)
        self.drafting_over = self._drafts_no_more()

    def alpha(self) -> torch.Tensor:
        """[batch] each row's estimated probability that a draft is accepted after accepted ones."""
        weight = self.policy.prior_weight  # per row: each row learns from its own drafts as a single row does
        return (self.accepted + self.policy.prior_alpha * weight) / (self.accepted + self.rejected + weight)

    def _lengths(self, active: torch.Tensor, probing: bool) -> torch.Tensor:
        rows = active.cpu()
        k = 0
        if rows.any():
            # Longer drafts only as acceptances come in: one more than the drafts a row accepted so far.
            longest = min(self.policy.max_gamma, 1 + int(self.total_accepted[rows].max()))
            # In a batch the bar is min_batch_gain, for leaving plain steps and for every longer draft alike.
            k = best_draft_length(self.alpha()[rows], self.costs, longest, self.policy.draft_gain(int(rows.sum())))
            if self.given_up():
                k = 0
            if k == 0 and probing:
                k = 1
        return torch.full(rows.shape, k, dtype=torch.long, device=self.device)

    def speedup_to_beat(self, active: torch.Tensor) -> float:
        """The rate of the tokens the next step's drafts are expected to commit (each row's `alpha`) over a plain step's,
        by the measured step costs, raised by the bar a draft must clear over a plain step here (`draft_gain`): ending
        the call's drafting cannot be undone, and a forward's cost by row count is measured apart from the loop's steps.
        1.0 when it drafts nothing. In a bf16 batch of 8 on Zen 4 without the bar, the head was let go with 2 rows left
        at a predicted 1.27x, and they took 4 plain steps where 2 drafting ones would have done (-3 % a call)."""
        k, rows = int(self.lengths.max()), active.cpu()
        if k == 0 or not rows.any():
            return 1.0
        left = int(rows.sum())
        tokens = float(expected_tokens(self.alpha()[rows], k).sum())
        return tokens / self.costs.step_ms(k) * self.costs.step_ms(0) / left * (1 + self.policy.draft_gain(left))

    def given_up(self) -> bool:
        """The call has seen `give_up_after` rejections or more and not one accepted draft: an acceptance that
        cannot be told from zero, so only probes draft."""
        return int(self.total_accepted.sum()) == 0 and int(self.total_rejected.sum()) >= self.policy.give_up_after

    def update(self, active: torch.Tensor, num_drafted: torch.Tensor, num_accepted: torch.Tensor) -> None:
        drafted = (active & (num_drafted > 0)).cpu()  # [batch]
        same_rows = torch.equal(active.cpu(), self._active)
        if not drafted.any() and same_rows and int(self.lengths.max()) > 0:
            # Asked to draft, the drafter drafted nothing (a feature head before the target's first forward, prompt
            # lookup without a match): no evidence, and not a plain step of ours (the next drafts are no probe).
            self._skipped += 1
            return
        if not drafted.any() and self.plain_steps + 1 < self.probe_interval and same_rows:
            # Another plain step: nothing learned, same rows, no probe due, so the same decision.
            self.plain_steps += 1
            self._skipped += 1
            return
        self._committed += self._skipped * self._active  # one token per row in each plain step skipped above
        self._skipped = 0
        self._active = active.cpu()
        accepted, num_drafted = num_accepted.cpu().double(), num_drafted.cpu()
        decay = self.policy.decay
        # A step is a run of acceptances ended by one rejection, unless every draft was accepted.
        rejections = (accepted < num_drafted).double()
        self.accepted = torch.where(drafted, self.accepted * decay + accepted, self.accepted)
        self.total_accepted += accepted.long() * drafted
        self.total_rejected += rejections.long() * drafted
        self.rejected = torch.where(drafted, self.rejected * decay + rejections, self.rejected)
        probed = bool(drafted.any()) and self.plain_steps > 0  # drafts after plain steps: a probe
        if probed:
            self.run_accepted = self.run_rejected = 0
            self.run_probed = True
        step_accepted = int(accepted[drafted].sum())
        self.run_accepted += step_accepted
        self.run_rejected += int(rejections[drafted].sum())
        self.plain_steps = 0 if drafted.any() else self.plain_steps + 1
        self._committed += (accepted.long() + 1) * self._active
        probing = self.plain_steps >= self.probe_interval
        if probing and self._steps_left() < self.probe_interval:
            # Too late to pay back: a probe's cost was budgeted against the wait before it, and what it can
            # win comes from the steps after it. No probe for the rest of the call (plain steps stay cheap).
            probing, self.probe_interval = False, math.inf
        self.lengths = self._lengths(active, probing)
        if drafted.any() and int(self.lengths.max()) == 0 and self._thin_first_run():
            self.lengths = torch.ones_like(self.lengths)  # too little evidence yet to stop a drafter that accepts
        if drafted.any() and int(self.lengths.max()) == 0:  # drafting stops here: when to look again
            self.stopped = True
            policy = self.policy
            call_rate = _rate(int(self.total_accepted.sum()), int(self.total_rejected.sum()))
            paying = max(_rate(self.run_accepted, self.run_rejected), call_rate) >= self.break_even
            paying = paying and int(self.total_accepted.sum()) > 0  # accepting nothing never pays
            if paying and not (probed and step_accepted == 0):  # a dip of a drafter that pays: look again soon
                self.probe_interval = policy.probe_after
            elif self.run_probed:  # a probe that accepted nothing, or did not pay: wait twice as long
                self.probe_interval = min(2 * self.probe_interval, policy.max_probe_interval)
            else:  # the call's first run did not pay: wait as long as the probe budget says, at its acceptance
                self.probe_interval = self._budgeted_interval(self._slowest_rate())
        self.drafting_over = self._drafts_no_more()

    def _drafts_no_more(self) -> bool:
        """Whether this call will draft nothing more, as of a full update (its plain steps until the next one change
        nothing it reads): no draft now; no probe to come (one is made only while as many steps are left as its wait,
        and each plain step brings the wait one step closer and leaves at least one step fewer); and no set of the
        active rows on which a draft pays: rows only finish in plain steps and only drafts change an estimate, so the
        best a subset can do is its most often right row alone, under the smallest bar (`min_gain`). Then the loop's
        plain steps need neither the drafter's catch-up nor the target's features for it."""
        if int(self.lengths.max()) > 0:
            return False
        wait = self.probe_interval - self.plain_steps  # plain steps until the next probe falls due
        if self.probe_interval != math.inf and self._steps_left() - wait >= self.probe_interval:
            return False  # the probe will be made (a call of unknown length has infinitely many steps left)
        rows = self._active
        if self.given_up() or not rows.any():
            return True
        best_row = self.alpha()[rows].max()[None]  # [1]
        return best_draft_length(best_row, self.costs, self.policy.max_gamma, self.policy.min_gain) == 0

    def _thin_first_run(self) -> bool:
        """The call's first run of drafting steps has accepted drafts, but its active rows have tried fewer drafts
        between them than the priors of `THIN_RUN_ROWS` rows are worth (`prior_weight` each; of each row in smaller
        batches): too little evidence to end the run, which would wait a probe interval (often the rest of the call)
        on a few unlucky steps. A drafter that accepted nothing stops as before (`give_up_after`)."""
        if self.stopped or int(self.total_accepted.sum()) == 0:
            return False
        tried = int((self.total_accepted + self.total_rejected)[self._active].sum())
        return tried < self.policy.prior_weight * min(int(self._active.sum()), THIN_RUN_ROWS)

    def _slowest_rate(self) -> float:
        """The call's per-token acceptance so far in its slowest active row (one row: the call's): what a probe's
        draft is credited with. A batch runs until its slowest row is done, so the other rows' accepted drafts
        save it no step (a CPU step costs the same however many of its rows are still active)."""
        tried = self.total_accepted + self.total_rejected  # [batch]
        rows = self._active & (tried > 0)
        return float((self.total_accepted[rows].double() / tried[rows]).min()) if rows.any() else 0.0

    def _budgeted_interval(self, rate: float) -> int:
        """Plain steps to wait before a probe so that its expected net cost stays within `probe_budget` of the
        plain steps' time: its extra time (a drafter step, a wider forward) less the time its draft saves when
        accepted at per-token `rate` (each row's accepted draft is a plain step not taken), plus the drafter's
        catch-up on the token each row committed in each plain step waited (`catch_up_ms`, which grows with the
        wait). A drafter right nearly as often as the break-even costs little to probe; one never right costs the
        whole extra time; one whose catch-up alone costs the budget per plain step waits `max_probe_interval`."""
        plain_ms, probe_ms = self.costs.step_ms(0), self.costs.step_ms(1)
        net_ms = max(0.0, probe_ms - plain_ms * (1 + rate))
        room_ms = self.policy.probe_budget * plain_ms - self.costs.catch_up_ms  # per plain step
        budgeted = math.ceil(net_ms / room_ms) if room_ms > 0 else math.inf
        return min(max(self.policy.probe_after, budgeted), self.policy.max_probe_interval)

    def _steps_left(self) -> float:
        """At most how many more steps an active row can take (each commits at least one token)."""
        if self.max_new_tokens is None or not self._active.any():
            return math.inf
        return self.max_new_tokens - int(self._committed[self._active].min())


#: A first run that accepted a draft goes on until its rows have tried as many drafts as this many rows' priors are
#: worth (16 with the default prior): at bf16 batch 4 on 48 held-out requests, 2 of 12 calls of the head (right half
#: the time) stopped after 8 drafts and ran plain for the rest; at batch 8, 16 drafts come in 2 steps, and asking each
#: of 8 rows for its prior's worth made the independent drafter (right 0.22 of the time) draft 4: 0.971x plain against
#: 0.990x (docs/bench/issue24/chaos/).
THIN_RUN_ROWS = 4

#: Each row's prior acceptance for a drafter that declares none (`Drafter.expected_acceptance`), worth `prior_weight`
#: drafts: about what the shipped EAGLE-3 head is right on held-out chat (0.51 on-path at gamma 1).
DEFAULT_PRIOR_ALPHA = 0.5


@functools.lru_cache(maxsize=None)  # asked every step
def slowest_row_spread(rows: int) -> float:
    """The expected maximum of `rows` independent standard normal draws (Blom's approximation; 0 for one row): how
    many standard deviations the slowest of `rows` rows' step counts lies above their mean, when each row's drafts are
    accepted by chance. 2 rows 0.59, 4 rows 1.05, 8 rows 1.43, 16 rows 1.77."""
    if rows <= 1:
        return 0.0
    return statistics.NormalDist().inv_cdf((rows - 0.375) / (rows + 0.25))


def _rate(accepted: int, rejected: int) -> float:
    """Per-token acceptance from counts of accepted drafts and rejections."""
    return accepted / (accepted + rejected) if accepted + rejected else 0.0


@dataclass(frozen=True, kw_only=True)
class TreeDraftPolicy(DraftPolicy):
    """Draft a tree per row and step instead of a chain (EAGLE-2's best-first tree, see `hf_specdec.tree`):
    expand the root, then at each depth the `top_k` best nodes by path probability (the product of the
    drafter's probabilities along the path), each into its `top_k` most probable children, `max_depth`
    levels deep; keep the `max_nodes` best drafted nodes; the target verifies all of them in one forward.

    Runs with every shipped drafter: a causal LM, an EAGLE feature head (both EAGLE-2 trees) and prompt
    lookup (several earlier occurrences as branches; `top_k` = branches), greedy or sampled, alone or in
    padded batches (`hf_specdec.tree_loop`); a drafter whose session does not draft trees is refused with
    `UnsupportedTreeError` before any forward (never a silent chain). See docs/trees.md.

    Args:
        top_k: children per expanded node, and nodes expanded per depth (>= 1).
        max_depth: drafted tokens on the longest path (>= 1); also the most tokens a step can accept.
        max_nodes: drafted nodes kept per row (>= 1), the root (the last committed token) not counted.
    """

    top_k: int = 4
    max_depth: int = 4
    max_nodes: int = 16
    max_gamma: int = field(default=0, init=False, repr=False)  # = max_depth (the most drafted tokens a step commits)
    min_confidence: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        _check_int("top_k", self.top_k, 1)
        _check_int("max_depth", self.max_depth, 1)
        _check_int("max_nodes", self.max_nodes, 1)
        object.__setattr__(self, "max_gamma", self.max_depth)
        super().__post_init__()

    def tree_schedule(self):
        """This call's shapes: this one every step (`hf_specdec.tree_schedule.TreeSchedule`)."""
        from hf_specdec.tree_schedule import TreeSchedule

        return TreeSchedule(self)

    def start(self, *args, **kwargs) -> "DraftSchedule":
        from hf_specdec.errors import UnsupportedTreeError

        # A guard: a loop that took this for a chain policy would draft chains of max_depth silently.
        raise UnsupportedTreeError(
            f"{self!r} is run by hf_specdec.tree_loop, not as a chain schedule; this loop does not draft trees."
        )
