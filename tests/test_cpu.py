"""pack_linears: oneDNN-packed Linear weights compute what the default kernels compute (to float32
rounding), speculative decoding stays exact on a packed target, and unpacking restores the model."""

import pytest
import torch
from torch import nn

import hf_specdec  # noqa: F401  (installs the drafter= keyword)
import tiny_models
from hf_specdec.cpu import PACKED, available, pack_linears, unpack_linears

pytestmark = pytest.mark.skipif(not available(), reason="this torch build has no oneDNN linear packing")


def test_packed_layers_compute_what_the_default_kernels_compute():
    model = tiny_models.llama(seed=0)
    ids = torch.randint(3, 90, (3, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(ids).logits
        assert pack_linears(model) == sum(type(m) is nn.Linear for m in model.modules())
        packed = model(ids).logits  # 27 rows per product: the packed path
        single = model(ids[:1, :1]).logits  # one row: the default kernel
    assert torch.allclose(packed, expected, atol=1e-4)
    assert torch.allclose(single, expected[:1, :1], atol=1e-5)
    assert unpack_linears(model) > 0 and not any(hasattr(m, PACKED) for m in model.modules())
    assert "forward" not in vars(model.lm_head)


def test_speculative_decoding_on_a_packed_target_equals_its_plain_generate(partial_drafter):
    target = tiny_models.llama(seed=0)
    pack_linears(target)
    input_ids, mask = tiny_models.prompts(3, seed=2)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=24)
    expected = target.generate(input_ids, **kwargs)
    assert torch.equal(target.generate(input_ids, drafter=partial_drafter, gamma=3, **kwargs), expected)
    unpack_linears(target)
    assert torch.equal(target.generate(input_ids, **kwargs), expected)  # same tokens on these seeds


def test_a_weight_changed_in_place_is_packed_again():
    layer = nn.Linear(16, 8)
    pack_linears(layer)
    x = torch.randn(4, 16)
    with torch.no_grad():
        layer.weight.mul_(2.0)
        assert torch.allclose(layer(x), x @ layer.weight.T + layer.bias, atol=1e-5)


def test_training_and_other_dtypes_keep_the_default_path():
    layer = nn.Linear(16, 8)
    pack_linears(layer)
    out = layer(torch.randn(4, 16))  # grad enabled: the default kernel, gradients flow
    out.sum().backward()
    assert layer.weight.grad is not None
    assert pack_linears(tiny_models.llama(seed=0).to(torch.bfloat16)) == 0


def test_describe_names_the_cpu_and_its_bf16_instructions(monkeypatch):
    import io

    from hf_specdec import cpu

    zen4 = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\nmodel name\t: other\n"
    monkeypatch.setattr(cpu, "open", lambda *args, **kwargs: io.StringIO(zen4), raising=False)
    assert cpu.describe() == "AMD EPYC 9R14 (avx512_bf16: yes, amx_bf16: no)"
    zen3 = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2\n"
    monkeypatch.setattr(cpu, "open", lambda *args, **kwargs: io.StringIO(zen3), raising=False)
    assert cpu.describe() == "AMD EPYC 7B13 (avx512_bf16: no, amx_bf16: no)"
    # A VM that names every AMD EPYC alike: its family and model tell Zen 4 (25, 17) from Zen 5 (26, 2).
    vm = "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\nflags\t\t: avx512_bf16\n"
    monkeypatch.setattr(cpu, "open", lambda *args, **kwargs: io.StringIO(vm), raising=False)
    assert cpu.describe() == "AMD EPYC, family 25 model 17 (avx512_bf16: yes, amx_bf16: no)"
