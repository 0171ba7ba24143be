"""Rows that are done leave the batch (the loop stops feeding them to the target) at a step that drafts nothing, once
the drafter is gone or the default lets it go then, where a forward over fewer rows is cheaper: the output, scores and
stats stay those of plain generate() for every row. The forward costs by row count are pinned by hand here
(`loop._plain_ms`), so which rows leave never depends on a clock."""

import dataclasses
import functools

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

import hf_specdec
import tiny_models
from hf_specdec import costs, loop
from hf_specdec.costs import StepCosts
from hf_specdec.policy import CostAwareDraftPolicy, DraftPolicy, Schedule, TreeDraftPolicy

# A drafter that can never pay: the default drafts nothing, and lets it go when half the rows are done.
NEVER = CostAwareDraftPolicy(costs=StepCosts(verify_ms={1: 1.0, 2: 2.0}, draft_ms=1e6), exploration=0.0)


@pytest.fixture(autouse=True)
def linear_costs(monkeypatch):
    """A forward costs 10 + 10 per row (ms); tests replace the table to make other shapes."""
    table = {rows: 10.0 + 10.0 * rows for rows in range(1, 9)}
    monkeypatch.setattr(loop, "_plain_ms", lambda step_costs, model, drafter, device, rows, do_sample: table[rows])
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


def test_rows_to_keep_follows_the_measured_costs():
    active = torch.tensor([False, True, False, False, True, False, True, False])  # 3 of 8 rows left
    for table, expected in (
        ({8: 100.0, 3: 50.0, 4: 60.0}, [1, 4, 6]),  # cheaper with fewer rows: the 3 left
        ({8: 108.0, 3: 115.0, 4: 87.0}, [0, 1, 4, 6]),  # fp32 on Zen 4: 3 rows cost more than 4, so one done row stays
        ({8: 100.0, 3: 95.0, 4: 99.0}, None),  # under 10 % cheaper: not worth dropping
        ({8: 100.0, 3: 50.0, 4: None}, [0, 1, 4, 6]),  # 4 rows never measured: tried (then measured for the next call)
    ):
        keep = loop._rows_to_keep(active, 3, table.get)
        assert (None if keep is None else keep.tolist()) == expected, table
    # More than half the rows left: nothing is priced or dropped.
    assert loop._rows_to_keep(torch.tensor([True, True, False]), 2, lambda rows: pytest.fail("priced")) is None


def test_where_fewer_rows_are_not_cheaper_every_row_stays(target, unrelated_drafter, batch6, monkeypatch, linear_costs):
    linear_costs.update({rows: 100.0 for rows in linear_costs})  # a flat cost: dropping rows saves nothing
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=False)
    out, _, sizes = _run(target, unrelated_drafter, monkeypatch, input_ids, mask, **kwargs)
    assert set(sizes) == {6} and torch.equal(out, target.generate(input_ids, attention_mask=mask, **kwargs))


def test_step_costs_are_kept_once_per_setting(target, partial_drafter):
    costs.reset_costs()
    drafter = hf_specdec.ModelDrafter(partial_drafter)
    first = costs.costs_for(target, drafter, torch.device("cpu"), 2, False)
    assert costs.costs_for(target, hf_specdec.ModelDrafter(partial_drafter), torch.device("cpu"), 2, False) is first
    assert costs.costs_for(target, drafter, torch.device("cpu"), 4, False) is not first
    assert costs.costs_for(target, drafter, torch.device("cpu"), 2, True) is not first
    # A drafter without a model is known by its class and settings: "prompt_lookup" makes a new one every call.
    lookup = costs.costs_for(target, hf_specdec.PromptLookupDrafter(), torch.device("cpu"), 2, False)
    assert costs.costs_for(target, hf_specdec.PromptLookupDrafter(), torch.device("cpu"), 2, False) is lookup
    assert costs.costs_for(target, hf_specdec.PromptLookupDrafter(4), torch.device("cpu"), 2, False) is not lookup


class ScriptedSchedule(Schedule):
    """Draft lengths by step from a script (0: a plain step), for every row; `pays` is what it says of drafting."""

    def __init__(self, policy, batch_size, device):
        super().__init__(policy, batch_size, device)
        self.step = 0
        self.lengths = self._at(0)

    def _at(self, step):
        script = self.policy.script
        return torch.full_like(self.lengths, script[step] if step < len(script) else 0)

    def update(self, active, num_drafted, num_accepted, outcomes=None, drafted=True, left=None, confidence=None):
        self.step += 1
        self.lengths = self._at(self.step)

    def drafting_pays(self, active):
        return self.policy.pays


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScriptedPolicy(DraftPolicy):
    script: tuple = ()
    pays: bool = True

    def start(self, batch_size, device, **call):
        return ScriptedSchedule(self, batch_size, device)


# Two drafting steps, plain steps, then a probe at step 6 (half of batch6's rows are done after step 3; two rows still
# generate at step 6).
PROBE_LATER = (1, 1, 0, 0, 0, 0, 1)


def _scripted(target, drafter, monkeypatch, batch6, script, pays):
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=False)
    policy = ScriptedPolicy(max_gamma=1, script=script, pays=pays)
    out, stats, sizes = _run(target, drafter, monkeypatch, input_ids, mask, policy=policy, **kwargs)
    assert torch.equal(out, target.generate(input_ids, attention_mask=mask, **kwargs))
    return stats, sizes


def test_the_drafter_goes_with_rows_that_leave_where_drafting_no_longer_pays(
    target, partial_drafter, batch6, monkeypatch
):
    stats, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, PROBE_LATER, pays=False)
    assert sizes[0] == 6 and min(sizes) <= 3, sizes
    # The drafter went with the rows: the probe at step 6 never drafted; as many drafts as a script without it.
    no_probe, _ = _scripted(target, partial_drafter, monkeypatch, batch6, PROBE_LATER[:2], pays=True)
    assert int(stats.drafted.sum()) == int(no_probe.drafted.sum()) > 0


def test_rows_and_drafter_stay_while_drafting_pays(target, partial_drafter, batch6, monkeypatch):
    stats, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, PROBE_LATER, pays=True)
    no_probe, _ = _scripted(target, partial_drafter, monkeypatch, batch6, PROBE_LATER[:2], pays=True)
    assert set(sizes) == {6} and int(stats.drafted.sum()) > int(no_probe.drafted.sum())
    # While it drafts every step and stops paying, the rows leave and the drafter goes with them.
    every_step = (1,) * 24
    gone, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, every_step, pays=False)
    assert sizes[0] == 6 and min(sizes) <= 3, sizes
    kept, sizes = _scripted(target, partial_drafter, monkeypatch, batch6, every_step, pays=True)
    assert set(sizes) == {6} and int(kept.drafted.sum()) > int(gone.drafted.sum())


def test_sampled_calls_that_let_a_drafting_drafter_go_stay_reproducible(target, partial_drafter, batch6, monkeypatch):
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=True, temperature=0.7)
    policy = ScriptedPolicy(max_gamma=2, script=(2,) * 24, pays=False)  # drafts every step; rows leave at 3 left
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        runs.append(_run(target, partial_drafter, monkeypatch, input_ids, mask, policy=policy, **kwargs))
    (first, first_stats, sizes), (second, second_stats, _) = runs
    assert min(sizes) < 6 and first_stats.drafted.sum() > 0
    assert torch.equal(first, second) and torch.equal(first_stats.emitted, second_stats.emitted)


class _PlainThenTree(Schedule):
    """Plain steps and trees of its policy in turn, as the default may take them once a row is done."""

    def __init__(self, policy, batch_size, device):
        super().__init__(policy, batch_size, device)
        self.lengths, self._trees, self.tree = torch.zeros(batch_size, dtype=torch.long, device=device), self.tree, None

    def update(self, *args, **kwargs):
        self.tree = None if self.tree is not None else self._trees


@dataclasses.dataclass(frozen=True, kw_only=True)
class _PlainThenTreePolicy(TreeDraftPolicy):
    def start(self, batch_size, device, **call):
        return _PlainThenTree(self, batch_size, device)


def test_a_tree_after_a_plain_step_feeds_a_done_rows_root_again(target, partial_drafter, batch6, monkeypatch):
    """A plain step feeds every row its last token, a done row's too, and a tree must find each row's root uncached:
    with rows done the loop rolls those back before a tree step, so plain steps and trees may alternate."""
    input_ids, mask, eos = batch6
    kwargs = dict(max_new_tokens=24, eos_token_id=eos, do_sample=False)
    expected = target.generate(input_ids, attention_mask=mask, **kwargs)
    policy = _PlainThenTreePolicy(top_k=2, max_depth=2, max_nodes=4)
    out, stats, sizes = _run(target, partial_drafter, monkeypatch, input_ids, mask, policy=policy, **kwargs)
    assert torch.equal(out, expected)
    assert stats.tree_size_histogram.sum() > 0 and min(sizes) == 6  # trees ran, every row stayed
