"""How much each step drafts: a fixed chain, transformers' heuristic, a fixed tree, or (the default) the shape with
the most expected tokens per millisecond, a pure function (`best_shape`) of acceptance and measured step costs.

Contract: a policy is a frozen, validated description that calls and threads share; `policy.start(...)` gives one call
its schedule, which the loop asks before every step (`tree`, `lengths`) and tells after it (`update`): it decides how
much is proposed, never what is kept.
"""

from __future__ import annotations

import functools
import heapq
import math
import statistics
from dataclasses import dataclass, field

import torch

from hf_specdec.errors import InvalidGammaError


def _check(name: str, value, low: int = 0, high: float | None = None) -> None:
    """Refuses a setting that is not an int >= `low` (`high` None) or not a number in [`low`, `high`]."""
    kind = f"an int >= {low}" if high is None else f"a number in [{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, int if high is None else (int, float)) or not (
            low <= value <= (math.inf if high is None else high)):
        raise InvalidGammaError(f"{name} must be {kind}, got {value!r}.")


@dataclass(frozen=True, kw_only=True)
class DraftPolicy:
    """Drafts `max_gamma` tokens per row every step; `gamma=4` means `DraftPolicy(max_gamma=4)`.

    Args:
        max_gamma: most tokens drafted per row and step (>= 1).
        min_confidence: a row stops drafting after a token its drafter gave a lower probability (llama.cpp's
            --draft-p-min, transformers' assistant_confidence_threshold), still verified; 0: off; drafters that do not
            score their proposals ignore it.
    """

    max_gamma: int = 4
    min_confidence: float = 0.0

    def __post_init__(self) -> None:
        _check("max_gamma", self.max_gamma, 1)
        _check("min_confidence", self.min_confidence, high=1.0)

    def start(self, batch_size: int, device: torch.device, **call) -> "Schedule":
        """This call's schedule. `call` holds what adaptive policies read (`costs`, `trees`, `prior`); others ignore it."""
        return Schedule(self, batch_size, device)

    def initial_lengths(self, batch_size: int, device: torch.device) -> torch.Tensor:
        """[batch] long: each row's draft length for the first step."""
        return torch.full((batch_size,), self.max_gamma, dtype=torch.long, device=device)

    def next_lengths(self, lengths: torch.Tensor, active: torch.Tensor, num_drafted: torch.Tensor,
                     num_accepted: torch.Tensor) -> torch.Tensor:
        """[batch] long: each row's next draft length from this step's lengths, active rows, drafts and accepted drafts."""
        return lengths


@dataclass(frozen=True, kw_only=True)
class HeuristicDraftPolicy(DraftPolicy):
    """transformers' "heuristic" schedule, per row: start at `start_gamma`; after a step whose drafts were all
    accepted draft `increase` more, after a rejection `decrease` fewer, within [1, max_gamma]. A row that drafted
    nothing (prompt lookup without a match) keeps its length. `gamma="auto"` means `HeuristicDraftPolicy()`."""

    max_gamma: int = 16
    min_confidence: float = 0.4
    start_gamma: int = 4
    increase: int = 2
    decrease: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, low in (("start_gamma", 1), ("increase", 0), ("decrease", 0)):
            _check(name, getattr(self, name), low)
        if self.start_gamma > self.max_gamma:
            raise InvalidGammaError(f"start_gamma ({self.start_gamma}) must not exceed max_gamma ({self.max_gamma}).")

    def initial_lengths(self, batch_size: int, device: torch.device) -> torch.Tensor:
        return torch.full((batch_size,), self.start_gamma, dtype=torch.long, device=device)

    def next_lengths(self, lengths, active, num_drafted, num_accepted) -> torch.Tensor:
        drafted = active & (num_drafted > 0)  # [batch]
        step = torch.where(num_accepted == num_drafted, self.increase, -self.decrease)  # [batch]
        return torch.where(drafted, lengths + step, lengths).clamp(1, self.max_gamma)


@dataclass(frozen=True, kw_only=True)
class TreeDraftPolicy(DraftPolicy):
    """Drafts a tree per row and step (EAGLE-2's best-first tree, `hf_specdec.tree`): at each of `max_depth` levels the
    `top_k` best nodes by path probability, each into its `top_k` best children; the `max_nodes` best are verified in
    one target forward. A drafter or model that cannot draft trees raises `UnsupportedTreeError`. docs/trees.md."""

    top_k: int = 4
    max_depth: int = 4
    max_nodes: int = 16
    max_gamma: int = field(default=0, init=False, repr=False)  # = max_depth
    min_confidence: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("top_k", "max_depth", "max_nodes"):
            _check(name, getattr(self, name), 1)
        object.__setattr__(self, "max_gamma", self.max_depth)
        super().__post_init__()


#: The trees the default considers besides chains (top_k, max_depth, max_nodes): small, EAGLE-2-like, growing.
TREE_MENU = ((4, 3, 8), (4, 4, 16), (4, 6, 32))


@dataclass(frozen=True, kw_only=True)
class CostAwareDraftPolicy(DraftPolicy):
    """The default (no `gamma=`): before every step, the shape among a plain step, chains of 1..max_gamma and the
    trees of `TREE_MENU` with the most expected tokens per ms, from acceptance per row, depth and tree rank (the call's,
    the setting's recent calls', the prompt's) and step costs measured as calls run (`hf_specdec.costs`); a lone row
    stops once its drafts' odds no longer pay for a level; optimism bonuses bound how long what could pay stays untried.

    Args:
        max_gamma: longest chain considered.
        trees: also consider `TREE_MENU` where the drafter and the target can draft trees.
        min_gain: a shape must beat every cheaper shape by this fraction (`batch_gain`: with more rows).
        exploration: the optimism bonuses' scale (0: none; a drafter or shape priced out stays out).
        costs: a `hf_specdec.costs.StepCosts` that pins every cost instead of measuring (decisions then repeat).
    """

    max_gamma: int = 6
    trees: bool = True
    min_gain: float = 0.02
    batch_gain: float = 0.05
    exploration: float = 0.08
    costs: object | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("min_gain", "batch_gain", "exploration"):
            _check(name, getattr(self, name), high=10.0)
        if not isinstance(self.trees, bool):
            raise InvalidGammaError(f"trees must be True or False, got {self.trees!r}.")

    def start(self, batch_size: int, device: torch.device, *, costs=None, trees: bool = False,
              prior: float | None = None, **call) -> "AdaptiveSchedule":
        """`costs`: the setting's StepCosts (the policy's own win); `trees`: whether the pair drafts trees; `prior`: the
        drafter's declared acceptance, the start until the prompt tells more."""
        menu = [Shape(0, depth, depth) for depth in range(1, self.max_gamma + 1)]
        menu += [Shape(*tree) for tree in TREE_MENU if self.trees and trees]
        return AdaptiveSchedule(self, batch_size, device, self.costs or costs, tuple(menu), prior)


@dataclass(frozen=True)
class Shape:
    """A step's draft: a chain (`top_k` 0) of `depth` tokens, or a tree of `nodes` nodes, `depth` deep, `top_k` wide;
    `width`: the tokens per row the target's forward scores (the drafts and the row's last token)."""

    top_k: int
    depth: int
    nodes: int
    width = property(lambda self: self.nodes + 1)


class Schedule:
    """One call's plan: the next step drafts `tree` (a TreeDraftPolicy) if set, else `lengths[b]` tokens in row b
    ([batch] long; 0 everywhere: a plain step). `update` hears every verification."""

    tree: TreeDraftPolicy | None = None
    wants_prior: bool = False  # whether it reads the drafter's agreement on the prompt (`set_prior`)
    timed: bool = False  # whether the loop records its steps' times (the default's only: a fixed shape's teach it nothing)
    path_stop = (0.0, ())  # the next chain's (min_path, path_odds): `hf_specdec.drafters.base.DraftContext`

    def __init__(self, policy: DraftPolicy, batch_size: int, device: torch.device):
        self.policy, self.lengths = policy, policy.initial_lengths(batch_size, device)  # lengths: [batch] long
        self.tree = tree = policy if isinstance(policy, TreeDraftPolicy) else None  # (a tree policy drafts itself)
        self.max_depth, self.max_rank = policy.max_gamma, policy.top_k if tree else 1  # drafts accepted, children a node
        self.max_width = policy.max_nodes + 1 if tree else policy.max_gamma + 1  # most tokens a step verifies per row

    def set_prior(self, agreement: torch.Tensor, positions: torch.Tensor) -> None:
        """The drafter's agreement with the target on each row's prompt over `positions` tokens (if `wants_prior`)."""

    def update(self, active: torch.Tensor, num_drafted: torch.Tensor, num_accepted: torch.Tensor, outcomes=None,
               drafted: bool = True, left: int | None = None, confidence: torch.Tensor | None = None) -> None:
        """After a verification: active rows, drafts (a tree's depth), accepted drafts ([batch] each), a tree's (trials,
        hits) [batch, depth, rank], whether it drafted, its active rows' count, a chain's drafts' probabilities if scored."""
        if self.tree is None:
            self.lengths = self.policy.next_lengths(self.lengths, active, num_drafted, num_accepted)

    def done(self) -> None:
        """After the call's last step (the default tells the setting's record what its drafts at each depth accepted)."""

    def drafts(self) -> bool:
        """Whether the next step drafts a chain (`lengths` not all 0)."""
        return bool(self.lengths.any())

    def drafting_pays(self, active: torch.Tensor) -> bool:
        """Whether drafting for the `active` rows ([batch] bool) beats plain steps (a fixed policy's: always)."""
        return True


#: Drafts a start is worth (at least; at most where the setting's calls agree); the share of a row's evidence kept per
#: step; a row's acceptance when neither prompt nor drafter says anything; the tokens committed and expected a delivery
#: record starts with (a few steps' worth of its model's estimate); the equal bands the drafter's odds are measured in.
PRIOR_WEIGHT, MAX_WEIGHT, DECAY, DEFAULT_PRIOR, DELIVERY_PRIOR, BANDS = 4.0, 32.0, 0.95, 0.5, 32.0, 5


def record_evidence(calls, depths: int, start: float = DEFAULT_PRIOR) -> list[tuple[float, float, float]]:
    """[depth] (hits, trials, lift) the setting's recent calls' rank-1 drafts ([call][depth] pairs) are worth to its next
    call, pooled: PRIOR_WEIGHT to MAX_WEIGHT drafts as the calls' first-draft shares agree (depth 1: plus PRIOR_WEIGHT at
    `start`); `lift`: each depth's odds of acceptance over the depth before's (docs/policies.md)."""
    pooled = [tuple(sum(call[depth][i] for call in calls if len(call) > depth) for i in (0, 1)) for depth in range(depths)]
    lifts, odds = [1.0], lambda p: (q := min(max(p, 0.01), 0.99)) / (1 - q)  # noqa: E731
    for depth, (hits, trials) in enumerate(pooled[1:], 1):
        before = sum(call[depth][1] * call[depth - 1][0] / call[depth - 1][1]  # (tried at depth d: at d - 1 too)
                     for call in calls if len(call) > depth and call[depth][1]) / trials if trials else 0.5
        lifts.append(odds((hits + PRIOR_WEIGHT * before) / (trials + PRIOR_WEIGHT)) / odds(before))
    if not calls:
        return [(*pair, lift) for pair, lift in zip(pooled, lifts)]
    share, weight = pooled[0][0] / pooled[0][1], PRIOR_WEIGHT
    if len(calls) >= 4:
        chance = share * (1 - share) * statistics.fmean(1 / call[0][1] for call in calls)  # binomial spread alone
        spread = statistics.fmean((call[0][0] / call[0][1] - share) ** 2 for call in calls) - chance
        weight = min(MAX_WEIGHT, max(PRIOR_WEIGHT, share * (1 - share) / spread - 1 if spread > 0 else MAX_WEIGHT))
    first = (pooled[0][0] + PRIOR_WEIGHT * start) / (pooled[0][1] + PRIOR_WEIGHT)  # depth 1's share, with the start
    return [(first * weight, weight, 1.0),
            *((h * weight / pooled[0][1], t * weight / pooled[0][1], lift) for (h, t), lift in zip(pooled[1:], lifts[1:]))]


class AdaptiveSchedule(Schedule):
    """CostAwareDraftPolicy's state for one call: acceptance counts per row and depth, and per tree rank; priors."""

    timed = True

    def __init__(self, policy: CostAwareDraftPolicy, batch_size: int, device: torch.device, costs,
                 menu: tuple[Shape, ...], prior: float | None):
        self.policy, self.costs, self.menu, self.device = policy, costs, menu, device
        self.max_depth, self.max_width = max(shape.depth for shape in menu), max(shape.width for shape in menu)
        self.max_rank = max((shape.top_k for shape in menu), default=1) or 1
        self.declared = prior  # the drafter's own acceptance, if it declares one
        self.prior = torch.full((batch_size,), DEFAULT_PRIOR if prior is None else prior, dtype=torch.float64)
        self.record = record_evidence(costs.accepted, self.max_depth, float(self.prior[0]))  # [depth] triples
        # [batch, depth] counts of rank-1 drafts: fading (hits, trials), and the call's whole (all_hits, all_trials)
        self.hits, self.trials, self.all_hits, self.all_trials = torch.zeros(4, batch_size, self.max_depth).double()
        self.rank_hits, self.rank_trials = torch.zeros(2, self.max_rank).double()  # [rank] fading, ranks 2.. (0: unused)
        for rank, (hits, trials) in enumerate(costs.ranks[: self.max_rank]):  # the last call's
            self.rank_hits[rank], self.rank_trials[rank] = hits, trials
        self._rows = torch.ones(batch_size, dtype=torch.bool)  # the rows the last plan was made for
        # _left -1: no plan yet; _stale: whether what was heard since the plan asks for a new one (the prefill: plain)
        self.steps, self._tree, self._left, self._depth, self._evidence_at, self._stale = 0, None, -1, 0, 0, False
        self._drafted, self._tried_at = 0, [0] * (self.max_depth - 1)  # drafting steps; the last to draft depths 2..
        self._planned = (None, None)  # the shape the next step calibrates, and the acceptance it was planned on
        # Scored drafts by band (`odds_by_band`): from the setting's last call's; whether this call scored any.
        self._odds, self._scored = torch.zeros(3, BANDS).double() if costs.odds is None else costs.odds, False
        # A setting's first calls read the prompt, later ones its record; `_read`: (hits, positions) the prompt said.
        self.wants_prior, self._read = not costs.accepted, None

    def set_prior(self, agreement: torch.Tensor, positions: torch.Tensor) -> None:
        """Each row's agreement with the target on its prompt ([batch]; NaN: none) over `positions` tokens, worth as many
        drafts against PRIOR_WEIGHT of the start, at least the declared acceptance (drafters trained on answers)."""
        agreement, positions = agreement.double().cpu().clamp(0, 1), positions.double().cpu()
        mixed = (agreement * positions + PRIOR_WEIGHT * self.prior) / (positions + PRIOR_WEIGHT)
        floor = self.declared if self.declared is not None else 0.0
        seen = ~agreement.isnan()  # [batch]
        self.prior, read = torch.where(seen, mixed.clamp(min=floor), self.prior), positions * seen
        self._read = (float((agreement.clamp(min=floor) * read).nansum()), float(read.sum())) if read.sum() else None
        self._stale = True

    def alphas(self, optimism: float = 0.0, rows: torch.Tensor | None = None) -> list[list[float]]:
        """[rows][depth] (`rows`: [batch] bool, all by default): each row's acceptance of a rank-1 draft at each depth once
        the ones before were accepted: the better of its recent drafts (fading towards it) and the call's record (over the
        setting's and the depth before's; early misses count once), plus `optimism` times a UCB bonus for steps sat out."""
        pick = (lambda t: t) if rows is None else (lambda t: t[rows])
        streak = self.steps - self._evidence_at  # steps since the last draft: its evidence fades, the bonus grows
        fade, sat_out = DECAY**streak, [math.log1p(streak), *(math.log1p(self._drafted - at) for at in self._tried_at)]
        out, columns = [], (self.hits, self.trials, self.all_hits, self.all_trials, self.prior)
        for hits, trials, all_hits, all_trials, prior in zip(*(pick(column).tolist() for column in columns)):
            call, row = prior, []  # the call's whole record over the setting's and a start, recent drafts on top
            for depth, (record_hits, record_trials, lift) in enumerate(self.record):
                start = PRIOR_WEIGHT if depth or not record_trials else 0.0  # (depth 1 with a record: the record's)
                weight = record_trials + start  # the start: the depth before's estimate at the record's odds over it
                call = (all_hits[depth] + record_hits + start * call * lift / (1 - call + call * lift)) / (
                    all_trials[depth] + weight)  # (depth 1: the row's prior)
                estimate = max((fade * hits[depth] + weight * call) / (fade * trials[depth] + weight), call)
                estimate += optimism * math.sqrt(sat_out[depth] / (all_trials[depth] + PRIOR_WEIGHT))
                row.append(min(1.0, estimate))
            out.append(row)
        return out

    def ranks(self) -> list[float]:
        """Acceptance of a tree node's k-th child (k >= 2) once the better ones were rejected, pooled over rows."""
        prior = [0.15, 0.08, 0.05, 0.03][: self.max_rank - 1] + [0.03] * max(0, self.max_rank - 5)
        return [((self.rank_hits[k] + PRIOR_WEIGHT * prior[k - 1]) / (self.rank_trials[k] + PRIOR_WEIGHT)).item()
                for k in range(1, self.max_rank)]

    def update(self, active, num_drafted, num_accepted, outcomes=None, drafted=True, left=None, confidence=None) -> None:
        self.steps += 1
        if not drafted and left == self._left and self.costs.estimate(None) is not None:  # plain again, same rows,
            streak, still = self.steps - self._evidence_at, not self.policy.exploration and not self._evidence_at
            if still or (streak & (streak - 1) and streak % 16):  # priced: decided again after 1, 2, 4, 8, 16, 32, ...
                return  # (never, where no draft was made and no bonus can change the decision)
        row_drafts = num_drafted.cpu() * (rows := active.cpu())  # [batch]
        if bool(row_drafts.any()):
            accepted, drafting = num_accepted.cpu(), row_drafts.nonzero().flatten().tolist()
            shape, alphas = self._planned  # what the step committed against what its plan's estimates promised
            if shape is not None:
                planned, drafts = [alphas[b] for b in drafting], row_drafts[drafting]
                got = float((accepted[drafting] + 1).double().mean())
                if outcomes is not None:  # a tree: its rank-1 path (what a chain would have drafted) counts at a chain's
                    path = 1 + float(outcomes[1].cpu()[drafting, :, 0].double().cumprod(1).sum(1).mean())  # promise,
                    chain = statistics.fmean(expected_tokens(planned, [], self.menu[0], drafts))  # times the share of
                    p_got, p_want, _ = self.costs.paths.get(shape, (0.0, 0.0, 0))  # such promises its paths delivered
                    got += chain * (p_got + DELIVERY_PRIOR) / (p_want + DELIVERY_PRIOR) - path
                    self.costs.deliver(shape, path, chain, record="paths")
                self.costs.deliver(shape, got, statistics.fmean(expected_tokens(planned, self.ranks(), shape, drafts)))
            fade = DECAY ** (self.steps - 1 - self._evidence_at)  # evidence fades with the steps since the last draft
            self.hits, self.trials, self._evidence_at = self.hits * fade, self.trials * fade, self.steps
            self.rank_hits, self.rank_trials = self.rank_hits * fade, self.rank_trials * fade
            depth = torch.arange(1, self.max_depth + 1)
            if outcomes is None:  # a chain: depth d was tried if the d - 1 before it were accepted
                trials = ((depth <= row_drafts[:, None]) & (depth <= accepted[:, None] + 1)).double()
                hits = (depth <= accepted[:, None]).double() * trials
                if confidence is not None:  # what the drafter's odds were worth, by its top probability's band
                    top = torch.nn.functional.pad(confidence.cpu().double(), (0, self.max_depth))[:, : self.max_depth]
                    heard = torch.stack([hits[trials > 0], torch.ones_like(top[trials > 0]), top[trials > 0]])  # [3, tried]
                    band = (heard[2] * BANDS).long().clamp(max=BANDS - 1)
                    self._odds, self._scored = self._odds.index_add(1, band, heard), True
            else:  # a tree: rank 1 feeds the per-depth counts, ranks 2.. the pooled ones
                trials_all, hits_all = (t.cpu().double() * rows[:, None, None] for t in outcomes)
                trials, hits = trials_all[:, :, 0], hits_all[:, :, 0]
                trials, hits = (torch.nn.functional.pad(t, (0, self.max_depth))[:, : self.max_depth] for t in (trials, hits))
                width = min(self.max_rank, trials_all.shape[2])
                self.rank_trials[1:width] = DECAY * self.rank_trials[1:width] + trials_all[:, :, 1:width].sum(dim=(0, 1))
                self.rank_hits[1:width] = DECAY * self.rank_hits[1:width] + hits_all[:, :, 1:width].sum(dim=(0, 1))
            self.trials, self.hits = DECAY * self.trials + trials, DECAY * self.hits + hits
            self.all_trials, self.all_hits = self.all_trials + trials, self.all_hits + hits
            self._drafted += 1
            self._tried_at = [self._drafted if t else at for t, at in zip(trials[:, 1:].any(0).tolist(), self._tried_at)]
        self._rows, self._left, self._stale = rows, int(rows.sum()) if left is None else left, True

    def _plan(self) -> None:
        """Plans the next step when the loop asks, not when it tells (`update`): by then the step before's cost is in."""
        if not self._stale:
            return
        shape, self._stale = self._best(self._rows, self.policy.exploration), False
        tree = shape is not None and shape.top_k
        self._tree = TreeDraftPolicy(top_k=shape.top_k, max_depth=shape.depth, max_nodes=shape.nodes) if tree else None
        alphas = self.alphas() if shape is not None else None  # the acceptance the step is planned on
        self._planned = (shape, alphas) if shape and (shape.top_k or not self.wants_prior) else (None, None)  # calibrates
        single = int(self._rows.sum()) == 1  # (a batch drafts as long as its longest row: a row's stop saves no level)
        scored = single and self._scored  # (one row whose drafts are scored: its odds decide the depth)
        self._depth = 0 if shape is None or shape.top_k else self.policy.max_gamma if scored else shape.depth
        if self._depth and single:  # the row drafts on while its odds, times the next draft's acceptance, buy a level's
            plain, row = self.costs.estimate(None), alphas[int(self._rows.nonzero())]  # ms at the step's tokens per ms;
            deepest = next(s for s in self.menu[self.policy.max_gamma - 1:: -1] if self.costs.estimate(s) is not None)
            level = (self.costs.estimate(deepest) - plain) / deepest.depth  # (per level of the deepest priced chain)
            worth = level * expected_tokens([row], self.ranks(), shape)[0] / self._cost(shape)  # a call of one row reads
            alone, least = len(self._rows) == 1, max(row[:2])  # a deeper depth where above depths 1 and 2's
            self.path_stop = (tuple(worth / max(least, a * alone) for a in row[1:] or row), odds_by_band(self._odds))

    tree = property(lambda self: self._plan() or self._tree)
    lengths = property(lambda self: self._plan() or torch.full(self._rows.shape, self._depth, device=self.device))

    def drafts(self) -> bool:
        return self._plan() or self._depth > 0

    def _best(self, rows: torch.Tensor, optimism: float) -> Shape | None:
        if not bool(rows.any()):
            return None
        gain = self.policy.min_gain if int(rows.sum()) == 1 else self.policy.batch_gain
        ranks, steps = self.ranks(), sum(r[2] for r in self.costs.delivered.values())
        alphas = self.alphas(optimism, rows)  # whether to draft: without a shape's bonus; which shape: with it
        shape = best_shape(alphas, ranks, self._cost, self.menu, gain)
        bold = functools.partial(self._cost, optimism=optimism, steps=steps)  # (steps: every shape's, summed once)
        return shape and optimism and best_shape(alphas, ranks, bold, self.menu, gain) or shape

    def _cost(self, shape: Shape | None, optimism: float = 0.0, steps: int = 0) -> float | None:
        """A step's ms over the share of its promised tokens the shape delivered, less `optimism` times a UCB bonus."""
        ms, (got, want, runs) = self.costs.estimate(shape), self.costs.delivered.get(shape, (0.0, 0.0, 0))
        bonus = optimism * math.sqrt(math.log1p(steps) / (1 + runs)) if runs else 0.0
        return ms if ms is None else ms * (want + DELIVERY_PRIOR) / (got + DELIVERY_PRIOR) / (1 + bonus)

    def done(self) -> None:
        hits, trials = self.all_hits.sum(dim=0).tolist(), self.all_trials.sum(dim=0).tolist()  # [depth] over rows
        # A call that drafted too little to say leaves what its prompt said: the setting's next calls skip reading it.
        depths = tuple(zip(hits, trials)) if trials[0] >= PRIOR_WEIGHT else (self._read,) if self._read else None
        odds = self._odds * (PRIOR_WEIGHT / self._odds[1].clamp(min=PRIOR_WEIGHT))  # (a band worth PRIOR_WEIGHT at most)
        self.costs.remember(depths, tuple(zip(self.rank_hits.tolist(), self.rank_trials.tolist())), odds)

    def drafting_pays(self, active: torch.Tensor) -> bool:
        return self._best(active.cpu(), optimism=0.0) is not None


def odds_by_band(counts: torch.Tensor) -> tuple[float, ...]:
    """[band] acceptance by band of the drafter's top probability, from [3, band] (hits, trials, the probabilities' sum):
    a start of PRIOR_WEIGHT drafts at the band's middle times the drafter's calibration (hits over the sum), then its own."""
    hits, trials, tops = counts
    middle = (torch.arange(BANDS) + 0.5).double() / BANDS * (hits.sum() + PRIOR_WEIGHT) / (tops.sum() + PRIOR_WEIGHT)
    return tuple(((hits + PRIOR_WEIGHT * middle.clamp(max=1.0)) / (trials + PRIOR_WEIGHT)).tolist())


def expected_tokens(alphas, ranks: list[float], shape: Shape, drafts: torch.Tensor | None = None) -> list[float]:
    """Per row of `alphas` ([rows][depth], or a tensor): tokens a step of `shape` commits on average, 1 + the sum over its
    nodes of the acceptances along the path (rank-1 child at depth d: alphas[row][d - 1]; rank k: ranks[k - 2]): a chain's
    1 + a1 + a1 a2 + ... to the row's `drafts` ([rows]; default: its depth), a tree's `nodes` best on the rows' mean."""
    alphas = alphas.tolist() if isinstance(alphas, torch.Tensor) else alphas
    if shape.top_k == 0:
        depths = [shape.depth] * len(alphas) if drafts is None else drafts.tolist()
        return [1.0 + sum(math.prod(row[:depth]) for depth in range(1, n + 1)) for row, n in zip(alphas, depths)]
    mean = [sum(column) / len(alphas) for column in zip(*alphas)]
    return [_tree_tokens(tuple(round(a, 3) for a in mean), tuple(round(r, 3) for r in ranks), shape)] * len(alphas)


@functools.lru_cache(maxsize=4096)
def _tree_tokens(mean: tuple[float, ...], ranks: tuple[float, ...], shape: Shape) -> float:
    """`expected_tokens` of a tree shape on the rows' mean acceptances (cached: the estimates move slowly)."""
    values, frontier = [], sorted([(-mean[0], 1)] + [(-rank, 1) for rank in ranks[: shape.top_k - 1]])  # (a heap)
    while frontier and len(values) < shape.nodes:
        value, depth = heapq.heappop(frontier)
        values.append(-value)
        if depth < shape.depth:
            for child in (mean[min(depth, len(mean) - 1)], *ranks[: shape.top_k - 1]):
                heapq.heappush(frontier, (value * child, depth + 1))
    return 1.0 + sum(values)


def best_shape(alphas, ranks: list[float], cost_ms, menu: tuple[Shape, ...], gain: float) -> Shape | None:
    """The shape of `menu` (None: a plain step) with the most committed tokens per ms for rows of acceptances `alphas`
    ([rows][depth]) and tree ranks `ranks`, a step costing `cost_ms(shape)` (None: unpriced, not chosen). A batch waits
    for its slowest row: the rows' harmonic mean. From the cheapest, each must beat the best so far by `gain`."""
    alphas = alphas.tolist() if isinstance(alphas, torch.Tensor) else alphas
    if (plain_ms := cost_ms(None)) is None:
        return None
    rows = len(alphas)
    best, best_rate = None, rows / plain_ms
    priced = [(ms, shape) for shape in menu if (ms := cost_ms(shape)) is not None]
    for ms, shape in sorted(priced, key=lambda pair: pair[0]):
        tokens = expected_tokens(alphas, ranks, shape)
        rate = rows * rows / sum(1 / t for t in tokens) / ms
        if rate > best_rate * (1 + gain):
            best, best_rate = shape, rate
    return best
