"""Targets split with accelerate (device maps, disk offload) and drafters on another device decode exactly
like the target in one piece. Only CPU here: maps put several groups on "cpu" (with hooks) or "disk"."""

import copy

import pytest
import torch
from accelerate import dispatch_model
from transformers import AutoModelForCausalLM

import hf_specdec
import tiny_models

PROMPT_IDS, PROMPT_MASK = tiny_models.prompts(batch=3, seed=2)
GREEDY = {"max_new_tokens": 14, "do_sample": False}


def _layer_map(**overrides) -> dict[str, str]:
    """A device map that gives every block of the 2-layer Llama its own group."""
    groups = ["model.embed_tokens", "model.rotary_emb", "model.layers.0", "model.layers.1", "model.norm", "lm_head"]
    return {**dict.fromkeys(groups, "cpu"), **overrides}


def _speculative(target, drafter, **kwargs):
    return target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, drafter=drafter, gamma=4, **kwargs)


def test_target_and_drafter_dispatched_in_groups(target, partial_drafter):
    expected = target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, **GREEDY)
    split_target = dispatch_model(copy.deepcopy(target), device_map=_layer_map(), force_hooks=True)
    split_drafter = dispatch_model(copy.deepcopy(partial_drafter), device_map=_layer_map(), force_hooks=True)
    assert hasattr(split_target.model.layers[1], "_hf_hook")  # accelerate really moves each group's inputs
    assert torch.equal(_speculative(split_target, partial_drafter, **GREEDY), expected)
    assert torch.equal(_speculative(target, split_drafter, **GREEDY), expected)
    assert torch.equal(_speculative(split_target, split_drafter, **GREEDY), expected)


def test_target_with_a_layer_offloaded_to_disk(target, partial_drafter, tmp_path):
    target.save_pretrained(tmp_path / "target")
    offloaded = AutoModelForCausalLM.from_pretrained(
        tmp_path / "target", device_map=_layer_map(**{"model.layers.1": "disk"}), offload_folder=tmp_path / "offload"
    )
    assert offloaded.model.layers[1].mlp.up_proj.weight.device.type == "meta"  # weights live on disk
    expected = target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, **GREEDY)
    assert torch.equal(_speculative(offloaded, partial_drafter, **GREEDY), expected)
    # Sampling with the same generator draws the same tokens as the unsplit target.
    sampling = {"max_new_tokens": 14, "do_sample": True, "top_k": 0}
    whole = _speculative(target, partial_drafter, generator=torch.Generator().manual_seed(3), **sampling)
    split = _speculative(offloaded, partial_drafter, generator=torch.Generator().manual_seed(3), **sampling)
    assert torch.equal(split, whole)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device next to the CPU")
@pytest.mark.parametrize("target_device, drafter_device", [("cuda", "cpu"), ("cpu", "cuda")])
def test_target_and_drafter_on_different_devices(target, partial_drafter, target_device, drafter_device):
    target = copy.deepcopy(target).to(target_device)
    drafter = copy.deepcopy(partial_drafter).to(drafter_device)
    ids, mask = PROMPT_IDS.to(target_device), PROMPT_MASK.to(target_device)
    expected = target.generate(ids, attention_mask=mask, **GREEDY)
    stats = hf_specdec.SpeculativeStats()
    out = target.generate(ids, attention_mask=mask, drafter=drafter, gamma=4, stats=stats, **GREEDY)
    assert out.device.type == target_device
    assert torch.equal(out, expected)
    assert stats.acceptance_rate > 0
