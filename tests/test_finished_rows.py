"""Rows that are done leave the batch (the loop stops feeding them to the target) at a step that drafts nothing, once
the drafter is gone or the default lets it go then, where a forward over fewer rows is cheaper: the output, scores and
stats stay those of plain generate() for every row. The forward costs by row count are pinned by hand here
(`calibration.plain_forward_ms`), so which rows leave never depends on a clock."""

import dataclasses
import functools

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

import hf_specdec
import tiny_models
from hf_specdec import calibration, loop
from hf_specdec.calibration import StepCosts
from hf_specdec.policy import CostAwareDraftPolicy, DraftPolicy, DraftSchedule

REAL_PLAIN_FORWARD_MS = calibration.plain_forward_ms
# A drafter that can never pay: the default lets it go before the first step (no probe can come in these calls).
NEVER = CostAwareDraftPolicy(costs=StepCosts(draft_ms=1e6, target_ms={1: 1.0, 2: 2.0}))


@pytest.fixture(autouse=True)
def linear_costs(monkeypatch):
    """A forward costs 10 + 10 per row (ms); tests replace the table to make other shapes."""
    table = {rows: 10.0 + 10.0 * rows for rows in range(1, 9)}
    monkeypatch.setattr(calibration, "plain_forward_ms", lambda model, rows, device, masks=False: table[rows])
    return table


def _batch_sizes(model):
    """Records the batch size of every forward of `model` (a list the caller reads)."""
    sizes = []
    forward = type(model).forward

    @functools.wraps(forward)
    def recorded(self, *args, **kwargs):
        if self is model:
            sizes.append(kwargs["input_ids"].shape[0])
        return forward(self, *args, **kwargs)

    return sizes, recorded


def _eos_ending_rows_early(target, input_ids, mask, rows, at):
    """EOS ids that end the given rows at the given new-token positions in plain greedy decoding."""
    reference = target.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=24)
    return [int(reference[row, input_ids.shape[1] + step]) for row, step in zip(rows, at)]


@pytest.fixture
def batch6(target):
    input_ids, mask = tiny_models.prompts(6, seed=21)
    eos = _eos_ending_rows_early(target, input_ids, mask, rows=(0, 2, 3, 5), at=(2, 4, 5, 9))
    return input_ids, mask, eos


def _run(target, drafter, monkeypatch, input_ids, mask, **kwargs):
    sizes, recorded = _batch_sizes(target)
    monkeypatch.setattr(type(target), "forward", recorded)
    stats = hf_specdec.SpeculativeStats()
    try:
        out = target.generate(input_ids, attention_mask=mask, drafter=drafter, gamma=kwargs.pop("policy", NEVER),
                              stats=stats, **kwargs)
    finally:
        monkeypatch.setattr(type(target), "forward", recorded.__wrapped__)
    return out, stats, sizes


@pytest.mark.parametrize(
    "extra", [{}, {"repetition_penalty": 1.3}, {"min_new_tokens": 3, "no_repeat_ngram_size": 3},
              {"encoder_repetition_penalty": 1.3}]
)
def test_done_rows_leave_and_the_output_is_plain_generates(target, unrelated_drafter, batch6, monkeypatch, extra):
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=False, **extra)
    expected = target.generate(input_ids, attention_mask=mask, **kwargs)
    out, stats, sizes = _run(target, unrelated_drafter, monkeypatch, input_ids, mask, **kwargs)
    assert torch.equal(out, expected)
    # Rows really ended at different steps, and the batch shrank once half were done (6 rows, then fewer).
    ends = [(row[input_ids.shape[1]:] == tiny_models.PAD).nonzero() for row in expected]
    assert len({int(e[0]) if e.numel() else 24 for e in ends}) > 2
    assert sizes[0] == 6 and min(sizes) <= 3, sizes
    assert stats.drafted.sum() == 0 and stats.emitted.tolist() == [
        int((row[input_ids.shape[1]:] != tiny_models.PAD).sum()) for row in expected
    ]


def test_scores_of_every_row_are_plain_generates(target, unrelated_drafter, batch6, monkeypatch):
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=16, eos_token_id=eos, do_sample=False, return_dict_in_generate=True,
                  output_scores=True, output_logits=True)
    expected = target.generate(input_ids, attention_mask=mask, **kwargs)
    out, _, sizes = _run(target, unrelated_drafter, monkeypatch, input_ids, mask, **kwargs)
    assert min(sizes) < 6
    assert torch.equal(out.sequences, expected.sequences)
    steps = len(expected.scores)
    for name in ("scores", "logits"):
        ours, theirs = getattr(out, name), getattr(expected, name)
        assert len(ours) == steps
        for t in range(steps):
            live = (expected.sequences[:, input_ids.shape[1] + t] != tiny_models.PAD)  # rows still generating at t
            torch.testing.assert_close(ours[t][live], theirs[t][live], rtol=1e-5, atol=1e-5)
            # Past a row's end (padding in `sequences`) its entries are 0 (docs/usage.md), where plain generate()
            # reports the target's scores on the padding it feeds a finished row.
            assert not ours[t][~live].any()


class CountsRows(LogitsProcessor):
    """A processor of the caller's own: it may keep per-row state, so no row may leave under it."""

    def __call__(self, input_ids, scores):
        return scores


def test_no_row_leaves_where_some_state_could_not_follow(target, unrelated_drafter, batch6, monkeypatch):
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=False)
    expected = target.generate(input_ids, attention_mask=mask, **kwargs)
    out, _, sizes = _run(target, unrelated_drafter, monkeypatch, input_ids, mask,
                         logits_processor=LogitsProcessorList([CountsRows()]), **kwargs)
    assert torch.equal(out, expected) and set(sizes) == {6}
    # Control: the same call without it drops rows.
    _, _, sizes = _run(target, unrelated_drafter, monkeypatch, input_ids, mask, **kwargs)
    assert min(sizes) < 6


def test_rows_stay_while_the_drafter_may_still_draft(target, partial_drafter, batch6, monkeypatch):
    # A fixed draft length never lets the drafter go, so the batch keeps every row (per-row drafting state).
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=False)
    sizes, recorded = _batch_sizes(target)
    monkeypatch.setattr(type(target), "forward", recorded)
    out = target.generate(input_ids, attention_mask=mask, drafter=partial_drafter, gamma=2, **kwargs)
    monkeypatch.setattr(type(target), "forward", recorded.__wrapped__)
    assert set(sizes) == {6}
    assert torch.equal(out, target.generate(input_ids, attention_mask=mask, **kwargs))


def test_sampled_calls_drop_rows_and_stay_reproducible(target, unrelated_drafter, batch6, monkeypatch):
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=True, temperature=0.7)
    outs = []
    for _ in range(2):
        torch.manual_seed(5)
        out, stats, sizes = _run(target, unrelated_drafter, monkeypatch, input_ids, mask, **kwargs)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    new = outs[0][:, input_ids.shape[1]:]
    # Every row ends at its first EOS and is padded after it, as generate() leaves it.
    for row in new:
        hits = [i for i, token in enumerate(row.tolist()) if token in eos]
        if hits:
            assert (row[hits[0] + 1:] == tiny_models.PAD).all()


def test_rows_to_keep_follows_the_measured_costs(monkeypatch):
    active = torch.tensor([False, True, False, False, True, False, True, False])  # 3 of 8 rows left
    for table, expected in (
        ({8: 100.0, 3: 50.0, 4: 60.0}, [1, 4, 6]),  # cheaper with fewer rows: the 3 left
        ({8: 108.0, 3: 115.0, 4: 87.0}, [0, 1, 4, 6]),  # fp32 on Zen 4: 3 rows cost more than 4, so one done row stays
        ({8: 100.0, 3: 95.0, 4: 99.0}, None),  # under 10 % cheaper: not worth dropping
    ):
        monkeypatch.setattr(calibration, "plain_forward_ms", lambda model, rows, device, masks=False, t=table: t[rows])
        keep = loop._rows_to_keep(None, torch.device("cpu"), False, active, 3)
        assert (None if keep is None else keep.tolist()) == expected, table
    # A lower bar (drafts expected to give 2.5x: 0.4) keeps every row where 3 rows cost half the batch's forward.
    half = {8: 100.0, 3: 50.0, 4: 60.0}
    monkeypatch.setattr(calibration, "plain_forward_ms", lambda model, rows, device, masks=False: half[rows])
    assert loop._rows_to_keep(None, torch.device("cpu"), False, active, 3, 0.4) is None
    assert loop._rows_to_keep(None, torch.device("cpu"), False, active, 3, 0.55).tolist() == [1, 4, 6]
    # More than half the rows left: nothing is measured or dropped.
    monkeypatch.setattr(calibration, "plain_forward_ms", lambda *args, **kwargs: pytest.fail("measured"))
    assert loop._rows_to_keep(None, torch.device("cpu"), False, torch.tensor([True, True, False]), 2) is None


def test_where_fewer_rows_are_not_cheaper_every_row_stays(target, unrelated_drafter, batch6, monkeypatch, linear_costs):
    linear_costs.update({rows: 100.0 for rows in linear_costs})  # a flat cost: dropping rows saves nothing
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=False)
    out, _, sizes = _run(target, unrelated_drafter, monkeypatch, input_ids, mask, **kwargs)
    assert set(sizes) == {6} and torch.equal(out, target.generate(input_ids, attention_mask=mask, **kwargs))


def test_plain_forward_costs_are_measured_once_per_setting(target, monkeypatch):
    calls = []
    scratch = calibration._scratch_verify
    monkeypatch.setattr(calibration, "_scratch_verify",
                        lambda *args, **kwargs: calls.append(args[1]) or scratch(*args, **kwargs))
    monkeypatch.setattr(calibration, "plain_forward_ms", REAL_PLAIN_FORWARD_MS)  # measured here, not pinned
    calibration.reset_calibration()
    first = [calibration.plain_forward_ms(target, rows, torch.device("cpu")) for rows in (2, 4, 2, 4)]
    assert calls == [2, 4] and first[0] == first[2] and first[1] == first[3] and all(ms > 0 for ms in first)



class ScriptedSchedule(DraftSchedule):
    """Draft lengths by step from a script (0: a plain step), for every row; while it drafts it expects the policy's
    `speedup` (None: a caller's policy, followed to the end)."""

    def __init__(self, policy, batch_size, device):
        super().__init__(policy, batch_size, device)
        self.step = 0
        self.lengths = self._at(0)

    def _at(self, step):
        script = self.policy.script
        return torch.full_like(self.lengths, script[step] if step < len(script) else 0)

    def update(self, active, num_drafted, num_accepted):
        self.step += 1
        self.lengths = self._at(self.step)

    def speedup_to_beat(self, active):
        return self.policy.speedup if self.policy.speedup is None or self.lengths.any() else 1.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScriptedPolicy(DraftPolicy):
    script: tuple = ()
    speedup: float | None = None

    def start(self, target, drafter, batch_size, device, *args, **kwargs):
        return ScriptedSchedule(self, batch_size, device)


# Two drafting steps, plain steps, then a probe at step 6 (half of batch6's rows are done after step 3; two rows still
# generate at step 6).
PROBE_LATER = (1, 1, 0, 0, 0, 0, 1)


def _scripted(target, drafter, monkeypatch, batch6, script, speedup):
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=False)
    policy = ScriptedPolicy(max_gamma=1, script=script, speedup=speedup)
    out, stats, sizes = _run(target, drafter, monkeypatch, input_ids, mask, policy=policy, **kwargs)
    assert torch.equal(out, target.generate(input_ids, attention_mask=mask, **kwargs))
    return stats, sizes


def test_the_default_lets_its_drafter_go_for_rows_to_leave_at_a_plain_step(
    target, partial_drafter, batch6, monkeypatch
):
    stats, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, PROBE_LATER, speedup=1.5)
    assert sizes[0] == 6 and min(sizes) <= 3, sizes
    # The drafter went with the rows: the probe at step 6 never drafted; as many drafts as a script without it.
    no_probe, _ = _scripted(target, partial_drafter, monkeypatch, batch6, PROBE_LATER[:2], speedup=None)
    assert int(stats.drafted.sum()) == int(no_probe.drafted.sum()) > 0


def test_a_callers_policy_keeps_its_drafter_and_rows(target, partial_drafter, batch6, monkeypatch):
    stats, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, PROBE_LATER, speedup=None)
    no_probe, _ = _scripted(target, partial_drafter, monkeypatch, batch6, PROBE_LATER[:2], speedup=None)
    assert set(sizes) == {6} and int(stats.drafted.sum()) > int(no_probe.drafted.sum())


def test_rows_leave_while_drafting_only_where_that_saves_more_than_the_drafts(
    target, partial_drafter, batch6, monkeypatch, linear_costs
):
    # 1 to 3 rows of 6 cost 40 / 70 = 0.57 of the batch's forward. Drafts expected to give 1.5x (bar 0.67) lose to
    # that: the rows leave and the drafter goes while it still drafts; drafts giving 2x (bar 0.5) win.
    linear_costs.update({1: 40.0, 2: 40.0, 3: 40.0})
    every_step = (1,) * 24
    stats, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, every_step, speedup=1.5)
    assert sizes[0] == 6 and min(sizes) <= 3, sizes
    kept, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, every_step, speedup=2.0)
    assert set(sizes) == {6} and int(kept.drafted.sum()) > int(stats.drafted.sum())
    # Drafts in the first 4 steps only: from step 2 (3 rows left) the drafts win, but at the first plain step (step 4,
    # the same 2 rows left as in step 3) the rows leave: the choice is made again every step, not only as rows finish.
    _, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, (1,) * 4, speedup=2.0)
    assert sizes[:4] == [6] * 4 and sizes[4] < 6, sizes


def test_the_default_prices_its_drafts_from_acceptance_step_costs_and_its_bar():
    # Prior 0.5, one draft: 1.5 tokens a row in a step of 120 ms against 1 in a plain one of 100 ms: 1.25x, raised by
    # the bar a draft clears with 3 rows (8 %); a row alone clears 2 %.
    costs = StepCosts(draft_ms=5.0, target_ms={1: 100.0, 2: 115.0}, loop_ms={0: 100.0, 1: 120.0})
    schedule = CostAwareDraftPolicy(costs=costs, prior_alpha=0.5).start(None, None, 4, torch.device("cpu"))
    rows = torch.tensor([True, True, False, True])
    assert schedule.lengths.tolist() == [1] * 4
    assert schedule.speedup_to_beat(rows) == pytest.approx(1.5 / 120.0 * 100.0 * 1.08)
    assert schedule.speedup_to_beat(torch.tensor([False, True, False, False])) == pytest.approx(1.25 * 1.02)
    # At prior 0.1 it drafts nothing: a plain step's 1.0.
    schedule = CostAwareDraftPolicy(costs=costs, prior_alpha=0.1).start(None, None, 4, torch.device("cpu"))
    assert int(schedule.lengths.max()) == 0 and schedule.speedup_to_beat(rows) == 1.0
    # A caller's policy: None, followed to the end.
    assert DraftPolicy(max_gamma=2).start(None, None, 4, torch.device("cpu")).speedup_to_beat(rows) is None


def test_sampled_calls_that_let_a_drafting_drafter_go_stay_reproducible(target, partial_drafter, batch6, monkeypatch):
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=True, temperature=0.7)
    policy = ScriptedPolicy(max_gamma=2, script=(2,) * 24, speedup=1.1)  # drafts every step; rows leave at 3 left
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        runs.append(_run(target, partial_drafter, monkeypatch, input_ids, mask, policy=policy, **kwargs))
    (first, first_stats, sizes), (second, second_stats, _) = runs
    assert min(sizes) < 6 and first_stats.drafted.sum() > 0
    assert torch.equal(first, second) and torch.equal(first_stats.emitted, second_stats.emitted)
