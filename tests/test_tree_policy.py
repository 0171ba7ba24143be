"""TreeDraftPolicy: a frozen, keyword-only, validated description, accepted as gamma=; with a drafter that
drafts no trees a generate() call with it is refused with UnsupportedTreeError before any forward pass."""

import dataclasses

import pytest
import torch

import hf_specdec
import tiny_models
from hf_specdec import compat
from hf_specdec.errors import InvalidGammaError, UnsupportedGenerationError, UnsupportedTreeError
from hf_specdec.policy import DraftPolicy, TreeDraftPolicy
from test_tree_loop import ChainOnly


def test_tree_policy_is_a_frozen_keyword_only_description_accepted_as_gamma():
    policy = TreeDraftPolicy(top_k=3, max_depth=5, max_nodes=12)
    assert (policy.top_k, policy.max_depth, policy.max_nodes, policy.max_gamma) == (3, 5, 12, 5)
    assert compat.check_gamma(policy) is policy and isinstance(policy, DraftPolicy)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.top_k = 2
    with pytest.raises(TypeError):
        TreeDraftPolicy(3, 5, 12)
    with pytest.raises(TypeError):  # the chain length follows max_depth; it is not a separate knob
        TreeDraftPolicy(max_gamma=3)
    assert TreeDraftPolicy(top_k=3, max_depth=5, max_nodes=12) == policy  # a value: equal settings, equal policies


@pytest.mark.parametrize("bad", [dict(top_k=0), dict(max_depth=0), dict(max_nodes=-1), dict(top_k=2.0),
                                 dict(max_depth=True), dict(max_nodes="8")])
def test_invalid_tree_settings_raise_invalid_gamma(bad):
    with pytest.raises(InvalidGammaError):
        TreeDraftPolicy(**bad)


def test_a_tree_policy_with_a_chain_only_drafter_is_refused_before_any_forward(target):
    calls = []
    hook = target.register_forward_hook(lambda *args: calls.append(1))
    config_before = target.generation_config.to_dict()
    input_ids, mask = tiny_models.prompts(2, seed=0)
    try:
        with pytest.raises(UnsupportedTreeError, match="drafts chains only") as raised:
            target.generate(input_ids, attention_mask=mask, drafter=ChainOnly(), max_new_tokens=5,
                            gamma=TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=6))
    finally:
        hook.remove()
    assert calls == [] and target.generation_config.to_dict() == config_before
    assert isinstance(raised.value, (UnsupportedGenerationError, NotImplementedError))
    assert "gamma=3" in str(raised.value)  # names the fix: the chain of the same depth
    # The shared objects still work for the next call.
    out = target.generate(input_ids, attention_mask=mask, drafter=ChainOnly(), max_new_tokens=5, gamma=3)
    assert torch.equal(out, target.generate(input_ids, attention_mask=mask, max_new_tokens=5, do_sample=False))


def test_a_tree_policy_schedules_its_tree_every_step():
    # The loop drafts a tree whenever the schedule holds one: a tree policy's never lets it go.
    schedule = TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=5).start(2, torch.device("cpu"))
    for _ in range(3):
        assert schedule.tree == TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=5)
        schedule.update(torch.tensor([True, True]), torch.tensor([3, 3]), torch.tensor([0, 3]))
    assert schedule.max_width == 6 and schedule.max_depth == 3


def test_tree_policy_is_exported():
    assert hf_specdec.TreeDraftPolicy is TreeDraftPolicy and hf_specdec.UnsupportedTreeError is UnsupportedTreeError
