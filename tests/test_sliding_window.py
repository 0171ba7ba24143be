"""Sliding-window and chunked attention are exact past the window, alone and in padded batches.

Rows of a batch hold different numbers of tokens and rejected drafts leave holes, so a window counted
in cache slots is not the window in positions; hf_specdec keeps full cache layers and masks in position
space. Window 8, prompts of 3-10 tokens, 40 new tokens: every row decodes well past its window.
"""

import pytest
import torch

import hf_specdec
import tiny_models
from hf_specdec.cache import CachedModel
from joint_util import exact_joint, joint_chi_square, sample_continuations

WINDOW = 8
NEW_TOKENS = 40


@pytest.fixture(scope="module", params=tiny_models.WINDOWED)
def family(request):
    target = tiny_models.windowed(request.param, WINDOW)
    return request.param, target, tiny_models.perturbed(target, scale=0.3)


def greedy(model, input_ids, mask, **kwargs):
    return model.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS, **kwargs)


@pytest.mark.parametrize("batch", [1, 3])
def test_windowed_greedy_equals_target_past_the_window(family, batch):
    model_type, target, drafter = family
    input_ids, mask = tiny_models.prompts(batch, seed=5, min_len=3, max_len=10)
    stats = hf_specdec.SpeculativeStats()
    out = greedy(target, input_ids, mask, drafter=drafter, gamma=3, stats=stats)
    assert torch.equal(out, greedy(target, input_ids, mask))
    assert 0.0 < stats.acceptance_rate < 1.0  # rejections happened, so rows really had holes


def test_the_window_changes_what_these_models_generate(family):
    # Guards the test above: with the window opened up, plain generate() gives other tokens, so equality
    # there cannot come from a loop that ignores the window.
    model_type, target, _ = family
    unwindowed = tiny_models.windowed(model_type, window=1024)
    input_ids, mask = tiny_models.prompts(3, seed=5, min_len=3, max_len=10)
    assert not torch.equal(greedy(target, input_ids, mask), greedy(unwindowed, input_ids, mask))


N = 6000


def test_windowed_sampling_follows_the_target_distribution():
    """Chi-square on the exact joint of 3 sampled tokens after a 6-token prompt with a window of 4 (so the
    window cuts the prompt at every sampled token), N = 6000, seed 0, threshold the 0.999 quantile. The
    negative control: the same samples against the unwindowed model's joint must fail."""
    vocab, window = 10, 4
    target = tiny_models.windowed("mistral", window, vocab=vocab, hidden=32)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.15)  # every token keeps some mass
    target.generation_config.eos_token_id = None
    drafter = tiny_models.perturbed(target, scale=0.6, seed=1)
    prompt = torch.tensor([[1, 5, 7, 3, 5, 8]])
    samples, stats = sample_continuations(target, prompt, drafter, 2, num_samples=N, temperature=1.2, top_k=6)
    assert 0.05 < stats.acceptance_rate < 0.95
    statistic, threshold = joint_chi_square(samples, exact_joint(target, prompt, 3, 1.2, 6))
    assert statistic < threshold, (statistic, threshold)

    unwindowed = tiny_models.windowed("mistral", 1024, vocab=vocab, hidden=32)
    unwindowed.load_state_dict(target.state_dict())
    statistic, threshold = joint_chi_square(samples, exact_joint(unwindowed, prompt, 3, 1.2, 6))
    assert statistic > threshold, (statistic, threshold)


def test_a_fully_windowed_cache_stays_within_the_window():
    target = tiny_models.windowed("mistral", WINDOW)
    sequences = torch.randint(3, 90, (2, 80), generator=torch.Generator().manual_seed(0))
    pad = torch.tensor([0, 3])
    state = CachedModel(target, 2, torch.device("cpu"))
    lens = pad + 5
    state.forward(sequences, pad, lens, 1)
    for step in range(20):  # draft 3, keep 1-3 of them (+ the verified token), like the loop does
        state.forward(sequences, pad, lens + 3, 4, anchors=lens + 3)
        lens = lens + 1 + torch.tensor([step % 3, 2 - step % 3])
        state.rollback(torch.minimum(state.num_cached, lens - pad - 1), slack=4)
        assert state.valid.shape[1] <= WINDOW + 4
    logits, _ = state.forward(sequences, pad, lens, 1)
    with torch.no_grad():
        for row in range(2):
            fresh = target(sequences[row : row + 1, pad[row] : lens[row]]).logits[0, -1]
            assert torch.allclose(logits[row, 0], fresh, atol=1e-4), row


def test_windowed_model_without_4d_masks_is_refused_before_any_forward(partial_drafter):
    target = tiny_models.windowed("mistral", WINDOW)
    target.config._attn_implementation = "flash_attention_2"  # takes no 4D masks
    calls = []
    target.register_forward_pre_hook(lambda *args: calls.append(1))
    with pytest.raises(hf_specdec.UnsupportedModelError, match="attn_implementation='sdpa'"):
        target.generate(torch.tensor([[5, 6, 7]]), drafter=partial_drafter, max_new_tokens=4, do_sample=False)
    assert calls == []
