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
from hf_specdec.costs import StepCosts
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


class _Alternating(hf_specdec.DraftPolicy):
    """A chain of one draft, then a 2/2/3 tree, then a chain again, ...: the loop switches step kinds between steps,
    as the default may."""

    def start(self, batch_size, device, **call):
        from hf_specdec.policy import Schedule

        policy = self

        class Alternate(Schedule):
            def __init__(self):
                super().__init__(policy, batch_size, device)
                self.max_width, self.max_rank, self.max_depth = 4, 2, 2

            def update(self, active, num_drafted, num_accepted, outcomes=None, drafted=True, left=None, confidence=None):
                self.tree = None if self.tree is not None else hf_specdec.TreeDraftPolicy(top_k=2, max_depth=2,
                                                                                          max_nodes=3)

        return Alternate()


# The default with costs under which trees pay (width free) and under which short chains do.
WIDTH_FREE = hf_specdec.CostAwareDraftPolicy(costs=StepCosts(verify_ms={1: 20.0, 5: 20.2, 9: 20.4, 17: 20.6, 33: 21.0},
                                                             draft_ms=0.2))
WIDTH_DEAR = hf_specdec.CostAwareDraftPolicy(costs=StepCosts(verify_ms={1: 20.0, 2: 22.0, 3: 26.0, 5: 40.0},
                                                             draft_ms=1.0))


@pytest.mark.parametrize("policy", [_Alternating(max_gamma=2), WIDTH_FREE, WIDTH_DEAR],
                         ids=["chains-and-trees-alternating", "default-width-free", "default-width-dear"])
def test_joint_distribution_when_the_shape_changes_between_steps(pair, policy):
    target, drafter = pair
    kwargs = SETTINGS["top_k"]
    tokens, stats = sample_continuations(target, PROMPT, drafter, policy, num_samples=N, num_tokens=4, seed=3,
                                         **kwargs)
    assert int(stats.drafted.sum()) > N  # drafting steps happened after the prefill
    trees = stats.tree_size_histogram is not None and int(stats.tree_size_histogram[:, 1:].sum()) > 0
    assert trees == (policy is not WIDTH_DEAR)  # the alternating script and the width-free default drafted trees
    codes = (tokens[:, :NEW] * torch.tensor([VOCAB**2, VOCAB, 1])).sum(dim=1)
    assert fits(torch.bincount(codes, minlength=VOCAB**NEW), exact_joint(target, kwargs))


def _first_child_always(tokens, parents, target_probs, generator):
    """A wrong tree rule: the first child of the root is accepted whatever the target says."""
    verdict = verify.verify_tree_stochastic(tokens, parents, target_probs, generator)
    first = torch.where(parents[:, 1:2] == 0, 1, -1)  # [batch, 1] node 1 if it hangs off the root
    path = torch.cat([first, torch.full_like(verdict.path[:, 1:], -1)], dim=1)
    accepted = (first[:, 0] > 0).long()
    committed = verdict.committed.clone()
    committed[:, 0] = torch.where(accepted > 0, tokens[:, 1], committed[:, 0])
    committed[:, 1] = torch.where(accepted > 0, target_probs[:, 1].argmax(dim=-1), committed[:, 1])
    return verify.TreeVerdict(committed, accepted, path)


def test_negative_control_fails_when_the_default_runs_trees(pair, monkeypatch):
    target, drafter = pair
    kwargs = SETTINGS["top_k"]
    monkeypatch.setattr(steps, "verify_tree_stochastic", _first_child_always)
    tokens, _ = sample_continuations(target, PROMPT, drafter, WIDTH_FREE, num_samples=N, num_tokens=4, seed=3, **kwargs)
    codes = (tokens[:, :NEW] * torch.tensor([VOCAB**2, VOCAB, 1])).sum(dim=1)
    assert not fits(torch.bincount(codes, minlength=VOCAB**NEW), exact_joint(target, kwargs))
