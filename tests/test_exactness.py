"""Greedy speculative decoding returns exactly the target's own greedy generate() output."""

import pytest
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

import hf_specdec
import tiny_models


def greedy(model, input_ids, attention_mask=None, **kwargs):
    kwargs.setdefault("max_new_tokens", 24)
    return model.generate(input_ids, attention_mask=attention_mask, do_sample=False, **kwargs)


def speculate(model, drafter, input_ids, attention_mask=None, gamma=4, **kwargs):
    stats = hf_specdec.SpeculativeStats()
    out = greedy(model, input_ids, attention_mask, drafter=drafter, gamma=gamma, stats=stats, **kwargs)
    return out, stats


@pytest.mark.parametrize("gamma", range(1, 9))
@pytest.mark.parametrize("kind", ["self", "unrelated", "partial"])
def test_greedy_equals_target_for_every_gamma(target, unrelated_drafter, partial_drafter, kind, gamma):
    drafter = {"self": target, "unrelated": unrelated_drafter, "partial": partial_drafter}[kind]
    input_ids, mask = tiny_models.prompts(1, seed=gamma, min_len=6)
    out, stats = speculate(target, drafter, input_ids, mask, gamma=gamma)
    assert torch.equal(out, greedy(target, input_ids, mask))
    # The three drafters really exercise all / none / partial acceptance.
    if kind == "self":
        assert stats.acceptance_rate == 1.0
    elif kind == "unrelated":
        assert stats.acceptance_rate < 0.15
    else:
        assert 0.0 < stats.acceptance_rate < 1.0


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_padded_batch_equals_target(arch):
    model = tiny_models.BUILDERS[arch](seed=0)
    drafter = tiny_models.perturbed(model, scale=0.1)
    input_ids, mask = tiny_models.prompts(5, seed=3)
    out, stats = speculate(model, drafter, input_ids, mask, gamma=3, max_new_tokens=30)
    assert torch.equal(out, greedy(model, input_ids, mask, max_new_tokens=30))
    # Rows really accepted different numbers of drafts in the same steps.
    assert len(set(stats.row_acceptance_rate.tolist())) > 1


def test_batch_row_equals_same_prompt_alone(target, partial_drafter):
    input_ids, mask = tiny_models.prompts(4, seed=5)
    batched, _ = speculate(target, partial_drafter, input_ids, mask, gamma=4)
    for row in range(4):
        real = mask[row].bool()
        alone, _ = speculate(target, partial_drafter, input_ids[row : row + 1, real], gamma=4)
        pad = int((~real).sum())
        assert torch.equal(batched[row, pad : pad + alone.shape[1]], alone[0])
        assert (batched[row, pad + alone.shape[1] :] == tiny_models.PAD).all()


def test_eos_inside_an_accepted_run_ends_the_row_there(target):
    input_ids, mask = tiny_models.prompts(3, seed=7)
    reference = greedy(target, input_ids, mask, max_new_tokens=20)
    # Make the token row 0 emits 5th its EOS: with drafter == target it sits inside an accepted run.
    eos = int(reference[0, input_ids.shape[1] + 4])
    expected = greedy(target, input_ids, mask, max_new_tokens=20, eos_token_id=eos)
    out, _ = speculate(target, target, input_ids, mask, gamma=8, max_new_tokens=20, eos_token_id=eos)
    assert torch.equal(out, expected)
    row0 = out[0, input_ids.shape[1] :]
    assert (row0 == eos).nonzero()[0].item() == 4 and (row0[5:] == tiny_models.PAD).all()


def test_eos_list_and_min_new_tokens(target, partial_drafter):
    input_ids, mask = tiny_models.prompts(3, seed=8)
    reference = greedy(target, input_ids, mask, max_new_tokens=20)
    eos = [int(reference[1, input_ids.shape[1] + 2]), int(reference[2, input_ids.shape[1] + 6])]
    kwargs = dict(max_new_tokens=20, eos_token_id=eos, min_new_tokens=4)
    out, _ = speculate(target, partial_drafter, input_ids, mask, gamma=5, **kwargs)
    assert torch.equal(out, greedy(target, input_ids, mask, **kwargs))


@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 9])
def test_max_new_tokens_is_never_exceeded(target, max_new_tokens):
    input_ids, mask = tiny_models.prompts(2, seed=9)
    out, stats = speculate(target, target, input_ids, mask, gamma=8, max_new_tokens=max_new_tokens)
    assert out.shape[1] == input_ids.shape[1] + max_new_tokens
    assert torch.equal(out, greedy(target, input_ids, mask, max_new_tokens=max_new_tokens))
    assert stats.emitted.tolist() == [max_new_tokens, max_new_tokens]


def test_max_length(target, partial_drafter):
    input_ids, mask = tiny_models.prompts(2, seed=10)
    out, _ = speculate(target, partial_drafter, input_ids, mask, gamma=4, max_new_tokens=None, max_length=19)
    assert torch.equal(out, greedy(target, input_ids, mask, max_new_tokens=None, max_length=19))


def test_repetition_penalty_greedy(target, partial_drafter):
    input_ids, mask = tiny_models.prompts(3, seed=11)
    out, _ = speculate(target, partial_drafter, input_ids, mask, gamma=4, repetition_penalty=1.5)
    assert torch.equal(out, greedy(target, input_ids, mask, repetition_penalty=1.5))
    assert not torch.equal(out, greedy(target, input_ids, mask))  # the penalty changed something


def test_encoder_repetition_penalty_keeps_each_rows_prompt(target, partial_drafter):
    # generate() builds the processor with every prompt's ids, one row each; rows of a ragged step go through it a
    # length at a time, so each group must see its own rows' prompts (it crashed on a row-count mismatch before).
    input_ids, mask = tiny_models.prompts(3, seed=11)
    out, stats = speculate(target, partial_drafter, input_ids, mask, gamma=4, encoder_repetition_penalty=3.0)
    assert torch.equal(out, greedy(target, input_ids, mask, encoder_repetition_penalty=3.0))
    assert not torch.equal(out, greedy(target, input_ids, mask))  # the penalty changed something
    assert len(set(stats.row_acceptance_rate.tolist())) > 1  # rows reached different lengths


def test_encoder_repetition_penalty_with_several_sequences_per_prompt(target, partial_drafter):
    # With num_return_sequences the processor holds one row per prompt and repeats it over that prompt's rows.
    # top_k=1 makes sampling deterministic, so the output can be compared token for token.
    input_ids, mask = tiny_models.prompts(2, seed=12)
    kwargs = dict(do_sample=True, top_k=1, num_return_sequences=2, max_new_tokens=20, encoder_repetition_penalty=3.0)
    out = target.generate(input_ids, attention_mask=mask, drafter=partial_drafter, gamma=3, **kwargs)
    assert torch.equal(out, target.generate(input_ids, attention_mask=mask, **kwargs))


class StopAfterToken(StoppingCriteria):
    """Stops a row once `token` appears among its last tokens (a user-defined criterion)."""

    def __init__(self, token: int):
        self.token = token

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == self.token


def test_stop_strings_and_user_stopping_criteria(target, partial_drafter, tokenizer):
    input_ids, mask = tiny_models.prompts(3, seed=12)
    reference = greedy(target, input_ids, mask, max_new_tokens=20)
    P = input_ids.shape[1]
    stop_word = tokenizer.convert_ids_to_tokens(int(reference[0, P + 3]))
    user_token = int(reference[1, P + 6])
    kwargs = dict(
        max_new_tokens=20, stop_strings=[stop_word], tokenizer=tokenizer,
        stopping_criteria=StoppingCriteriaList([StopAfterToken(user_token)]),
    )
    expected = greedy(target, input_ids, mask, **kwargs)
    out, _ = speculate(target, partial_drafter, input_ids, mask, gamma=6, **kwargs)
    assert torch.equal(out, expected)
    # The criteria really stopped rows early (rows 0 and 1 are padded after their stop).
    assert (expected[0, P + 4 :] == tiny_models.PAD).all() and (expected[1, P + 7 :] == tiny_models.PAD).all()


def test_other_processors_apply_to_both_models(target, partial_drafter):
    input_ids, mask = tiny_models.prompts(3, seed=13)
    plain = greedy(target, input_ids, mask)
    P = input_ids.shape[1]
    kwargs = dict(no_repeat_ngram_size=2, bad_words_ids=[[int(plain[0, P + 1])]], suppress_tokens=[int(plain[1, P])])
    out, _ = speculate(target, partial_drafter, input_ids, mask, gamma=4, **kwargs)
    assert torch.equal(out, greedy(target, input_ids, mask, **kwargs))
    assert not torch.equal(out, plain)


def test_examples_quickstart_runs():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "examples" / "quickstart_tiny.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "equal to plain greedy: True" in result.stdout


def test_token_lists_as_long_as_the_batch_are_not_mistaken_for_per_row_state(target, partial_drafter):
    # Two suppressed tokens at batch size 2: must apply to both rows, whatever row group is processed.
    input_ids, mask = tiny_models.prompts(2, seed=14)
    plain = greedy(target, input_ids, mask)
    P = input_ids.shape[1]
    kwargs = dict(suppress_tokens=[int(plain[0, P + 1]), int(plain[1, P + 2])], repetition_penalty=1.2)
    out, _ = speculate(target, partial_drafter, input_ids, mask, gamma=3, **kwargs)
    assert torch.equal(out, greedy(target, input_ids, mask, **kwargs))
