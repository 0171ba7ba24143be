"""The default policy's calibration is invisible to the asking call: its scratch generate() calls are valid
calls of their own, whatever lengths the asking call set; and it times loop steps again while a busy machine's timed
calls disagree."""

import warnings

import pytest
import torch

import hf_specdec  # noqa: F401  (installs the drafter= keyword)
import tiny_models
from hf_specdec import calibration


def test_a_calls_min_new_tokens_raise_no_length_warning_in_the_scratch_calls():
    # The asking call resolves min_new_tokens into min_length (prompt + min_new_tokens = 138 here); the scratch
    # calls run LOOP_CONTEXT + LOOP_STEPS + 1 = 135 tokens, so a copied min_length made generate() warn
    # "Unfeasible length constraints" during calibration, though the call itself is feasible.
    target, drafter = tiny_models.llama(seed=0), tiny_models.llama(seed=1, layers=1, hidden=32)  # fresh: calibrates
    prompt_len = calibration.LOOP_CONTEXT + 2
    new_tokens = calibration.LOOP_STEPS + 2
    assert prompt_len + new_tokens > calibration.LOOP_CONTEXT + calibration.LOOP_STEPS + 1
    input_ids = torch.randint(3, tiny_models.VOCAB, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), drafter=drafter,
                              max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    assert out.shape[1] == prompt_len + new_tokens
    assert [str(w.message) for w in caught if "length constraints" in str(w.message)] == []
    assert calibration.stored_costs(target, hf_specdec.ModelDrafter(drafter), 1, torch.device("cpu"),
                                    hf_specdec.CostAwareDraftPolicy().widths()).loop_ms  # the scratch calls ran


def test_two_calls_agree_when_their_steps_lie_within_the_agreement():
    agreement = calibration.LOOP_AGREEMENT
    assert calibration._rounds_agree({0: [60.0, 60.0 * (1 + agreement / 2)], 1: [70.0, 95.0, 70.5]})
    assert not calibration._rounds_agree({0: [60.0, 60.0 * (1 + 2 * agreement)], 1: [70.0, 70.0]})
    assert not calibration._rounds_agree({0: [60.0, 60.0], 1: [70.0]})  # one call is no agreement
    assert not calibration._rounds_agree({0: [], 1: [70.0, 70.0]})


def _fake_clock_rounds(step_ms, target, drafter):
    """Times the loop steps with a fake clock: a call of round r drafting k tokens takes step_ms(k, r) per step.
    Returns (the measured {k: ms}, rounds run)."""
    calls = []  # every scratch call's schedule, in order: round r's calls are 3r, 3r + 1, 3r + 2 (0, 1, 2 drafts)

    def fake_update(self, active, num_drafted, num_accepted):
        if not any(call is self for call in calls):
            calls.append(self)
        index = next(i for i, call in enumerate(calls) if call is self)
        self.times.append(len(self.times) * step_ms(index % 3, index // 3) / 1e3)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(calibration._ClockedSchedule, "update", fake_update)
        loop = calibration.measure_loop_steps(target, drafter, 1, torch.device("cpu"), do_sample=False)
    assert len(calls) % 3 == 0
    return loop, len(calls) // 3


def test_loop_steps_are_timed_again_until_two_calls_of_each_length_agree(target, partial_drafter):
    drafter = hf_specdec.ModelDrafter(partial_drafter)
    # A quiet machine: two rounds agree, nothing more is timed (the control).
    loop, rounds = _fake_clock_rounds(lambda k, r: 60.0 + 10 * k, target, drafter)
    assert rounds == calibration.LOOP_ROUNDS and loop == pytest.approx({0: 60.0, 1: 70.0, 2: 80.0})
    # A slow stretch hit the second round's plain call (its 90 ms would price a draft as cheap): a third round is
    # timed, its plain call agrees with the first, and the plain step is 60 ms.
    loop, rounds = _fake_clock_rounds(lambda k, r: 90.0 if (k, r) == (0, 1) else 60.0 + 10 * k, target, drafter)
    assert rounds == 3 and loop == pytest.approx({0: 60.0, 1: 70.0, 2: 80.0})
    # A slow stretch hit both first plain calls alike: agreeing with each other, they are still timed again, because
    # the 1-draft calls disagree; the third round's plain call is faster than both, and a fourth confirms it.
    loop, rounds = _fake_clock_rounds(
        lambda k, r: {(0, 0): 80.0, (0, 1): 80.0, (1, 1): 95.0}.get((k, r), 60.0 + 10 * k), target, drafter)
    assert rounds == 4 and loop == pytest.approx({0: 60.0, 1: 70.0, 2: 80.0})
    # Calls that never agree: LOOP_MAX_ROUNDS rounds and the fastest of them.
    loop, rounds = _fake_clock_rounds(lambda k, r: (60.0 + 10 * k) * 1.1 ** r, target, drafter)
    assert rounds == calibration.LOOP_MAX_ROUNDS and loop == pytest.approx({0: 60.0, 1: 70.0, 2: 80.0})
