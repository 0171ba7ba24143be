"""The default draft policy's decisions, on hand-given step costs and acceptance: the prompt sets where a call starts,
the call's own acceptance moves it, the measured costs price each shape, and an optimism bonus keeps probing."""

import math
from dataclasses import dataclass

import pytest
import torch

import tiny_models
from hf_specdec.costs import AGE, FADE, StepCosts, reset_costs
from hf_specdec.policy import (
    DELIVERY_PRIOR, MAX_WEIGHT, PRIOR_WEIGHT, CostAwareDraftPolicy, DraftPolicy, Schedule, Shape, TreeDraftPolicy,
    best_shape, expected_tokens, odds_by_band, record_evidence,
)
from hf_specdec.tree import tree_outcomes
from hf_specdec.verify import agreement

CPU = torch.device("cpu")
# A CPU that computes bf16: width costs a little, a draft 10 % of a plain step.
CPU_LIKE = StepCosts(verify_ms={1: 20.0, 2: 22.0, 3: 24.0, 5: 28.0, 7: 32.0, 9: 36.0, 17: 52.0, 33: 84.0}, draft_ms=2.0)
# A GPU: verifying 7 tokens costs what verifying 2 does, and a draft 2 % of a step.
WIDTH_FREE = StepCosts(verify_ms={1: 20.0, 2: 20.2, 7: 20.4, 9: 20.6, 17: 21.0, 33: 22.0}, draft_ms=0.4)


def _schedule(costs, batch=1, **policy):
    trees = policy.pop("trees", False)
    return CostAwareDraftPolicy(costs=costs, trees=trees, **policy).start(batch, CPU, trees=trees)


def _step(schedule, drafted: int, accepted: int, rows: int = 1):
    active = torch.ones(rows, dtype=torch.bool)
    schedule.update(active, torch.full((rows,), drafted), torch.full((rows,), accepted), drafted=drafted > 0, left=rows)
    schedule.drafts()  # the loop asks before the next step: the schedule plans then


def _ran(costs, kind, depth, width, draft_ms, verify_ms):
    """A size's first step in a setting (kernels warming, here 10x slow) is no sample; it is measured from the next
    three."""
    costs.record(kind, depth, width, 10 * draft_ms, 10 * verify_ms)
    for _ in range(3):
        costs.record(kind, depth, width, draft_ms, verify_ms)


class TimedSchedule(Schedule):
    """A fixed policy's schedule whose steps the loop records, as the default's are."""

    timed = True


def _depth(schedule) -> int:
    return 0 if schedule.tree is None and not schedule.drafts() else (
        schedule.tree.max_depth if schedule.tree is not None else int(schedule.lengths.max()))


def test_the_prefill_is_plain_and_the_prompt_sets_the_start():
    schedule = _schedule(CPU_LIKE)
    assert _depth(schedule) == 0  # step 0 (the prefill) drafts nothing
    schedule.set_prior(torch.tensor([0.8]), torch.tensor([100]))
    assert _depth(schedule) >= 2  # a drafter that agrees on the prompt drafts from step 1, and deep
    cold = _schedule(CPU_LIKE, exploration=0.0)
    cold.set_prior(torch.tensor([0.0]), torch.tensor([16]))  # 16 misses against the start's 4 pseudo-drafts: 0.1
    assert _depth(cold) == 0 and cold.prior.item() == pytest.approx(0.1)
    few = _schedule(CPU_LIKE, exploration=0.0)
    few.set_prior(torch.tensor([0.0]), torch.tensor([3]))  # three positions say little: the start keeps most weight
    assert few.prior.item() == pytest.approx(2 / 7) and _depth(few) > 0
    # No evidence on the prompt (NaN: prompt lookup found no match) keeps the neutral start.
    unknown = _schedule(CPU_LIKE)
    unknown.set_prior(torch.tensor([float("nan")]), torch.tensor([100]))
    assert unknown.prior.item() == 0.5 and _depth(unknown) > 0


def test_a_step_is_planned_on_the_costs_recorded_before_it():
    """The loop records a step's time at the next step's start, then asks the schedule: a plan made when the loop asks
    (not when it tells) already prices what the step before measured. A setting's first call thus drafts from its
    third step after the prefill (the first plain step warms kernels, the second prices plain); planned when told,
    or skipping plans over plain steps before plain is priced, it would run a third plain step."""
    costs, one = StepCosts(), torch.ones(1, dtype=torch.bool)
    schedule = _schedule(costs)
    schedule.set_prior(torch.tensor([0.8]), torch.tensor([100]))
    plain = torch.zeros(1, dtype=torch.long)
    schedule.update(one, plain, plain, drafted=False, left=1)  # the prefill (not timed)
    assert not schedule.drafts()  # nothing priced
    for step in range(2):  # two plain steps; each one's time is recorded as the next step starts
        schedule.update(one, plain, plain, drafted=False, left=1)
        costs.record("chain", 0, 1, 0.0, 20.0)
        assert schedule.drafts() == (step == 1)


@pytest.mark.parametrize("costs", [WIDTH_FREE, CPU_LIKE], ids=["width-free", "cpu-like"])
def test_prompt_agreement_zero_starts_plain_and_still_probes(costs):
    schedule = _schedule(costs)
    schedule.set_prior(torch.tensor([0.0]), torch.tensor([100]))
    depths = []
    for _ in range(128):
        depths.append(_depth(schedule))
        _step(schedule, depths[-1], 0)
    assert depths[0] == 0  # starts plain
    assert any(depth > 0 for depth in depths) or costs is CPU_LIKE  # probes where a probe is cheap
    # What the failed probes cost, in plain steps: a bounded share of the call (the bonus shrinks with each probe).
    plain = costs.estimate(None)
    lost = sum(costs.estimate(Shape(0, depth, depth)) / plain - 1 for depth in depths if depth)
    assert lost <= 0.03 * len(depths), (lost, depths)
    assert depths[-16:].count(0) >= 8


def test_observed_acceptance_zero_lets_the_drafter_go():
    schedule = _schedule(CPU_LIKE)  # starts at the neutral 0.5: drafts
    assert _depth(schedule) == 0
    _step(schedule, 0, 0)
    assert _depth(schedule) > 0
    depths = []
    for _ in range(80):
        depths.append(_depth(schedule))
        _step(schedule, depths[-1], 0)
    assert depths[:2] != [0, 0]
    # Let go: plain steps, and a probe now and then as the evidence fades towards the neutral prior (no prompt here).
    assert sum(depth > 0 for depth in depths[-40:]) <= 4, depths
    # Without the bonus it never comes back.
    dead = _schedule(CPU_LIKE, exploration=0.0)
    for _ in range(12):
        _step(dead, _depth(dead), 0)
    assert all(_depth(dead) == 0 for _ in range(1)) and not dead.drafting_pays(torch.tensor([True]))


def test_a_few_early_rejections_count_once_and_do_not_let_a_paying_drafter_go():
    """Each depth reads at the better of the call's recent drafts and its whole record, for whether to draft, which
    shape, and what a step promises: the recent drafts count a call's first rejections twice (they are the whole record
    too), so judged by them two misses of a drafter whose calls accept 40 % would price it below a plain step (0.18
    here against the call's 0.27, where a chain of 1 pays above ~0.22). Many misses still let it go."""
    costs = _measured()  # plain 20 ms, a chain of 1 24 ms: it pays above ~0.22 acceptance
    for _ in range(2):
        costs.remember(((14.0, 35.0),), ())  # two calls at 0.4 (a record worth PRIOR_WEIGHT drafts)
    schedule = _schedule(costs, exploration=0.0, max_gamma=1)
    _step(schedule, 0, 0)  # the prefill
    assert _depth(schedule) == 1
    for _ in range(2):
        _step(schedule, 1, 0)
    (record_hits, record_trials, _), (alpha,) = schedule.record[0], schedule.alphas()[0]
    assert schedule.hits[0, 0] == 0 and schedule.trials[0, 0] > 1.8  # the recent drafts: two misses, barely faded
    assert alpha == pytest.approx(record_hits / (record_trials + 2)) and alpha > 0.25  # the call's record: 0 of 2 over it
    assert _depth(schedule) == 1
    for _ in range(10):
        _step(schedule, _depth(schedule), 0)
    assert _depth(schedule) == 0 and not schedule.drafting_pays(torch.tensor([True]))


def _measured():
    """Unpinned costs (they keep a record) with a plain step of 20 ms and a chain of 1 at 22 + 2 ms measured."""
    costs = StepCosts()
    _ran(costs, "chain", 0, 1, 0.0, 20.0)
    _ran(costs, "chain", 1, 2, 2.0, 22.0)
    return costs


def test_a_setting_remembers_its_calls_and_later_calls_start_there_without_reading_the_prompt():
    costs = _measured()
    first = _schedule(costs)
    assert first.wants_prior  # no record: the call reads the prompt
    for _ in range(3):
        _step(first, 1, 0)
    first.done()
    assert costs.accepted == ()  # three drafts say little: nothing remembered
    for _ in range(5):
        _step(first, 1, 0)
    first.done()
    assert costs.accepted == (((0.0, 8.0),) + ((0.0, 0.0),) * 5,)  # per depth: (hits, trials) of rank-1 drafts
    again = _schedule(costs)  # 8 drafts none accepted, and the start's 4 at 0.5: a drafter is not zero on so few
    assert not again.wants_prior and again.alphas()[0][0] == pytest.approx(2 / 12)
    depths = []
    for _ in range(48):
        _step(again, depths[-1] if depths else 0, 0)
        depths.append(_depth(again))
    assert 0 < sum(depths) <= 4  # tried again, a few times: 8 rejected drafts do not rule a drafter out
    for _ in range(3):
        costs.remember(((0.0, 8.0),) + ((0.0, 0.0),) * 5, ())
    never, depths = _schedule(costs), []  # four calls, 32 drafts, none accepted: worth 32 drafts at 2 / 36
    assert never.alphas()[0][0] == pytest.approx(2 / 36)
    for _ in range(48):
        _step(never, depths[-1] if depths else 0, 0)
        depths.append(_depth(never))
    assert depths == [0] * 48  # a drafter the setting's calls never had accepted: plain all call long
    right = _measured()
    for hits in (16.0, 18.0, 14.0):
        right.remember(((hits, 20.0), (0.5 * hits, hits)), ())
    often = _schedule(right)
    # Depth 1: the record's 48 of 60 with the start's 4 at 0.5; depth 2: its 0.5, where the record's profile puts it
    # (the depth before's estimate, at the odds the record shows at depth 2 against depth 1's).
    first_depth, second_depth = often.alphas()[0][:2]
    assert not often.wants_prior and first_depth == pytest.approx(50 / 64) and 0.45 < second_depth < 0.55
    _step(often, 0, 0)  # the prefill
    assert _depth(often) > 0  # drafts from the first step after it
    pinned = StepCosts(verify_ms={1: 20.0, 2: 22.0}, draft_ms=2.0)  # by hand: no record, nothing beyond what is given
    pinned.remember(((9.0, 10.0),), ())
    assert pinned.accepted == () and pinned.estimate(Shape(0, 1, 1)) == 24.0 and pinned.estimate(Shape(0, 2, 2)) is None


def test_a_call_that_drafted_too_little_leaves_its_prompt_and_later_calls_do_not_read_it_again():
    # A drafter that never pays (16 prompt positions, none agreed) runs plain all call: what its prompt said becomes
    # the setting's record, so the next calls start there without a prompt pass of the drafter (a cost per call).
    def read(agreement: float):  # a setting's first call, which read 16 prompt positions
        costs = _measured()
        schedule = _schedule(costs)
        schedule.set_prior(torch.tensor([agreement]), torch.tensor([16]))
        return costs, schedule

    costs, first = read(0.0)
    for _ in range(8):
        _step(first, 0, 0)
    first.done()
    assert costs.accepted == (((0.0, 16.0),),)
    again = _schedule(costs)  # the prompt's 16 misses and the start's 4 at 0.5, as the first call started
    assert not again.wants_prior and again.alphas()[0][0] == pytest.approx(2 / 20)
    _step(again, 0, 0)
    assert _depth(again) == 0
    # Drafts, where the call made enough, say more than the prompt: they are the record.
    drafted, call = read(0.0)
    for _ in range(4):
        _step(call, 1, 1)
    call.done()
    assert drafted.accepted[0][0] == (4.0, 4.0)
    # No prompt evidence (prompt lookup without a match) and no drafts: nothing to remember, the next call reads again.
    unread, silent = read(float("nan"))
    silent.done()
    assert unread.accepted == () and _schedule(unread).wants_prior


def test_a_record_is_worth_as_many_drafts_as_its_calls_agree():
    # 16 calls of 20 first drafts: at 10 hits each, the calls differ by chance alone (worth MAX_WEIGHT drafts); at 6
    # or 14 hits, by more (worth fewer); at 2 or 18 hits, by far more (PRIOR_WEIGHT, the least); under 4 calls,
    # PRIOR_WEIGHT.
    alike = [pair[:2] for pair in record_evidence([((10.0, 20.0), (6.0, 10.0))] * 16, 3)]  # (hits, trials)
    assert alike == [(MAX_WEIGHT / 2, MAX_WEIGHT), (MAX_WEIGHT * 6 / 20, MAX_WEIGHT / 2), (0.0, 0.0)]
    apart = record_evidence([((6.0, 20.0),), ((14.0, 20.0),)] * 8, 1)  # 0.3 and 0.7: a spread of 0.04, 0.0125 by chance
    assert apart[0][0] / apart[0][1] == 0.5 and apart[0][1] == pytest.approx(0.25 / 0.0275 - 1)
    assert record_evidence([((2.0, 20.0),), ((18.0, 20.0),)] * 8, 1) == [(PRIOR_WEIGHT / 2, PRIOR_WEIGHT, 1.0)]
    assert record_evidence([((10.0, 20.0),)] * 3, 1) == [(PRIOR_WEIGHT / 2, PRIOR_WEIGHT, 1.0)]
    assert record_evidence([], 2) == [(0, 0, 1.0), (0, 0, 1.0)]
    # Depth 1's share counts PRIOR_WEIGHT drafts at the start: one call's 4 rejected drafts read 0.25, not 0.
    assert record_evidence([((0.0, 4.0),)], 1, start=0.5) == [(PRIOR_WEIGHT * 0.25, PRIOR_WEIGHT, 1.0)]
    assert record_evidence([((0.0, 4.0),)] * 8, 1, start=0.5)[0][0] == pytest.approx(MAX_WEIGHT * 2 / 36)
    # A record that agrees holds a call to it through early misses; a depth the record tried a few times only is
    # pulled towards the depth before, so a few misses there do not rule it out for good.
    costs = _measured()
    for call in range(16):
        costs.remember(((10.0, 20.0), (7.0, 10.0), (0.0, 1.0 if call < 2 else 0.0)), ())
    schedule = _schedule(costs)
    for _ in range(2):
        _step(schedule, 1, 0)
    alphas, unrecorded = schedule.alphas()[0], _schedule(_measured())
    for _ in range(2):
        _step(unrecorded, 1, 0)
    assert alphas[0] > 0.45 and 0.6 < alphas[1] < 0.7
    assert unrecorded.alphas()[0][0] == pytest.approx(2 / 6)  # no record: the start's 4 drafts at 0.5, then 0 of 2
    assert alphas[2] > 0.4


def test_a_drafter_right_in_runs_starts_the_next_calls_deep():
    """The odds of acceptance at each depth over the depth before's: each call's drafts at a depth against what its own
    share at the depth before predicts, drawn toward that by PRIOR_WEIGHT drafts (checked against the formula written
    out). Calls that accept at 0.2 and at 0.8, each flat in depth, pooled would read as a profile that rises; they read
    flat, and start the next call where the record alone does; calls right in runs start it on a longer chain."""
    odds = lambda p: p / (1 - p)  # noqa: E731
    runs = [((4.0, 20.0), (3.0, 4.0), (2.5, 3.0)), ((16.0, 20.0), (14.0, 16.0), (12.5, 14.0))] * 8
    flat = [((4.0, 20.0), (1.0, 5.0), (0.2, 1.0)), ((16.0, 20.0), (12.8, 16.0), (10.24, 12.8))] * 8
    second = (8 * 17.0 + PRIOR_WEIGHT * 13.6 / 20) / (8 * 20.0 + PRIOR_WEIGHT)  # 13.6: 4 x 0.2 + 16 x 0.8
    third_before = (3.0 * 0.75 + 14.0 * 14 / 16) / 17.0
    third = (8 * 15.0 + PRIOR_WEIGHT * third_before) / (8 * 17.0 + PRIOR_WEIGHT)
    expected = [1.0, odds(second) / odds(13.6 / 20), odds(third) / odds(third_before), 1.0]
    lift = lambda calls, depths: [record[2] for record in record_evidence(calls, depths)]  # noqa: E731
    assert lift(runs, 4) == pytest.approx(expected) and lift(flat, 3) == pytest.approx([1.0, 1.0, 1.0])
    depths = {}
    for name, calls in (("flat", flat), ("runs", runs)):
        for profile in (True, False):
            costs = StepCosts()
            for width, verify_ms in ((1, 20.0), (2, 21.0), (3, 22.0), (4, 23.0), (5, 24.0)):
                _ran(costs, "chain", width - 1, width, 1.0 * (width - 1), verify_ms)
            for call in calls:
                costs.remember(call, ())
            schedule = _schedule(costs)
            schedule.record = schedule.record if profile else [(*record[:2], 1.0) for record in schedule.record]
            _step(schedule, 0, 0)  # the prefill
            depths[name, profile] = _depth(schedule)
    assert depths["flat", True] == depths["flat", False] < depths["runs", False] < depths["runs", True], depths


def test_a_tree_that_delivers_less_than_its_model_expects_is_priced_by_what_it_delivers():
    # A setting where width is nearly free and the 2nd child is often right: the model picks a tree. Its steps
    # commit half the tokens expected of them (in sampling a tree's top-k drafts are accepted less often than a
    # chain's): the next call prices it by that and drafts a chain.
    costs = StepCosts()
    for width, verify_ms in ((1, 20.0), (2, 20.2), (7, 20.4), (9, 20.6), (17, 21.0), (33, 22.0)):
        _ran(costs, "chain" if width < 9 else "tree", width - 1 if width < 9 else 3, width, 0.4 * (width > 1), verify_ms)
    costs.remember(((60.0, 100.0),), ((0.0, 0.0), (40.0, 100.0)))
    tree = _schedule(costs, trees=True)
    _step(tree, 0, 0)
    shape, alphas = tree._planned
    expected = expected_tokens(alphas, tree.ranks(), shape)[0]
    assert shape is not None and shape.top_k and expected > 2.0
    for _ in range(20):
        costs.deliver(shape, expected / 2, expected)
    chain = _schedule(costs, trees=True)
    _step(chain, 0, 0)
    assert chain._planned[0] != shape and _depth(chain) > 0
    pinned = StepCosts(verify_ms={1: 20.0, 2: 22.0}, draft_ms=2.0)  # by hand: calls change nothing
    pinned.deliver(Shape(0, 1, 1), 1.0, 2.0)
    assert pinned.delivered == {}


def test_a_trees_rank_1_path_counts_at_what_such_paths_delivered_so_hard_text_does_not_price_the_tree_out():
    # A tree's rank-1 path is the chain its drafter would have drafted: where the text is hard it fails, and so would
    # that chain. A tree step is held to its model for what its other nodes add; its rank-1 path counts a chain's
    # promise for its depth times the share of such promises this shape's paths delivered (on a fresh setting: all).
    costs = StepCosts()
    for width, verify_ms in ((1, 20.0), (2, 20.2), (7, 20.4), (9, 20.6), (17, 21.0), (33, 22.0)):
        _ran(costs, "chain" if width < 9 else "tree", width - 1 if width < 9 else 3, width, 0.4 * (width > 1), verify_ms)
    costs.remember(((60.0, 100.0),), ((0.0, 0.0), (40.0, 100.0)))

    def tree_step(accepted: int, ranks: list[int], paths: dict):
        schedule = _schedule(costs, trees=True)
        _step(schedule, 0, 0)
        shape, alphas = schedule._planned
        assert shape is not None and shape.top_k
        trials, hits = torch.zeros(2, 1, shape.depth, shape.top_k).double()
        trials[0, : accepted + 1] = 1.0  # every child of each node on the accepted path was tried
        for depth, rank in enumerate(ranks):
            hits[0, depth, rank - 1] = 1.0  # the path took the node's `rank`-th child
        chain = expected_tokens(alphas, [], Shape(0, shape.depth, shape.depth))[0]  # its rank-1 path's promise
        promised, costs.delivered, costs.paths = expected_tokens(alphas, schedule.ranks(), shape)[0], {}, paths(shape)
        schedule.update(torch.tensor([True]), torch.tensor([shape.depth]), torch.tensor([accepted]), (trials, hits))
        return costs.delivered[shape], chain, promised, costs.paths[shape]

    fresh = lambda shape: {}  # noqa: E731
    (got, want, steps), chain, promised, path = tree_step(0, [], fresh)  # every node rejected: one token committed
    assert (got, want, steps) == pytest.approx((chain, promised, 1)) and got > 1.5
    assert path == pytest.approx((1.0, chain, 1))  # what the path committed against what a chain promised
    (got, _, _), chain, _, _ = tree_step(2, [2, 1], fresh)  # the root's 2nd child, then its 1st: the path failed at once
    assert got == pytest.approx(3.0 + chain - 1.0)
    (got, _, _), chain, _, path = tree_step(2, [1, 1], fresh)  # the rank-1 path itself: it counts as its chain's promise
    assert got == pytest.approx(chain) and path == pytest.approx((3.0, chain, 1))
    # Where this shape's paths delivered half of what chains promised (text hard for any chain), it counts at half.
    (got, _, _), chain, _, path = tree_step(2, [1, 1], lambda shape: {shape: (100.0, 200.0, 50)})
    share = (100.0 + DELIVERY_PRIOR) / (200.0 + DELIVERY_PRIOR)
    assert got == pytest.approx(chain * share) and path == pytest.approx((FADE * 100.0 + 3.0, FADE * 200.0 + chain, 51))


def test_a_chain_is_priced_by_what_its_steps_commit_against_what_its_estimates_promised():
    # A record pooled over a setting's calls holds its deep depths at what the prompts that reach them accept (the
    # good ones). A chain whose steps commit less than the estimates promised costs more per token promised: the
    # setting's next call drafts less deep. Steps that commit what was promised change nothing.
    def setting():
        costs = _measured()
        for width in (3, 4, 5):
            _ran(costs, "chain", width - 1, width, 2.0 * (width - 1), 20.0 + 2 * width)
        for _ in range(16):
            costs.remember(((14.0, 20.0), (12.0, 14.0), (10.0, 12.0), (8.0, 10.0)), ())
        return costs

    costs, kept = setting(), setting()
    first = _schedule(costs)
    _step(first, 0, 0)  # the prefill
    shape, alphas = first._planned
    expected = expected_tokens(alphas, [], shape)[0]
    assert shape == Shape(0, _depth(first), _depth(first)) and shape.depth >= 3 and expected > 2.5
    _step(first, shape.depth, 0)  # every draft rejected: one token committed where `expected` were promised
    assert costs.delivered[shape] == pytest.approx((1.0, expected, 1))
    # A setting's first calls start from the prompt, not a record: the call's own drafts correct their estimates, and
    # what their chains deliver calibrates nothing.
    unrecorded = _measured()
    fresh = _schedule(unrecorded)
    fresh.set_prior(torch.tensor([0.9]), torch.tensor([100]))
    assert fresh.wants_prior and _depth(fresh) > 0
    _step(fresh, _depth(fresh), 0)
    assert unrecorded.delivered == {}
    # A row that drafted fewer than planned (prompt lookup's match ran out) is held to what its drafts promised.
    short = _schedule(setting())
    _step(short, 0, 0)
    alphas = short._planned[1]
    _step(short, 1, 1)
    assert short.costs.delivered[shape] == pytest.approx((2.0, 1.0 + alphas[0][0], 1))
    for _ in range(40):
        costs.deliver(shape, 1.0 + (expected - 1.0) / 2, expected)
        kept.deliver(shape, expected, expected)
    later, same = _schedule(costs), _schedule(kept)
    _step(later, 0, 0)
    _step(same, 0, 0)
    assert 0 < _depth(later) < shape.depth and _depth(same) == shape.depth


def test_a_trees_children_acceptance_carries_over_to_the_settings_next_call():
    costs = _measured()
    _ran(costs, "tree", 3, 9, 6.0, 23.0)
    first = _schedule(costs, trees=True)
    before = first.ranks()
    trials = torch.zeros(1, 3, 4)
    trials[0, 0, :] = 1.0  # the root's four children tried, the second right, in each of 20 tree steps
    hits = torch.zeros_like(trials)
    hits[0, 0, 1] = 1.0
    for _ in range(20):
        first.update(torch.tensor([True]), torch.tensor([3]), torch.tensor([1]), (trials, hits), left=1)
    first.done()
    second = _schedule(costs, trees=True)
    assert second.ranks()[0] > 0.5 > before[0] and second.ranks()[1] < before[1]


def test_depth_pays_where_width_is_free_and_not_where_it_is_dear():
    deep = _schedule(WIDTH_FREE)
    deep.set_prior(torch.tensor([0.8]), torch.tensor([100]))
    assert _depth(deep) == 6  # the longest chain
    dear = StepCosts(verify_ms={1: 20.0, 2: 30.0, 3: 40.0, 7: 80.0}, draft_ms=2.0)  # fp32 on a small CPU
    shallow = _schedule(dear)
    shallow.set_prior(torch.tensor([0.7]), torch.tensor([100]))
    assert _depth(shallow) <= 2


def test_a_chains_rows_draft_on_while_their_odds_pay_for_one_more_level():
    """The path stop: a level costs the deepest priced chain's ms over plain's per level; after d drafts a row drafts
    on while the drafter's odds that all d are accepted, times the next draft's acceptance, buy that level at the
    planned step's tokens per ms: a floor for each d. Cheap levels (width free, drafting 2 % of a step): low floors,
    deep runs go on; dear ones (a draft 10 % of a step): high ones. The next draft is read at its depth's acceptance
    where that is above the first two drafts', else at the better of those: a deeper depth, resting on fewer drafts
    (tried only where the stop let a row go on), may lower a floor, not raise it."""
    floors = []
    for costs in (WIDTH_FREE, CPU_LIKE):
        schedule = _schedule(costs)
        schedule.set_prior(torch.tensor([0.8]), torch.tensor([100]))
        depth = _depth(schedule)
        shape, widest, alphas = Shape(0, depth, depth), Shape(0, 6, 6), schedule.alphas()
        tokens = expected_tokens(alphas, schedule.ranks(), shape)[0]
        level = (costs.estimate(widest) - costs.estimate(None)) / 6
        worth = level * tokens / costs.estimate(shape)
        assert depth and schedule.path_stop[0] == pytest.approx(tuple(worth / max(*alphas[0][:2], a) for a in alphas[0][1:]))
        assert schedule.path_stop[1] == pytest.approx((0.1, 0.3, 0.5, 0.7, 0.9))  # (nothing scored: as given)
        floors.append(schedule.path_stop[0][0])
    assert 0.0 < floors[0] < 0.15 < floors[1] < 0.8, floors
    one = torch.ones(1, dtype=torch.bool)
    for accepted_then in (4, 2):  # of every three steps of 4 drafts: one accepts this many, one 1, one none
        schedule = _schedule(CPU_LIKE)
        schedule.set_prior(torch.tensor([0.6]), torch.tensor([100]))
        for step in range(12):
            accepted = (accepted_then, 1, 0)[step % 3]
            schedule.update(one, torch.tensor([4]), torch.tensor([accepted]), drafted=True, left=1)
        assert _depth(schedule)
        alphas, after = schedule.alphas()[0], schedule.path_stop[0]
        assert alphas[0] > alphas[1]  # the first floor reads depth 1's acceptance, not the lower depth 2's
        if accepted_then == 4:  # depths 3 and 4 accept more often than depths 1 and 2: floors after 2 and 3 drafts lower
            assert alphas[2] > alphas[0] and after[1] < after[0]
            assert after[1] / after[0] == pytest.approx(alphas[0] / alphas[2])
            batch = _schedule(CPU_LIKE, batch=2)  # the same steps in a batch of two, then its last row alone: it reads
            batch.set_prior(torch.tensor([0.6, 0.6]), torch.tensor([100, 100]))  # depths 1 and 2's only (measured: a
            for step in range(12):  # batch's last rows drafting deeper cost its calls; docs/policies.md)
                accepted, rows = (accepted_then, 1, 0)[step % 3], torch.tensor([True, step < 11])
                batch.update(rows, torch.tensor([4, 4]), torch.tensor([accepted] * 2), left=int(rows.sum()))
            assert _depth(batch) and batch.alphas()[0][2] > batch.alphas()[0][0]
            assert len(set(batch.path_stop[0])) == 1  # one floor at every depth
        else:  # depth 3 always rejected: its floor stays at the first draft's
            assert alphas[2] < alphas[1] and after[1] == pytest.approx(after[0])


def test_a_level_is_priced_by_the_deepest_chain_measured_so_far():
    """A setting's first steps measure short chains only, so the longest chain is unpriced: a level then costs the
    deepest priced chain's ms over plain's per level, and the row still stops where its odds stop paying (priced at
    nothing, every row would draft the longest chain)."""
    costs = StepCosts()
    _ran(costs, "chain", 0, 1, 0.0, 20.0)  # plain steps and chains of 1 so far
    _ran(costs, "chain", 1, 2, 2.0, 22.0)
    assert costs.estimate(Shape(0, 6, 6)) is None and costs.estimate(Shape(0, 3, 3)) == pytest.approx(28.0)
    schedule = _schedule(costs)
    schedule.set_prior(torch.tensor([0.8]), torch.tensor([100]))
    depth, alphas = _depth(schedule), schedule.alphas()
    tokens = expected_tokens(alphas, schedule.ranks(), Shape(0, depth, depth))[0]
    worth = (28.0 - 20.0) / 3 * tokens / costs.estimate(Shape(0, depth, depth))
    assert depth and schedule.path_stop[0] == pytest.approx(tuple(worth / max(*alphas[0][:2], a) for a in alphas[0][1:]))
    assert min(schedule.path_stop[0]) > 0.1


def test_a_drafters_odds_are_read_at_what_its_drafts_were_worth_in_the_call():
    """A drafter's odds are read by the band of its top probability (fifths) at what the call's drafts in that band
    were worth: here its first drafts, at 0.25, are all accepted (under-confident, as random weights give) and its
    second, at 0.75, all rejected (confident and wrong). Once a drafter has scored its drafts, chains are drafted up to
    max_gamma and its odds decide where each row stops; a drafter that scores nothing (prompt lookup) drafts the
    chosen length, its odds as given. Both calls hear the same acceptance."""
    one, runs = torch.ones(1, dtype=torch.bool), {}
    for scores in (True, False):
        schedule = _schedule(CPU_LIKE)
        schedule.set_prior(torch.tensor([0.8]), torch.tensor([100]))
        for _ in range(20):
            depth = _depth(schedule)
            confidence = torch.tensor([[0.25] + [0.75] * (depth - 1)]) if scores else None
            schedule.update(one, torch.tensor([depth]), torch.tensor([1]), drafted=True, left=1, confidence=confidence)
        runs[scores] = (_depth(schedule), schedule.path_stop[1])
    (depth, bands), (unscored_depth, unscored_bands) = runs[True], runs[False]
    # 20 accepted at 0.25 and 19 or 20 rejected at 0.75, against 4 drafts each at the band's middle times the overall
    # calibration (hits over the probabilities' sum: 20 / ~20, about 1)
    assert depth == 6 and bands[1] > 0.85 and bands[3] < 0.2 and bands[0] == pytest.approx(0.1, abs=0.02)
    assert 0 < unscored_depth < 3 and unscored_bands == pytest.approx((0.1, 0.3, 0.5, 0.7, 0.9))


def test_a_batch_drafts_the_chosen_length_and_no_row_stops_early():
    """A batch drafts as long as its longest row, so a row that stops early saves no level: only a single row drafts
    on its odds (up to max_gamma); a batch drafts the chosen length with no path stop."""
    rows, one = 4, torch.ones(4, dtype=torch.bool)
    for batch in (1, rows):
        schedule = _schedule(CPU_LIKE, batch=batch)
        schedule.set_prior(torch.full((batch,), 0.8), torch.full((batch,), 100))
        for _ in range(10):
            depth = _depth(schedule)
            schedule.update(one[:batch], torch.full((batch,), depth), torch.full((batch,), min(depth, 2)), drafted=True,
                            left=batch, confidence=torch.full((batch, depth), 0.6))
        depth, (floor, _) = _depth(schedule), schedule.path_stop
        assert (depth == 6 and min(floor) > 0) if batch == 1 else (depth < 6 and floor == 0.0)


def test_a_drafters_odds_read_each_band_of_its_probability_at_what_its_drafts_there_were_worth():
    """Hand-given counts: nothing scored reads each band's middle probability; 40 drafts at 0.3 (band 0.2-0.4), 30
    accepted, read that band at 30 of 40 over 4 drafts at its middle times the calibration, (30 + 4) / (12 + 4) = 2.125,
    and untried bands at their middle times it (at most 1)."""
    assert odds_by_band(torch.zeros(3, 5).double()) == pytest.approx((0.1, 0.3, 0.5, 0.7, 0.9))
    counts = torch.zeros(3, 5).double()
    counts[:, 1] = torch.tensor([30.0, 40.0, 12.0])  # hits, trials, top probabilities' sum
    assert odds_by_band(counts) == pytest.approx((0.2125, (30 + 4 * 0.6375) / 44, 1.0, 1.0, 1.0))


def test_a_settings_next_call_starts_from_the_last_calls_calibration():
    costs, one = _measured(), torch.ones(1, dtype=torch.bool)
    first = _schedule(costs)
    first.set_prior(torch.tensor([0.8]), torch.tensor([100]))
    for _ in range(20):  # each step's first draft accepted at a probability of 0.25, its second rejected at 0.05
        depth = _depth(first)
        confidence = torch.tensor([[0.25] + [0.05] * (depth - 1)])
        first.update(one, torch.tensor([depth]), torch.tensor([1]), drafted=True, left=1, confidence=confidence)
    first.done()
    hits, trials, _ = costs.odds  # [band] each
    assert hits[1] == trials[1] == 4 and hits[0] == 0 and trials[0] == 4  # (20 of each, kept as 4: a band's most)
    again = _schedule(costs)
    _step(again, 0, 0)
    bands = again.path_stop[1]  # its odds before any draft: the last call's
    assert _depth(again) and bands[1] > 0.7 and bands[0] < 0.1 and bands[2] == pytest.approx(0.5 * 8 / 5.2)  # (untried: its middle x hits / probabilities)


def test_a_call_drafting_short_chains_tries_longer_ones_soon_where_depth_pays():
    """The first draft right every other step, every later one right: depth pays, but the start (0.3) says chains of
    1. The bonus of a depth that sits out grows until it is tried; without it (exploration 0) depth is found later."""
    found = {}
    for exploration in (0.15, 0.0):
        schedule = _schedule(StepCosts(verify_ms={1: 20.0, 2: 24.0, 3: 26.0, 4: 28.0, 7: 34.0}, draft_ms=1.0),
                             exploration=exploration)
        schedule.set_prior(torch.tensor([0.3]), torch.tensor([100]))
        depths, drafted = [], 0
        for _ in range(32):
            depths.append(_depth(schedule))
            drafted += depths[-1] > 0
            _step(schedule, depths[-1], depths[-1] if drafted % 2 else 0)
        found[exploration] = depths.index(6)
        assert depths[0] == 1 and all(depth == 6 for depth in depths[found[exploration]:]), depths
    assert found[0.15] <= 12 < 16 <= found[0.0], found


def test_steps_without_a_draft_grow_only_the_first_depths_bonus():
    """A drafter that sits out is probed by depth 1's bonus alone: deeper depths' bonuses grow only while drafting
    (growing them too made each probe a longer chain, and settings where nothing pays ran below plain)."""
    schedule = _schedule(CPU_LIKE)
    schedule.set_prior(torch.tensor([0.05]), torch.tensor([100]))
    for _ in range(40):
        _step(schedule, 0, 0)
    (bold,), (plain,) = schedule.alphas(0.15), schedule.alphas(0.0)
    assert bold[0] > plain[0] + 0.05 and bold[1:] == plain[1:]
    _step(schedule, 1, 1)  # a chain of 1 drafted: depth 2 sat out a drafting step
    (bold,), (plain,) = schedule.alphas(0.15), schedule.alphas(0.0)
    assert bold[0] == plain[0] and all(b > p for b, p in zip(bold[1:], plain[1:]))


def test_a_drafter_that_becomes_right_later_is_tried_again():
    schedule = _schedule(CPU_LIKE)
    _step(schedule, 0, 0)
    for _ in range(30):  # wrong at first: let go
        _step(schedule, _depth(schedule), 0)
    assert _depth(schedule) == 0
    depths = []
    for _ in range(200):  # then always right: a probe finds it and drafting resumes
        depths.append(_depth(schedule))
        _step(schedule, depths[-1], depths[-1])
    first = next(i for i, depth in enumerate(depths) if depth > 0)
    assert first < 100 and all(depth > 0 for depth in depths[first:]) and max(depths) >= 3, depths


def test_trees_are_chosen_where_width_is_free_and_rank_two_is_often_right():
    schedule = _schedule(WIDTH_FREE, trees=True)
    schedule.rank_trials[1], schedule.rank_hits[1] = 100.0, 40.0  # the 2nd child right 40 % of the time
    schedule.set_prior(torch.tensor([0.5]), torch.tensor([100]))
    assert schedule.tree is not None and schedule.tree.max_nodes >= 16
    chains = _schedule(CPU_LIKE, trees=True)
    chains.set_prior(torch.tensor([0.5]), torch.tensor([100]))  # rank 2's prior 0.15: a tree's extra nodes do not pay their width here
    assert chains.tree is None and _depth(chains) > 0


def test_unmeasured_costs_start_plain_and_explore_by_doubling():
    costs = StepCosts()
    schedule = _schedule(costs)
    schedule.set_prior(torch.tensor([0.9]), torch.tensor([100]))
    assert _depth(schedule) == 0  # no plain step measured yet: nothing to price against
    costs.record("chain", 0, 1, 0.0, 200.0)
    _step(schedule, 0, 0)
    assert _depth(schedule) == 0  # the first plain step warmed the kernels: no sample
    costs.record("chain", 0, 1, 0.0, 20.0)
    _step(schedule, 0, 0)
    assert _depth(schedule) == 1  # priced from one sample; widths up to twice the widest measured: a chain of 1
    costs.record("chain", 1, 2, 10.0, 205.0)
    costs.record("chain", 1, 2, 1.0, 20.5)
    _step(schedule, 1, 1)
    assert _depth(schedule) == 3  # width 4 now priced (from widths 1 and 2)
    costs.record("chain", 3, 4, 30.0, 215.0)
    costs.record("chain", 3, 4, 3.0, 21.5)
    _step(schedule, 3, 3)
    assert _depth(schedule) == 6


def test_a_size_with_few_samples_is_priced_by_them_but_never_above_what_the_trusted_sizes_say():
    costs = StepCosts()
    _ran(costs, "chain", 0, 1, 0.0, 20.0)
    _ran(costs, "chain", 1, 2, 1.0, 22.0)
    costs.record("chain", 3, 4, 30.0, 300.0)  # warming
    costs.record("chain", 3, 4, 3.0, 90.0)  # one slow step (a burst) cannot price width 4 out: at most what the
    assert costs.estimate(Shape(0, 3, 3)) == pytest.approx(22.0 + 3.0)  # trusted say (beyond the widest: as it)
    costs.record("chain", 3, 4, 3.0, 24.0)
    assert costs.estimate(Shape(0, 3, 3)) == pytest.approx(22.0 + 3.0)  # median 57: still theirs
    costs.record("chain", 3, 4, 3.0, 24.0)
    assert costs.estimate(Shape(0, 3, 3)) == pytest.approx(24.0 + 3.0)  # three samples: their median
    costs.record("chain", 5, 6, 50.0, 250.0)
    costs.record("chain", 5, 6, 5.0, 22.0)  # one cheap step prices width 6 by it (optimism its next steps
    assert costs.estimate(Shape(0, 5, 5)) == pytest.approx(22.0 + 5.0)  # correct); width 4 keeps its own
    assert costs.estimate(Shape(0, 3, 3)) == pytest.approx(24.0 + 3.0)


def test_a_size_measured_slow_is_measured_again_once_it_sat_out_age_steps():
    """On a GPU a drafter's first steps in a process ran far slower than later ones (kernels loading): priced by them,
    the default never drafted again, and so never measured again. A size none of whose samples is among the setting's
    last AGE steps is unmeasured again: priced from the sizes measured since, so it is tried, and priced as it runs."""
    costs = StepCosts()
    _ran(costs, "chain", 0, 1, 0.0, 20.0)
    _ran(costs, "chain", 1, 2, 600.0, 21.0)  # drafting a level measured 600 ms: three slow samples, trusted
    schedule = _schedule(costs)
    schedule.set_prior(torch.tensor([0.8]), torch.tensor([100]))
    assert _depth(schedule) == 0 and costs.estimate(Shape(0, 1, 1)) == 621.0
    for step in range(AGE + 32):
        costs.record("chain", 0, 1, 0.0, 20.0)
        _step(schedule, 0, 0)
        if step < AGE - 4:  # (the slow samples count for AGE steps: until then the plain steps are right)
            assert _depth(schedule) == 0
    assert ("draft", "chain", 1) not in costs.measured() and ("verify", "chain", 1) in costs.measured()
    assert _depth(schedule) > 0  # tried again: drafting is unpriced, so free until its next step says otherwise
    costs.record("chain", 1, 2, 2.0, 21.0)  # a level costs 2 ms now: one sample prices it (no trusted size says more;
    _step(schedule, 1, 1)  # width 2, one sample again, at most what the trusted plain step says)
    assert costs.estimate(Shape(0, 1, 1)) == 20.0 + 2.0 and _depth(schedule) > 0


def test_a_draft_nobody_accepts_never_pays_however_cheap_a_wider_forward_measured():
    costs = StepCosts()
    for _ in range(4):
        costs.record("chain", 0, 1, 0.0, 30.0)
        costs.record("chain", 1, 2, 0.5, 27.0)  # a 2-token forward that measured cheaper than a 1-token one
    assert costs.estimate(None) == costs.estimate(Shape(0, 1, 1)) - 0.5 == 30.0  # priced as a plain step, no less
    schedule = _schedule(costs, exploration=0.0)
    schedule.set_prior(torch.tensor([0.0]), torch.tensor([100]))
    assert _depth(schedule) == 0


def test_each_width_is_priced_as_measured_and_never_below_a_plain_step():
    # fp32 on a Zen 5 core: a 3-token forward costs more than a 4-token one; a chain of 3 must not pay for it.
    costs = StepCosts(verify_ms={1: 40.0, 2: 63.0, 3: 80.0, 4: 63.0, 6: 73.0}, draft_ms=1.0)
    widths = [costs.estimate(Shape(0, depth, depth)) - 1.0 * depth for depth in range(1, 6)]
    assert widths == [63.0, 80.0, 63.0, 68.0, 73.0]
    cheap = StepCosts(verify_ms={1: 33.0, 2: 31.0, 4: 30.0}, draft_ms=1.0)  # bf16: wider forwards measured cheaper
    assert [cheap.estimate(Shape(0, depth, depth)) - 1.0 * depth for depth in (1, 2, 3)] == [33.0, 33.0, 33.0]


def test_step_costs_interpolate_extrapolate_and_cap():
    costs = StepCosts()
    assert costs.estimate(None) is None
    costs.record("chain", 0, 1, 0.0, 90.0)  # the first step warms the kernels: no sample
    assert costs.estimate(None) is None
    for ms in (20.0, 22.0, 21.0):
        costs.record("chain", 0, 1, 0.0, ms)
    _ran(costs, "chain", 1, 2, 2.0, 24.0)
    _ran(costs, "chain", 3, 4, 6.0, 30.0)
    assert costs.estimate(None) == 21.0  # the median of the plain steps
    assert costs.estimate(Shape(0, 1, 1)) == 26.0
    assert costs.estimate(Shape(0, 2, 2)) == pytest.approx(27.0 + 4.0)  # between widths 2 and 4; 2 ms a level
    assert costs.estimate(Shape(0, 5, 5)) == pytest.approx(30.0 + 10.0)  # beyond the widest: as the widest
    assert costs.estimate(Shape(0, 8, 8)) is None  # width 9 > twice the widest measured
    assert costs.estimate(Shape(4, 3, 6)) == pytest.approx(30.0 + 6.0)  # a tree priced from the chains' curve
    # A measured tree costs its chain width's line plus what it measured more: 3 ms at width 5, so 3 ms at width 7.
    _ran(costs, "tree", 2, 5, 9.0, 30.0 + 3.0)
    assert costs.estimate(Shape(4, 3, 6)) == pytest.approx(30.0 + 3.0 + 9.0 / 2 * 3)
    pinned = StepCosts(verify_ms={1: 10.0}, draft_ms=1.0)
    pinned.record("chain", 0, 1, 0.0, 99.0)
    assert pinned.estimate(None) == 10.0  # pinned costs ignore what calls measure


def test_expected_tokens_of_chains_and_trees():
    alphas = torch.tensor([[0.5, 0.5, 0.5], [1.0, 0.0, 0.0]], dtype=torch.float64)
    assert expected_tokens(alphas, [], Shape(0, 3, 3)) == [1.875, 2.0]
    # One row at 0.5 per depth, 2nd child 0.3: nodes 0.5, 0.3 (depth 1), 0.25, 0.15 (depth 2, under the best).
    tree = expected_tokens(alphas[:1], [0.3], Shape(2, 2, 4))
    assert tree == pytest.approx([1 + 0.5 + 0.3 + 0.25 + 0.15])
    # The rows' harmonic mean: a batch waits for its slowest row (their plain mean, 2.22 tokens, would draft 3).
    costs = lambda shape: 10.0 if shape is None else 10.0 + 3 * shape.depth
    assert best_shape(torch.tensor([[0.9] * 3, [0.0] * 3], dtype=torch.float64), [], costs,
                      (Shape(0, 1, 1), Shape(0, 3, 3)), 0.02) is None
    assert best_shape(torch.tensor([[0.9] * 3, [0.9] * 3], dtype=torch.float64), [], costs,
                      (Shape(0, 1, 1), Shape(0, 3, 3)), 0.02) == Shape(0, 3, 3)


def test_tree_outcomes_read_trials_and_hits_off_the_accepted_path():
    # Root 0 with children 1 (best), 2; node 1 with children 3, 4; node 2 with child 5.
    parents = torch.tensor([[-1, 0, 0, 1, 1, 2]])
    trials, hits = tree_outcomes(parents, torch.tensor([[2, 5, -1, -1, -1]]), torch.tensor([2]), 3)
    assert trials[0, 0].tolist() == [1, 1, 0] and hits[0, 0].tolist() == [0, 1, 0]  # the root's 2nd child taken
    assert trials[0, 1].tolist() == [1, 0, 0] and hits[0, 1].tolist() == [1, 0, 0]  # node 2's only child taken
    assert trials[0, 2].tolist() == [0, 0, 0]  # node 5 has no children
    trials, hits = tree_outcomes(parents, torch.tensor([[-1] * 5]), torch.tensor([0]), 3)
    assert trials[0, 0].tolist() == [1, 1, 0] and hits.sum() == 0


def _naive_agreement(target_logits, tokens, draft_logits, pad_lens, lens, do_sample, temperature):
    out = []
    for b in range(target_logits.shape[0]):
        values = []
        for j in range(target_logits.shape[1]):
            index = int(lens[b]) - target_logits.shape[1] - 1 + j
            if index < int(pad_lens[b]) or int(tokens[b, j]) < 0:
                continue
            p = torch.softmax(target_logits[b, j].double() / temperature, dim=-1)
            if not do_sample:
                values.append(float(int(target_logits[b, j].argmax()) == int(tokens[b, j])))
            elif draft_logits is None:
                values.append(float(p[tokens[b, j]]))
            else:
                q = torch.softmax(draft_logits[b, j].double() / temperature, dim=-1)
                values.append(sum(min(float(p[v]), float(q[v])) for v in range(p.shape[0])))
        out.append(sum(values) / len(values) if values else math.nan)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("do_sample", [False, True])
@pytest.mark.parametrize("deterministic", [False, True])
def test_prompt_agreement_matches_a_naive_per_position_oracle(do_sample, deterministic):
    generator = torch.Generator().manual_seed(0)
    target_logits = torch.randn(3, 6, 11, generator=generator)
    draft_logits = target_logits + torch.randn(3, 6, 11, generator=generator)
    tokens = draft_logits.argmax(dim=-1)
    tokens[1, 2] = -1  # no guess there
    tokens[2] = -1  # no guess at all: NaN
    pad_lens, lens = torch.tensor([0, 4, 0]), torch.tensor([7, 9, 9])  # row 0: its first position has no real token
    logits = None if deterministic else draft_logits
    got, counts = agreement(target_logits, tokens, logits, pad_lens, lens, do_sample, 0.7)
    assert counts.tolist() == [6, 3, 0]
    expected = _naive_agreement(target_logits, tokens, logits, pad_lens, lens, do_sample, 0.7)
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert got[2].isnan() and 0 < got[0] <= 1


def test_the_prompt_prior_reaches_the_call(target, partial_drafter, unrelated_drafter):
    """End to end: a drafter that agrees with the target on the prompt starts above one that never does."""
    from hf_specdec import policy as policy_module

    priors = []
    real_set_prior = policy_module.AdaptiveSchedule.set_prior

    def recording(self, values, positions):
        priors.append(values.clone())
        return real_set_prior(self, values, positions)

    input_ids, mask = tiny_models.prompts(2, seed=3)
    reset_costs()  # a setting's first call reads the prompt; later ones start from its record
    policy_module.AdaptiveSchedule.set_prior = recording
    try:
        for drafter in (partial_drafter, unrelated_drafter, "prompt_lookup"):
            expected = target.generate(input_ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
            out = target.generate(input_ids, attention_mask=mask, max_new_tokens=8, do_sample=False, drafter=drafter)
            assert torch.equal(out, expected)
    finally:
        policy_module.AdaptiveSchedule.set_prior = real_set_prior
    partial, unrelated = priors[0], priors[1]
    assert partial.min() > unrelated.max() and len(priors) == 3


def test_only_the_defaults_own_steps_price_its_shapes(target, partial_drafter):
    """A fixed shape's calls record nothing: the default knows of a shape only what its own steps measured."""
    from hf_specdec import ModelDrafter
    from hf_specdec.costs import costs_for

    input_ids, mask = tiny_models.prompts(1, seed=5)
    reset_costs()
    setting = costs_for(target, ModelDrafter(partial_drafter), torch.device("cpu"), 1, False)
    kwargs = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, drafter=partial_drafter)
    target.generate(input_ids, gamma=3, **kwargs)
    target.generate(input_ids, gamma=TreeDraftPolicy(top_k=2, max_depth=2, max_nodes=4), **kwargs)
    assert setting.measured() == {}
    target.generate(input_ids, **kwargs)
    assert ("verify", "chain", 1) in setting.measured()


def test_a_shape_priced_out_by_a_few_unlucky_steps_is_tried_again():
    """The best shape's first steps commit 0.4 of what was promised: another shape wins. The bonus of a shape with few
    steps in the setting grows with the setting's steps, so the first is tried again, delivers, and stays; without it
    (exploration 0) it is never run again."""
    def choice(costs, exploration):
        schedule = _schedule(costs, trees=True, exploration=exploration)
        _step(schedule, 0, 0)
        shape, alphas = schedule._planned
        return shape, expected_tokens(alphas, schedule.ranks(), shape)[0]

    for exploration in (0.15, 0.0):
        costs = StepCosts()
        for kind, depth, width, draft_ms in (("chain", 0, 1, 0.0), ("chain", 1, 2, 2.0), ("chain", 3, 4, 6.0),
                                             ("tree", 3, 9, 6.0)):
            _ran(costs, kind, depth, width, draft_ms, 20.0 + 2 * (width - 1) if kind == "chain" else 30.0)
        for _ in range(16):
            costs.remember(((60.0, 100.0), (40.0, 60.0), (25.0, 40.0)), ((0.0, 0.0), (15.0, 100.0), (8.0, 100.0)))
        best, expected = choice(costs, 0.0)
        assert best.top_k  # a tree
        for _ in range(3):  # unlucky steps: the best shape is priced out
            costs.deliver(best, 0.4 * expected, expected)
        assert choice(costs, 0.0)[0] != best
        shapes = []
        for _ in range(100):  # the setting's steps, each delivering what it promised
            shape, expected = choice(costs, exploration)
            costs.deliver(shape, expected, expected)
            shapes.append(shape)
        if exploration:
            assert best in shapes[:10] and shapes[-50:].count(best) == 50, shapes
        else:
            assert best not in shapes


def test_a_calls_first_drafting_step_prices_no_shape(target, partial_drafter, monkeypatch):
    """The drafter's first forward in a call also reads the prompt (at the Whisper shape, its cross-attention over the
    audio: a chain of 3 in 145-228 ms, 45-48 ms later): that step's time is no sample of the shape it drafted."""
    import time

    @dataclass(frozen=True, kw_only=True)
    class Timed(DraftPolicy):  # a plain prefill, then chains of 2 (as the default's calls after a setting's first)
        def start(self, batch_size, device, **call):
            return TimedSchedule(self, batch_size, device)

        def initial_lengths(self, batch_size, device):
            return torch.zeros(batch_size, dtype=torch.long, device=device)

        def next_lengths(self, lengths, active, num_drafted, num_accepted):
            return torch.full_like(lengths, 2)

    recorded, slept, forward = [], [], partial_drafter.forward

    def slow_first(*args, **kwargs):  # the drafter's first forward in the call takes 300 ms more
        if not slept:
            slept.append(time.sleep(0.3))
        return forward(*args, **kwargs)

    monkeypatch.setattr(StepCosts, "record", lambda self, kind, depth, width, draft_ms, verify_ms: recorded.append(
        (depth, draft_ms)))
    monkeypatch.setattr(partial_drafter, "forward", slow_first)
    input_ids, mask = tiny_models.prompts(1, seed=5)
    target.generate(input_ids, attention_mask=mask, max_new_tokens=12, do_sample=False, drafter=partial_drafter,
                    gamma=Timed(max_gamma=2))
    drafting = [ms for depth, ms in recorded if depth]
    assert slept and drafting and max(drafting) < 300, recorded


def test_a_tree_step_is_priced_by_the_levels_it_drafted_not_by_its_deepest_kept_node(target, partial_drafter,
                                                                                      monkeypatch):
    """A tree drafts `max_depth` levels and keeps its `max_nodes` best nodes, which may all lie higher up: its drafting
    time is a sample of that many levels (else a 4-level tree whose kept nodes end at depth 3 prices tree 4/3/8)."""
    @dataclass(frozen=True, kw_only=True)
    class Timed(TreeDraftPolicy):
        def start(self, batch_size, device, **call):
            return TimedSchedule(self, batch_size, device)

    recorded, forwards, forward = [], [0], partial_drafter.forward

    def counted(*args, **kwargs):  # one drafter forward a level
        forwards[0] += 1
        return forward(*args, **kwargs)

    def record(self, kind, depth, width, draft_ms, verify_ms):  # the step before's levels: the forwards since
        recorded.append((kind, depth, width, forwards[0]))
        forwards[0] = 0

    monkeypatch.setattr(StepCosts, "record", record)
    monkeypatch.setattr(partial_drafter, "forward", counted)
    input_ids, mask = tiny_models.prompts(1, seed=5)
    target.generate(input_ids, attention_mask=mask, max_new_tokens=24, do_sample=False, drafter=partial_drafter,
                    gamma=Timed(top_k=4, max_depth=4, max_nodes=6))
    trees = [(depth, levels) for kind, depth, width, levels in recorded[1:] if kind == "tree"]  # (the first: the prefill's too)
    assert trees and all(depth == levels for depth, levels in trees), recorded
    assert any(depth == 4 for depth, _ in trees)


def test_drafting_right_after_plain_steps_prices_no_level(target, partial_drafter, monkeypatch):
    """After plain steps a drafter first catches up on their tokens in its first forward (the shipped head after 16-32
    plain steps: 1.6-2.3x a level's ms on a Zen 3): that step's drafting time is no sample, its verification is."""
    @dataclass(frozen=True, kw_only=True)
    class Timed(DraftPolicy):  # plain, a chain of 1 (after a plain step), a chain of 2 (after a drafting one), ...
        def start(self, batch_size, device, **call):
            return TimedSchedule(self, batch_size, device)

        def initial_lengths(self, batch_size, device):
            return torch.zeros(batch_size, dtype=torch.long, device=device)

        def next_lengths(self, lengths, active, num_drafted, num_accepted):
            return (lengths + 1) % 3

    recorded = []
    monkeypatch.setattr(StepCosts, "record", lambda self, kind, depth, width, draft_ms, verify_ms: recorded.append(
        (depth, draft_ms, verify_ms)))
    input_ids, mask = tiny_models.prompts(1, seed=5)
    target.generate(input_ids, attention_mask=mask, max_new_tokens=24, do_sample=False, drafter=partial_drafter,
                    gamma=Timed(max_gamma=2))
    steps = list(zip(recorded, recorded[1:]))  # (the step before, the step)
    after_plain = [step for before, step in steps if step[0] and not before[0]]
    after_drafting = [step for before, step in steps if step[0] and before[0]]
    assert after_plain and after_drafting, recorded
    assert all(draft_ms is None and verify_ms > 0 for _, draft_ms, verify_ms in after_plain), recorded
    assert all(draft_ms > 0 for _, draft_ms, _ in after_drafting), recorded
