"""The default policy with draft trees (hf_specdec.tree_schedule): the expected-token model against brute force,
rank acceptance read off hand-built trees, the choice between the chain loop and the tree loop on hand-built
costs, shape choices on hand-fed acceptance histories, and calls run as trees: greedy token-identical to plain
generate(), sampling on the exact joint (chi-square, with a control), refused or priced as chains where trees
cannot run or their steps cannot be timed."""

import itertools
import math

import pytest
import torch

import hf_specdec
import tiny_models
from hf_specdec import calibration, tree_schedule
from hf_specdec.calibration import StepCosts, TreeCosts
from hf_specdec.policy import CostAwareDraftPolicy, CostAwareSchedule, TreeDraftPolicy
from hf_specdec.tree import DraftTree
from hf_specdec.tree_schedule import CostAwareTreeSchedule, expected_tokens, rank_outcomes
from joint_util import padded_pair_fits

WIDTHS = (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33)
# A CPU that computes bf16: a forward over 17 tokens costs 1.3 of one; a tree level 3 ms, a node 0.25 ms.
CHEAP = TreeCosts(
    chain=StepCosts(draft_ms=2.0, target_ms={w: 60.0 * (1 + 0.018 * (w - 1)) for w in WIDTHS}, loop_ms={0: 62.0, 1: 66.4}),
    plain_ms=62.0, chain_ms=62.0 * 1.018 + 3.0 + 0.25, tree_ms=62.0 * 1.144 + 2 * 3.0 + 8 * 0.25,
)
# Width that costs nearly as much as another step (fp32 on an AVX2 CPU): trees cannot pay.
DEAR = TreeCosts(
    chain=StepCosts(draft_ms=2.0, target_ms={w: 60.0 * (1 + 0.7 * (w - 1)) for w in WIDTHS}, loop_ms={0: 62.0, 1: 110.0}),
    plain_ms=62.0, chain_ms=110.0, tree_ms=62.0 * 6.6 + 10.0,
)


def _brute_force(ranks, top_k, max_depth, max_nodes):
    """1 + the max_nodes largest values over every node of the full tree (each path a sequence of ranks)."""
    values = [
        math.prod(ranks[k] for k in path)
        for depth in range(1, max_depth + 1)
        for path in itertools.product(range(top_k), repeat=depth)
    ]
    return 1 + sum(sorted(values, reverse=True)[:max_nodes])


def test_expected_tokens_equal_brute_force_and_the_chain_formula():
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        raw = torch.rand(4, generator=generator).sort(descending=True).values
        ranks = (raw / raw.sum() * float(torch.rand(1, generator=generator))).tolist()
        for top_k, depth, nodes in [(1, 4, 4), (2, 3, 6), (3, 2, 8), (4, 3, 16), (2, 5, 4)]:
            assert expected_tokens(ranks, top_k, depth, nodes) == pytest.approx(_brute_force(ranks, top_k, depth, nodes))
    # A chain: 1 + a + ... + a^k (Leviathan et al.); one node: 1 + a_1.
    assert expected_tokens([0.6, 0.2], 1, 3, 3) == pytest.approx(1 + 0.6 + 0.36 + 0.216)
    assert expected_tokens([0.6, 0.2], 2, 2, 3) == pytest.approx(1 + 0.6 + 0.36 + 0.2)  # 0.36 (1, 1) beats 0.2 * 0.6


def test_the_shape_chosen_is_the_one_with_the_most_expected_tokens_per_ms_that_beats_cheaper_ones_by_min_gain():
    # Oracle: every shape priced from scratch with expected_tokens (brute-force-checked above).
    generator = torch.Generator().manual_seed(1)
    for trial in range(10):
        schedule = _start({}, CHEAP)
        hits = torch.rand(4, generator=generator) * torch.tensor([30.0, 10.0, 5.0, 3.0])
        schedule.hits, schedule.trials = hits.double(), torch.full((4,), 40.0, dtype=torch.float64)
        deepest = 1 + trial % 6
        ranks = [round(a / 0.02) * 0.02 for a in schedule.ranks()]
        best, best_rate = None, 1 / CHEAP.step_ms(0)
        for shape in sorted(schedule.shapes, key=CHEAP.shape_ms):
            rate = expected_tokens(ranks, shape.top_k, shape.max_depth, shape.max_nodes) / CHEAP.shape_ms(shape)
            if shape.max_depth <= deepest and rate > best_rate * 1.02:
                best, best_rate = shape, rate
        assert schedule.best_shape(deepest) == best


def _tree(parents):
    parents = torch.tensor([parents])
    valid = torch.ones_like(parents, dtype=torch.bool)
    return DraftTree(tokens=torch.arange(parents.shape[1])[None], parents=parents, valid=valid)


def test_rank_outcomes_read_trials_and_hits_off_the_accepted_path():
    # root 0 -> children 1, 2 (ranks 1, 2); 2 -> children 3, 4, 5; 1 -> child 6.
    tree = _tree([-1, 0, 0, 2, 2, 2, 1])
    active = torch.tensor([True])
    # Accepted 2 (rank 2) then 5 (rank 3), then 5's children (none) end it: root tried ranks 1-2, node 2 ranks 1-3.
    trials, hits = rank_outcomes(tree, torch.tensor([[2, 5, -1]]), torch.tensor([2]), active, 4)
    assert trials.tolist() == [2, 2, 1, 0] and hits.tolist() == [0, 1, 1, 0]
    # Nothing accepted: the root's two children both missed.
    trials, hits = rank_outcomes(tree, torch.tensor([[-1, -1, -1]]), torch.tensor([0]), active, 4)
    assert trials.tolist() == [1, 1, 0, 0] and hits.tolist() == [0, 0, 0, 0]
    # Accepted 1 (rank 1), then 6's sibling-less child rejected: root rank 1 hit, node 1's one child missed.
    trials, hits = rank_outcomes(tree, torch.tensor([[1, -1, -1]]), torch.tensor([1]), active, 4)
    assert trials.tolist() == [2, 1, 0, 0] and hits.tolist() == [1, 0, 0, 0]
    # An inactive row says nothing.
    trials, hits = rank_outcomes(tree, torch.tensor([[1, -1, -1]]), torch.tensor([1]), torch.tensor([False]), 4)
    assert trials.sum() == 0 and hits.sum() == 0


def test_tree_costs_split_a_level_from_a_node_and_price_chains_like_the_loop():
    per_level, per_node = CHEAP.extras()
    assert per_level == pytest.approx(3.0) and per_node == pytest.approx(0.25)
    assert CHEAP.step_ms(0) == 62.0 and CHEAP.step_ms(1) == pytest.approx(CHEAP.chain_ms)
    assert CHEAP.shape_ms(TreeDraftPolicy(top_k=4, max_depth=2, max_nodes=8)) == pytest.approx(CHEAP.tree_ms)


def _start(policy, costs, trees_possible=True, batch=1):
    policy = CostAwareDraftPolicy(**policy, costs=costs) if isinstance(policy, dict) else policy
    return policy.start(None, None, batch, torch.device("cpu"), 64, trees_possible=trees_possible)


def test_the_default_runs_trees_where_width_is_cheap_and_chains_where_it_is_dear():
    assert isinstance(_start({}, CHEAP), CostAwareTreeSchedule)
    for schedule in (_start({}, DEAR), _start({}, CHEAP, trees_possible=False), _start({"trees": False}, CHEAP)):
        assert type(schedule) is CostAwareSchedule
    # Pinned chain costs pin chains.
    assert type(_start({}, CHEAP.chain)) is CostAwareSchedule
    # A tree loop whose plain step costs more than the chain loop's: a call that gives its drafter up would lose.
    heavy = TreeCosts(chain=CHEAP.chain, plain_ms=66.0, chain_ms=70.0, tree_ms=84.0)
    assert type(_start({}, heavy)) is CostAwareSchedule


# Costs calibrated on an AMD EPYC Zen 5 (avx512_bf16, no AMX), bf16, batch 1, with an unrelated drafter: the tree
# loop's plain step within 2 % of the chain loop's, and widths cheap enough that the model puts the best tree about
# 7 % ahead of the best chain on the priors, while the default run as trees there measured 7 % behind chains.
ZEN5_BF16 = TreeCosts(
    chain=StepCosts(draft_ms=1.8, target_ms={1: 26.7, 2: 28.3, 3: 28.2, 4: 28.5, 5: 29.4, 7: 31.3, 9: 32.5, 13: 36.1,
                                             17: 38.4, 25: 45.5, 33: 54.9}, loop_ms={0: 25.1, 1: 28.5}),
    plain_ms=25.4, chain_ms=29.0, tree_ms=36.0,
)


def test_trees_must_promise_more_than_the_models_error_to_replace_chains():
    policy = CostAwareDraftPolicy(costs=ZEN5_BF16)
    # Ahead of the best chain by more than min_gain (the control: a 2 % bar opens), within the model's error.
    assert tree_schedule.trees_pay(policy, ZEN5_BF16, ZEN5_BF16.chain, margin=policy.min_gain)
    assert not tree_schedule.trees_pay(policy, ZEN5_BF16, ZEN5_BF16.chain)
    assert type(_start(policy, ZEN5_BF16)) is CostAwareSchedule
    assert isinstance(_start({}, CHEAP), CostAwareTreeSchedule)  # CHEAP's trees promise 13 %


def _feed(schedule, steps, rank_hit):
    """`steps` verifications of a 2-level binary tree (root -> 1, 2; 1 -> 3, 4), accepting per `rank_hit()`:
    (rank at the root, rank at the next level), 0 for none."""
    tree = _tree([-1, 0, 0, 1, 1])
    active = torch.tensor([True])
    for _ in range(steps):
        first, second = rank_hit()
        path = [-1, -1]
        if first:
            path[0] = first  # node 1 or 2
            if first == 1 and second:
                path[1] = 2 + second  # node 3 or 4
        accepted = sum(node >= 0 for node in path)
        path_t, accepted_t = torch.tensor([path]), torch.tensor([accepted])
        schedule.observe_tree(active, tree, path_t, accepted_t)
        schedule.update(active, torch.tensor([2]), accepted_t)


def test_the_tree_schedule_widens_when_second_choices_are_kept_and_draws_chains_when_they_never_are():
    generator = torch.Generator().manual_seed(0)

    def draws(a1, a2):
        def draw():
            picks = []
            for _ in range(2):
                u = float(torch.rand(1, generator=generator))
                picks.append(1 if u < a1 else 2 if u < a1 + a2 else 0)
            return tuple(picks)
        return draw

    wide = _start({}, CHEAP)
    _feed(wide, 60, draws(0.45, 0.25))
    assert wide.ranks()[1] > 0.15 and wide.shape is not None and wide.shape.top_k >= 2
    narrow = _start({}, CHEAP)
    _feed(narrow, 60, draws(0.9, 0.0))
    assert narrow.ranks()[1] < 0.05 and narrow.shape is not None and narrow.shape.top_k == 1  # a chain
    assert narrow.shape.max_depth >= 2


def test_the_tree_schedule_gives_up_on_a_drafter_that_is_never_right_and_probes():
    schedule = _start({}, CHEAP)
    assert schedule.shape is not None  # drafts at first, on the prior
    _feed(schedule, schedule.policy.give_up_after, lambda: (0, 0))
    assert schedule.given_up() and schedule.shape is None  # plain steps
    shapes, active, none = [], torch.tensor([True]), torch.tensor([0])
    for _ in range(40):
        shapes.append(schedule.shape)
        if schedule.shape is None:  # a plain step
            schedule.update(active, none, none)
        else:  # a probe, rejected
            tree = _tree([-1, 0])
            schedule.observe_tree(active, tree, torch.tensor([[-1]]), none)
            schedule.update(active, torch.tensor([1]), none)
    probes = [shape for shape in shapes if shape is not None]
    assert probes and all(shape.max_nodes == 1 for shape in probes) and len(probes) < 10  # chains of one, rarely


def _tree_default(**kwargs):
    return CostAwareDraftPolicy(costs=CHEAP, **kwargs)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_default_call_run_as_trees_is_token_identical_to_plain_generate(target, partial_drafter, batch):
    input_ids, mask = tiny_models.prompts(batch, seed=3)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=24)
    stats = hf_specdec.SpeculativeStats()
    out = target.generate(input_ids, drafter=partial_drafter, gamma=_tree_default(), stats=stats, **kwargs)
    assert torch.equal(out, target.generate(input_ids, **kwargs))
    sizes = stats.tree_size_histogram  # a tree loop call: tree sizes counted, several kinds of step
    assert sizes is not None and int(sizes[:, 2:].sum()) > 0 and stats.tokens_per_step > 1.2


def test_a_default_call_with_trees_is_exact_in_sampling():
    """Chi-square on the exact joint of 3 tokens (temperature 1.2, top-k 6), N = 3000 rows of each of two prompts
    in one left-padded batch, seed 0, 0.999 quantile, costs pinned so the call runs as trees and changes shape
    as acceptance comes in. Control: prompt A's samples against prompt B's joint fail."""
    target = tiny_models.llama(seed=0, vocab=10, hidden=32)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.15)
    target.generation_config.eos_token_id = None
    drafter = tiny_models.perturbed(target, scale=0.6, seed=1)
    # No batch bar: a batch of 6000 rows would ask 100 % (it grows with the slowest of that many rows) and never draft.
    _, _, stats = padded_pair_fits(target, drafter, _tree_default(min_batch_gain=0.0), 6000)
    assert stats.tree_size_histogram is not None and int(stats.tree_size_histogram[:, 2:].sum()) > 0
    assert 0.05 < stats.acceptance_rate < 0.95


def test_tree_steps_that_cannot_be_timed_leave_the_call_to_chains(target, partial_drafter, monkeypatch, caplog):
    def broken(self):
        raise RuntimeError("scratch tree call failed")

    monkeypatch.setattr(calibration._ClockedTreePolicy, "tree_schedule", broken)
    monkeypatch.setattr(tree_schedule, "trees_might_pay", lambda policy, costs: True)  # time trees whatever the costs
    calibration.reset_calibration()
    input_ids, mask = tiny_models.prompts(2, seed=5)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=10)
    stats = hf_specdec.SpeculativeStats()
    with caplog.at_level("WARNING", logger="hf_specdec.calibration"):
        out = target.generate(input_ids, drafter=partial_drafter, stats=stats, **kwargs)
    assert "scratch tree call failed" in caplog.text
    assert torch.equal(out, target.generate(input_ids, **kwargs))
    assert stats.tree_size_histogram is None or int(stats.tree_size_histogram.sum()) == 0  # ran as chains
    calibration.reset_calibration()


@pytest.mark.parametrize("bad", [dict(trees=1), dict(max_nodes=0), dict(prior_ranks=[0.1]), dict(prior_ranks=(0.4, 0.3)),
                                 dict(prior_ranks=(-0.1,))])
def test_invalid_tree_settings_of_the_default_raise(bad):
    with pytest.raises(hf_specdec.InvalidGammaError):
        CostAwareDraftPolicy(**bad)


def test_trees_are_not_even_timed_where_the_chains_costs_leave_them_no_chance():
    policy = CostAwareDraftPolicy()
    assert tree_schedule.trees_might_pay(policy, CHEAP.chain)
    assert not tree_schedule.trees_might_pay(policy, DEAR.chain)
    # Width timed only up to 7 tokens: the ratio is extrapolated from the last two timed widths.
    short = StepCosts(draft_ms=2.0, target_ms={w: ms for w, ms in CHEAP.chain.target_ms if w <= 7}, loop_ms={0: 62.0, 1: 66.4})
    assert tree_schedule.trees_might_pay(policy, short)
