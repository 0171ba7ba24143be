"""Which tree each step drafts: a fixed shape (`TreeDraftPolicy`), or the default's choice among plain steps,
chains and trees, priced by what each width costs on this machine and by the acceptance observed per rank of
candidate (Sequoia's idea, on EAGLE-2's trees).

Contract: a `TreeSchedule` gives the tree loop each step's `shape` (a TreeDraftPolicy; None: a plain step) and
hears back every verification (`observe_tree`, then `update`); `max_depth` and `max_nodes` bound every shape it
may give. A schedule decides how many tokens are proposed, never which are kept, so it cannot change what is
generated, only how fast.

The model behind the choice: a drafter's k-th best candidate at a node is the target's token (greedy), or is
accepted after the better ones were rejected (sampling), with probability a_k, the same at every node. A node
is then accepted with the product of a_k along its path, and a step commits 1 + the sum of that over its nodes
(1 + a + ... + a^D for a chain: Leviathan et al.). The best tree of N nodes takes the N most valuable nodes,
which a best-first expansion finds (a child is never worth more than its parent). The drafter's own tree
(EAGLE-2: best-first by its probabilities) does at least as well on average, so the model prices trees
conservatively.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from typing import Sequence

import torch

from hf_specdec.policy import CostAwareSchedule, TreeDraftPolicy
from hf_specdec.tree import DraftTree, earlier_siblings


class TreeSchedule:
    """A fixed tree shape for every step (`TreeDraftPolicy` as `gamma=`)."""

    def __init__(self, policy: TreeDraftPolicy):
        self.shape: TreeDraftPolicy | None = policy
        self.max_depth, self.max_nodes = policy.max_depth, policy.max_nodes

    def observe_tree(self, active: torch.Tensor, tree: DraftTree, path: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """After a verification: each row's tree, its accepted path ([batch, depth] node ids, -1 past the end) and
        accepted depth."""

    def update(self, active: torch.Tensor, num_drafted: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """After a verification, as `DraftSchedule.update`: `num_drafted` is each row's tree depth."""


def node_values(ranks: Sequence[float], top_k: int, max_depth: int, max_nodes: int) -> list[float]:
    """The `max_nodes` largest node values, best first, of the tree in which every node has `top_k` children, the
    k-th worth its parent's value times ranks[k - 1], the root worth 1 and not counted, at most `max_depth` deep."""
    top_k = min(top_k, len(ranks))
    values: list[float] = []
    frontier = [(-ranks[k], 1, k) for k in range(top_k)]  # (-value, depth, rank), the root's children
    heapq.heapify(frontier)
    while frontier and len(values) < max_nodes:
        value, depth, _ = heapq.heappop(frontier)
        values.append(-value)
        if depth < max_depth:
            for k in range(top_k):
                heapq.heappush(frontier, (value * ranks[k], depth + 1, k))
    return values


def expected_tokens(ranks: Sequence[float], top_k: int, max_depth: int, max_nodes: int) -> float:
    """Tokens a step commits on average with the best tree of this shape under rank acceptances `ranks` (see the
    module doc): 1 + the sum of its node values. A chain (top_k 1) gives 1 + a + ... + a^max_depth."""
    return 1.0 + sum(node_values(ranks, top_k, max_depth, max_nodes))


#: Tree sizes the default considers (drafted nodes, the root not counted), besides chains.
NODE_COUNTS = (2, 3, 4, 6, 8, 12, 16, 24, 32)


@functools.lru_cache(maxsize=64)
def tree_shapes(max_depth: int, max_nodes: int, max_top_k: int) -> tuple[TreeDraftPolicy, ...]:
    """The shapes the default chooses among: chains of 1..max_depth and trees of 2..max_top_k children per node,
    depth 1..max_depth and NODE_COUNTS nodes up to max_nodes, each no larger than its depth and width can fill."""
    shapes = [TreeDraftPolicy(top_k=1, max_depth=depth, max_nodes=depth) for depth in range(1, max_depth + 1)]
    for top_k in range(2, max_top_k + 1):
        for depth in range(1, max_depth + 1):
            # EAGLE-2 makes top_k children at depth 1 and top_k * top_k at each depth below.
            room = top_k + (depth - 1) * top_k * top_k
            for nodes in NODE_COUNTS:
                if nodes <= max_nodes and depth <= nodes <= room:
                    shapes.append(TreeDraftPolicy(top_k=top_k, max_depth=depth, max_nodes=nodes))
    return tuple(shapes)


def rank_outcomes(
    tree: DraftTree, path: torch.Tensor, num_accepted: torch.Tensor, active: torch.Tensor, max_rank: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """What one verification says about rank acceptance, summed over the active rows: (trials, hits), each
    [max_rank] float64. At every node on a row's accepted path that has m drafted children (the root included;
    the last node's children were all rejected), rank k <= m had a trial, and a hit when the accepted child was
    the node's k-th (children are stored best first)."""
    parents = tree.parents  # [batch, nodes]; padding nodes have parent -1, like the root
    child = parents >= 0
    children = torch.zeros_like(parents).scatter_add_(1, parents.clamp_min(0), child.long())  # [batch, nodes]
    rank = earlier_siblings(parents).sum(dim=2) + 1  # [batch, nodes]: a child's rank among its parent's children
    depth = path.shape[1]
    along = torch.cat([torch.zeros_like(path[:, :1]), path.clamp_min(0)], dim=1)  # [batch, depth + 1]: root, path
    on_path = torch.arange(depth + 1, device=path.device) <= num_accepted[:, None]  # [batch, depth + 1]
    on_path &= active[:, None]
    held = children.gather(1, along)  # [batch, depth + 1] children of each path node
    outcome = torch.where(torch.arange(depth + 1, device=path.device) < num_accepted[:, None],
                          rank.gather(1, torch.cat([path.clamp_min(0), path[:, :1].clamp_min(0)], dim=1)), 0)
    ranks = torch.arange(1, max_rank + 1, device=path.device)
    tried = on_path[:, :, None] & (held[:, :, None] >= ranks)  # [batch, depth + 1, max_rank]
    hit = tried & (outcome[:, :, None] == ranks)
    return tried.sum(dim=(0, 1)).double().cpu(), hit.sum(dim=(0, 1)).double().cpu()


class CostAwareTreeSchedule(CostAwareSchedule, TreeSchedule):
    """CostAwareDraftPolicy's state for a call run as trees: the chain schedule's rules (give up on a drafter that
    is never right, probes, steps left) with per-rank acceptance counts, and each step the shape (plain step, chain
    or tree) that commits the most tokens per millisecond on the measured costs (`TreeCosts`)."""

    def __init__(self, policy, costs, batch_size: int, device: torch.device, max_new_tokens: int | None = None):
        self.shapes = tree_shapes(policy.max_gamma, policy.max_nodes, 1 + len(policy.prior_ranks))
        self.max_depth = max(shape.max_depth for shape in self.shapes)
        self.max_nodes = max(shape.max_nodes for shape in self.shapes)
        self.prior = torch.tensor((policy.prior_alpha, *policy.prior_ranks), dtype=torch.float64)  # [ranks]
        self.hits = torch.zeros_like(self.prior)  # decayed hits per rank
        self.trials = torch.zeros_like(self.prior)  # decayed trials per rank
        self._choices: dict[tuple, TreeDraftPolicy | None] = {}  # rounded estimates -> best shape
        self._priced = sorted(((costs.shape_ms(shape), shape) for shape in self.shapes), key=lambda pair: pair[0])
        super().__init__(policy, costs, batch_size, device, max_new_tokens)

    def _drafts_no_more(self) -> bool:
        return False  # not told: a tree can pay where no chain does, and the tree loop keeps its drafter to the end

    def ranks(self) -> list[float]:
        """Estimated a_k for ranks 1.. (decayed counts and the prior, worth prior_weight trials)."""
        weight = self.policy.prior_weight
        return ((self.hits + self.prior * weight) / (self.trials + weight)).tolist()

    def observe_tree(self, active, tree, path, num_accepted) -> None:
        trials, hits = rank_outcomes(tree, path, num_accepted, active, len(self.prior))
        if trials.any():
            decay = self.policy.decay
            self.trials = self.trials * decay + trials
            self.hits = self.hits * decay + hits

    def _lengths(self, active: torch.Tensor, probing: bool) -> torch.Tensor:
        rows = active.cpu()
        self.shape = None
        if rows.any() and not self.given_up():
            # Deeper trees only as acceptances come in: one level more than a row has accepted so far.
            deepest = min(self.policy.max_gamma, 1 + int(self.total_accepted[rows].max()))
            self.shape = self.best_shape(deepest, self.policy.draft_gain(int(rows.sum())))
        if self.shape is None and probing:
            self.shape = self.shapes[0]  # a chain of one
        depth = 0 if self.shape is None else self.shape.max_depth
        return torch.full(rows.shape, depth, dtype=torch.long, device=self.device)

    def best_shape(self, deepest: int, draft_gain: float | None = None) -> TreeDraftPolicy | None:
        """The shape at most `deepest` deep with the most committed tokens per millisecond (None: a plain step);
        as for chains, a shape must beat a plain step and every cheaper shape's rate by `draft_gain` (default
        `min_gain`; in a batch `min_batch_gain`) to be chosen."""
        ranks = [round(a / 0.02) * 0.02 for a in self.ranks()]  # decisions are remembered per rounded estimate
        gain = self.policy.min_gain if draft_gain is None else draft_gain
        key = (deepest, gain, *ranks)
        if key not in self._choices:
            tokens = {}  # (top_k, depth) -> expected tokens by node count: one best-first pass serves every size
            best, best_rate = None, 1.0 / self.costs.step_ms(0)
            for ms, shape in self._priced:
                if shape.max_depth > deepest:
                    continue
                if (shape.top_k, shape.max_depth) not in tokens:
                    values = node_values(ranks, shape.top_k, shape.max_depth, self.max_nodes)
                    tokens[shape.top_k, shape.max_depth] = list(itertools.accumulate(values, initial=1.0))
                by_nodes = tokens[shape.top_k, shape.max_depth]
                rate = by_nodes[min(shape.max_nodes, len(by_nodes) - 1)] / ms
                if rate > best_rate * (1 + gain):
                    best, best_rate = shape, rate
            self._choices[key] = best
        return self._choices[key]


#: How much the best tree must beat the best chain, on the prior acceptances, for a call to run as trees (and, on the
#: optimistic reading of `trees_might_pay`, for trees to be timed at all). The model behind the choice over-promises
#: trees against the chain loop: on an AMD EPYC Zen 5 (avx512_bf16, no AMX), bf16, batch 1, it put the best tree 6-8 %
#: ahead on calibrated costs, while the default run as trees measured 5 % (EAGLE-3 head) and 7 % (unrelated drafter)
#: behind the default kept to chains, and the best fixed tree 1 % ahead of the best fixed chain (docs/results.md,
#: issue 24's last miss). The tree loop's steps cost more than the chain loop's besides the width (its plain step
#: 1-5 % more, per-node bookkeeping), and a node's acceptance falls with depth where the model keeps it. Trees run
#: where they promise more than that error; a width as cheap as a GPU's or an AMX CPU's still clears it.
TREE_MARGIN = 0.10


def _memo(function):
    """Caches a pure function of a frozen policy and frozen costs (thread-safe); unhashable arguments (a
    user's policy with a list field) are computed afresh. These run before every default call."""
    cached = functools.lru_cache(maxsize=256)(function)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            hash((args, tuple(kwargs.items())))
        except TypeError:  # unhashable: compute uncached (an error inside the function is not caught here)
            return function(*args, **kwargs)
        return cached(*args, **kwargs)

    return wrapper


@_memo
def trees_pay(policy, tree_costs, chain_costs, margin: float = TREE_MARGIN) -> bool:
    """Whether a call should run as trees: on the prior acceptances, the best shape in the tree loop beats the
    best chain in the chain loop by `margin` (TREE_MARGIN), and the tree loop's plain step (what a call pays once
    it gives a drafter up) costs no more than the chain loop's by `min_gain`."""
    if tree_costs.step_ms(0) > chain_costs.step_ms(0) * (1 + policy.min_gain):
        return False
    policy = policy.for_drafter(None)  # the prior `start` settled; a policy not settled takes the default prior
    ranks = [policy.prior_alpha, *policy.prior_ranks]
    chain_rate = max(expected_tokens(ranks, 1, k, k) / chain_costs.step_ms(k) for k in range(0, policy.max_gamma + 1))
    shapes = tree_shapes(policy.max_gamma, policy.max_nodes, len(ranks))
    tree_rate = max(expected_tokens(ranks, s.top_k, s.max_depth, s.max_nodes) / tree_costs.shape_ms(s) for s in shapes)
    return tree_rate > chain_rate * (1 + margin) and math.isfinite(tree_rate)


@_memo
def trees_might_pay(policy, chain_costs) -> bool:
    """Whether trees are worth timing: `trees_pay` on tree costs read optimistically off the
    chain's (a tree step = the chain loop's plain step scaled by the width ratio, extrapolated past the timed widths,
    plus one draft's measured extra per level and nothing per node). Where width is dear (fp32, AVX2 CPUs) this
    says no, and the call's calibration times nothing more."""
    from hf_specdec.calibration import TREE_PROBE, TreeCosts

    _, depth, nodes = TREE_PROBE
    plain = chain_costs.step_ms(0)
    probe = plain * chain_costs.verify_ms(nodes + 1) / chain_costs.verify_ms(1) + depth * chain_costs.draft_overhead_ms()
    optimistic = TreeCosts(chain=chain_costs, plain_ms=plain, chain_ms=chain_costs.step_ms(1), tree_ms=probe)
    return trees_pay(policy, optimistic, chain_costs)
