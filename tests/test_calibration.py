"""The default policy's calibration is invisible to the asking call: its scratch generate() calls are valid
calls of their own, whatever lengths the asking call set."""

import warnings

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
