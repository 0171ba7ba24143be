"""int8 targets and drafters (optimum-quanto; bitsandbytes where it runs): greedy speculative decoding equals
the quantized target's own greedy output; load_drafter loads in one call and fails early and clearly."""

import logging

import pytest
import torch

import hf_specdec
import tiny_models
from hf_specdec import loading
from hf_specdec.loading import (
    CheckpointNotFoundError,
    QuantizationBackendError,
    UnknownQuantizationError,
    load_drafter,
    load_model,
)

PROMPT_IDS, PROMPT_MASK = tiny_models.prompts(batch=3, seed=4)
GREEDY = {"max_new_tokens": 16, "do_sample": False}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, target, partial_drafter):
    root = tmp_path_factory.mktemp("quant")
    target.save_pretrained(root / "target")
    partial_drafter.save_pretrained(root / "drafter")
    return root


def _bnb_runs_here() -> bool:
    try:
        import bitsandbytes as bnb

        device = "cuda" if torch.cuda.is_available() else "cpu"
        bnb.nn.Linear8bitLt(8, 8, has_fp16_weights=False).to(device)(torch.randn(2, 8, device=device))
        return True
    except Exception:  # any import or kernel failure means: not on this machine
        return False


BACKENDS = [
    pytest.param("int8", id="quanto"),
    pytest.param(
        "int8-bnb", id="bitsandbytes",
        marks=pytest.mark.skipif(not _bnb_runs_here(), reason="bitsandbytes int8 does not run on this machine"),
    ),
]


@pytest.mark.parametrize("quantization", BACKENDS)
def test_int8_target_and_drafter_greedy_equals_quantized_target(checkpoints, quantization, caplog):
    target = load_model(checkpoints / "target", quantization=quantization, role="target")
    drafter = load_drafter(checkpoints / "drafter", quantization=quantization)
    float_drafter = load_drafter(checkpoints / "drafter")
    assert type(target.model.layers[0].mlp.up_proj) is not torch.nn.Linear  # really quantized
    expected = target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, **GREEDY)
    with caplog.at_level(logging.WARNING):
        for name, draft in (("int8 drafter", drafter), ("float drafter", float_drafter)):
            stats = hf_specdec.SpeculativeStats()
            out = target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, drafter=draft, gamma=4, stats=stats, **GREEDY)
            assert torch.equal(out, expected), name
            assert stats.acceptance_rate > 0, name  # the drafter really drafted and was sometimes right
    assert not [record for record in caplog.records if "MatMul8bitLt" in record.getMessage()]


def test_int8_drafter_with_float_target(checkpoints, target):
    drafter = load_drafter(checkpoints / "drafter", quantization="int8")
    expected = target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, **GREEDY)
    out = target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, drafter=drafter, gamma=3, **GREEDY)
    assert torch.equal(out, expected)


def test_drafter_path_in_generate_is_loaded(checkpoints, target):
    expected = target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, **GREEDY)
    out = target.generate(PROMPT_IDS, attention_mask=PROMPT_MASK, drafter=str(checkpoints / "drafter"), **GREEDY)
    assert torch.equal(out, expected)


def test_load_drafter_dtype(checkpoints):
    assert load_drafter(checkpoints / "drafter", dtype=torch.bfloat16).dtype == torch.bfloat16
    assert not load_drafter(checkpoints / "drafter").training


def test_missing_drafter_path_fails_before_decoding(target, tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="save_pretrained") as info:
        target.generate(PROMPT_IDS, drafter=str(tmp_path / "no-such-drafter"), max_new_tokens=4)
    assert isinstance(info.value, FileNotFoundError)


def test_unknown_quantization_names_the_choices(checkpoints):
    with pytest.raises(UnknownQuantizationError, match="int8-bnb") as info:
        load_drafter(checkpoints / "drafter", quantization="int4")
    assert isinstance(info.value, ValueError)


def test_missing_backend_names_the_package(checkpoints, monkeypatch):
    real_find_spec = loading.importlib.util.find_spec
    monkeypatch.setattr(
        loading.importlib.util, "find_spec",
        lambda name, *args: None if name == "bitsandbytes" else real_find_spec(name, *args),
    )
    with pytest.raises(QuantizationBackendError, match="pip install bitsandbytes") as info:
        load_drafter(checkpoints / "drafter", quantization="int8-bnb")
    assert isinstance(info.value, ImportError)
