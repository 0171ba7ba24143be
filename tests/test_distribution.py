"""Sampling through generate(drafter=...) follows the target's processed distribution exactly.

The joint distribution of the first 3 generated tokens is enumerated exactly from the target (with
generate()'s own processors: temperature, top-k, top-p, min-p, repetition penalty) and compared with
N = 6000 speculative samples (one batched call, seed 0, explicit generator) by a chi-square test at the
0.999 quantile. Negative controls (accept every draft; sample p instead of the residual) must fail it.
"""

import itertools

import pytest
import torch

import hf_specdec  # noqa: F401  (installs the drafter= keyword)
import tiny_models
from hf_specdec import steps, verify
from joint_util import sample_continuations
from stats_util import fits

VOCAB = 10
N = 6000
NEW = 3
SETTINGS = {
    "temperature": dict(temperature=0.9),
    "top_k": dict(temperature=1.3, top_k=5),
    "top_p": dict(temperature=1.2, top_p=0.8),
    "min_p": dict(temperature=1.6, min_p=0.05),
    "repetition_penalty": dict(temperature=1.6, repetition_penalty=1.8),
}


def _model(seed, scale=None):
    model = tiny_models.llama(seed=0, vocab=VOCAB, hidden=32)
    with torch.no_grad():  # ~1/8 of the sharpening: every token keeps some mass
        model.lm_head.weight.mul_(0.15)
    model.generation_config.eos_token_id = None  # no stopping: always 3 tokens
    return model if scale is None else tiny_models.perturbed(model, scale=scale, seed=seed)


@pytest.fixture(scope="module")
def pair():
    return _model(0), _model(1, scale=0.6)


PROMPT = torch.tensor([[1, 5, 7, 3, 5]])


def _processors(model, kwargs):
    """The LogitsProcessorList generate() builds for these kwargs (captured, not rebuilt by hand)."""
    captured = {}

    def capture(model, input_ids, logits_processor, stopping_criteria, generation_config, **_):
        captured["processors"] = logits_processor
        return input_ids

    model.generate(PROMPT, do_sample=True, max_new_tokens=NEW, custom_generate=capture, **kwargs)
    return captured["processors"]


@torch.no_grad()
def exact_joint(model, kwargs) -> torch.Tensor:
    """[VOCAB ** 3] probability of each 3-token continuation under the target alone."""
    processors = _processors(model, kwargs)
    joint = torch.ones([VOCAB] * NEW, dtype=torch.float64)
    for depth in range(NEW):
        prefixes = list(itertools.product(range(VOCAB), repeat=depth))
        seqs = torch.cat([PROMPT.repeat(len(prefixes), 1), torch.tensor(prefixes, dtype=torch.long).view(len(prefixes), depth)], dim=1)
        logits = model(seqs).logits[:, -1].float()
        probs = processors(seqs, logits).softmax(dim=-1).double()  # [prefixes, VOCAB]
        shape = [VOCAB] * depth + [VOCAB] + [1] * (NEW - depth - 1)
        joint *= probs.view(shape)
    return joint.flatten()


def speculative_counts(target, drafter, kwargs, seed=0) -> torch.Tensor:
    tokens, stats = sample_continuations(target, PROMPT, drafter, 2, num_samples=N, num_tokens=NEW, seed=seed, **kwargs)
    # Both paths are exercised: many accepted drafts and hundreds of residual samples.
    rejected = int((stats.drafted - stats.accepted).sum())
    assert stats.acceptance_rate > 0.1 and rejected >= 200
    codes = (tokens * torch.tensor([VOCAB**2, VOCAB, 1])).sum(dim=1)
    return torch.bincount(codes, minlength=VOCAB**NEW)


@pytest.mark.parametrize("setting", SETTINGS)
def test_joint_distribution_of_first_three_tokens(pair, setting):
    target, drafter = pair
    kwargs = SETTINGS[setting]
    assert fits(speculative_counts(target, drafter, kwargs), exact_joint(target, kwargs))


def _accept_everything(drafts, draft_probs, target_probs, generator, num_drafted):
    return verify.verify_stochastic(drafts, target_probs[:, :-1], target_probs, generator, num_drafted)


def _p_as_residual(drafts, draft_probs, target_probs, generator, num_drafted):
    original = verify.residual_probs
    verify.residual_probs = lambda target, draft: target
    try:
        return verify.verify_stochastic(drafts, draft_probs, target_probs, generator, num_drafted)
    finally:
        verify.residual_probs = original


@pytest.mark.parametrize("wrong", [_accept_everything, _p_as_residual])
def test_negative_controls_fail(pair, monkeypatch, wrong):
    target, drafter = pair
    kwargs = SETTINGS["top_k"]
    monkeypatch.setattr(steps, "verify_stochastic", wrong)
    assert not fits(speculative_counts(target, drafter, kwargs), exact_joint(target, kwargs))
