"""drafter="prompt_lookup": the n-gram matcher on hand-built sequences, then exactness end to end."""

import functools
import pytest
import torch

import hf_specdec
import tiny_models
from joint_util import exact_joint, joint_chi_square, sample_continuations
from hf_specdec import verify
from hf_specdec.drafters.base import DraftContext
from hf_specdec.drafters.prompt_lookup import PromptLookupDrafter, lookup_ngram


def seq(*tokens: int) -> torch.Tensor:
    return torch.tensor(tokens, dtype=torch.long)


# --- the matcher -------------------------------------------------------------------------------------


def test_most_recent_occurrence_wins():
    # "1 2" occurs at 0 (followed by 3) and at 3 (followed by 4); the later one is copied.
    assert lookup_ngram(seq(1, 2, 3, 1, 2, 4, 9, 1, 2), 2, 2).tolist() == [4, 9]


def test_longest_ngram_wins_over_a_more_recent_shorter_one():
    # The 3-gram "1 2 3" matches at 0; the 1-gram "3" would match more recently (position 5).
    assert lookup_ngram(seq(1, 2, 3, 7, 5, 3, 8, 1, 2, 3), 3, 3).tolist() == [7, 5, 3]


def test_falls_back_to_shorter_ngrams():
    # Neither "4 9 3" nor "9 3" occurred before; "3" did, at position 2.
    assert lookup_ngram(seq(1, 2, 3, 4, 9, 3), 3, 3).tolist() == [4, 9, 3]


def test_max_ngram_size_limits_the_match():
    # With max_ngram_size=1 only "3" is matched, and its most recent occurrence is at 5.
    assert lookup_ngram(seq(1, 2, 3, 7, 5, 3, 8, 1, 2, 3), 1, 2).tolist() == [8, 1]


def test_no_match_proposes_nothing():
    assert lookup_ngram(seq(1, 2, 3, 4), 3, 4).numel() == 0
    assert lookup_ngram(seq(5), 3, 4).numel() == 0
    assert lookup_ngram(seq(), 3, 4).numel() == 0


def test_last_ngram_never_matches_itself():
    assert lookup_ngram(seq(1, 2, 3, 1, 2, 3), 3, 2).tolist() == [1, 2]  # the match at 0, not at 3


def test_match_at_the_very_end_keeps_copying_its_own_output():
    # "5 6" last occurred right before the tail; the copy runs past the end and repeats the period.
    assert lookup_ngram(seq(4, 5, 6, 5, 6), 2, 5).tolist() == [5, 6, 5, 6, 5]
    assert lookup_ngram(seq(3, 9, 9), 3, 3).tolist() == [9, 9, 9]


def test_rows_of_a_batch_draft_independently():
    sequences = torch.tensor(
        [
            [0, 0, 1, 2, 3, 1, 2, -1, -1, -1],  # padded by 2; "1 2" -> 3 1 2
            [7, 8, 9, 6, 5, 4, -1, -1, -1, -1],  # no repetition: drafts nothing
            [0, 4, 4, 4, 4, 4, 4, -1, -1, -1],  # padded by 1; periodic: as many as it is allowed
            [1, 2, 1, 2, 1, 2, -1, -1, -1, -1],  # matches, but finished: drafts nothing
        ]
    )
    ctx = DraftContext(
        sequences=sequences,
        pad_lens=torch.tensor([2, 0, 1, 0]),
        lens=torch.tensor([7, 6, 7, 6]),
        active=torch.tensor([True, True, True, False]),
        vocab_size=16,
        do_sample=False,
        generator=None,
        process=None,
    )
    draft = PromptLookupDrafter(max_ngram_size=3).propose(ctx, torch.tensor([3, 3, 2, 3]))
    assert draft.num_drafted.tolist() == [3, 0, 2, 0]
    assert draft.probs is None  # deterministic: verified as one-hot proposals
    assert draft.tokens[0].tolist() == [3, 1, 2]
    assert draft.tokens[2, :2].tolist() == [4, 4]
    capped = PromptLookupDrafter(max_ngram_size=3, num_pred_tokens=1).propose(ctx, torch.tensor([3, 3, 2, 3]))
    assert capped.num_drafted.tolist() == [1, 0, 1, 0]


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="max_ngram_size"):
        PromptLookupDrafter(max_ngram_size=0)
    with pytest.raises(ValueError, match="num_pred_tokens"):
        PromptLookupDrafter(num_pred_tokens=0)


# --- exactness end to end ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repetitive_prompt(target):
    """The target's own greedy text from a short prompt: tiny random models fall into loops, so the
    prompt ends in a cycle (48 46 48 46 ... for seed 0) that prompt lookup can copy."""
    out = target.generate(torch.tensor([[5, 6, 7, 8]]), do_sample=False, max_new_tokens=36)
    return out[:, :40]


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_equals_plain_generate_batch_1(target, repetitive_prompt, gamma):
    stats = hf_specdec.SpeculativeStats()
    expected = target.generate(repetitive_prompt, do_sample=False, max_new_tokens=24)
    out = target.generate(
        repetitive_prompt, do_sample=False, max_new_tokens=24, drafter="prompt_lookup", gamma=gamma, stats=stats
    )
    assert torch.equal(out, expected)
    assert int(stats.accepted.sum()) > 0


def test_greedy_equals_plain_generate_left_padded_batch(target, repetitive_prompt):
    random_ids, random_mask = tiny_models.prompts(batch=4, seed=3, max_len=repetitive_prompt.shape[1])
    input_ids = torch.cat([repetitive_prompt, random_ids])
    attention_mask = torch.cat([torch.ones_like(repetitive_prompt), random_mask])
    input_ids[1, :10], attention_mask[1, :10] = tiny_models.PAD, 0  # a padded row that still loops
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, max_new_tokens=30)
    stats = hf_specdec.SpeculativeStats()
    out = target.generate(**kwargs, drafter=PromptLookupDrafter(max_ngram_size=2), gamma=4, stats=stats)
    assert torch.equal(out, target.generate(**kwargs))
    assert int(stats.accepted.sum()) > 0


def test_a_step_without_a_match_feeds_no_draft_columns(target, monkeypatch):
    # All-distinct tokens: no n-gram repeats, so prompt lookup drafts nothing for the first step, which
    # must feed the prompt alone (not the prompt plus masked draft columns).
    widths = []
    forward = type(target).forward

    @functools.wraps(forward)  # keeps the signature the compatibility checks read
    def spy(self, *args, **kwargs):
        widths.append(kwargs["input_ids"].shape[1])
        return forward(self, *args, **kwargs)

    prompt = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    monkeypatch.setattr(type(target), "forward", spy)
    target.generate(prompt, do_sample=False, max_new_tokens=4, drafter="prompt_lookup", gamma=10)
    assert widths[0] == prompt.shape[1]


# Three tokens after a looping prompt under temperature 0.7 / top-k 4: at most 64 outcomes. N = 3000
# rows in one batched call (rows are independent), one seed.
NUM_SAMPLES, TEMPERATURE, TOP_K = 3000, 0.7, 4


def _sample(target, prompt, drafter, seed=0):
    return sample_continuations(
        target, prompt, drafter, 4, num_samples=NUM_SAMPLES, temperature=TEMPERATURE, top_k=TOP_K, seed=seed
    )


def _accept_every_draft(draft_tokens, draft_probs, target_probs, generator=None, num_drafted=None):
    """A wrong verifier for the negative control: keeps every draft, then samples the bonus token."""
    num_accepted = num_drafted
    bonus = verify.sample(target_probs[torch.arange(draft_tokens.shape[0]), num_accepted], generator)
    return verify._commit(draft_tokens, num_accepted, bonus), num_accepted


def test_sampling_follows_the_target_joint_distribution(target, repetitive_prompt):
    joint = exact_joint(target, repetitive_prompt, 3, TEMPERATURE, TOP_K)
    samples, stats = _sample(target, repetitive_prompt, "prompt_lookup")
    assert int(stats.accepted.sum()) > 0.1 * NUM_SAMPLES  # drafts really were accepted
    statistic, threshold = joint_chi_square(samples, joint)
    assert statistic < threshold, (statistic, threshold)


def test_negative_control_accepting_every_draft_fails(target, repetitive_prompt, monkeypatch):
    monkeypatch.setattr("hf_specdec.steps.verify_stochastic", _accept_every_draft)
    joint = exact_joint(target, repetitive_prompt, 3, TEMPERATURE, TOP_K)
    samples, _ = _sample(target, repetitive_prompt, "prompt_lookup")
    statistic, threshold = joint_chi_square(samples, joint)
    assert statistic > threshold, (statistic, threshold)
