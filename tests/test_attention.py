"""Packed grouped-query attention (hf_specdec.attention): the loop's few-token forwards attend on the key/value
heads as cached and compute what transformers' sdpa computes with the keys repeated; everything outside the loop,
and every case it does not pack, reaches transformers' own function; install/uninstall swap it."""

import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

import hf_specdec
import tiny_models
from hf_specdec import attention
from hf_specdec.attention import MAX_PACKED_TOKENS, attend_packed, packing_gqa


class _Grouped:  # what transformers' sdpa reads from an attention module
    def __init__(self, groups: int):
        self.num_key_value_groups, self.is_causal, self.training = groups, True, False


def _inputs(batch=3, heads=6, kv_heads=2, tokens=4, keys=11, dim=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, tokens, heads, dim, generator=gen).transpose(1, 2)  # as the models make it
    key, value = (torch.randn(batch, kv_heads, keys, dim, generator=gen) for _ in range(2))
    visible = torch.rand(batch, 1, tokens, keys, generator=gen) > 0.3
    visible[..., -1] = True  # every query sees one key
    return query, key, value, visible


@pytest.mark.parametrize("tokens", [1, 2, 5])
@pytest.mark.parametrize("additive", [False, True])
def test_packed_groups_attend_as_with_repeated_keys(tokens, additive):
    query, key, value, visible = _inputs(tokens=tokens)
    mask = torch.where(visible, 0.0, torch.finfo(torch.float32).min) if additive else visible
    groups = query.shape[1] // key.shape[1]
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, groups), repeat_kv(value, groups), attn_mask=mask, scale=0.3)
    assert torch.allclose(attend_packed(query, key, value, mask, 0.3), expected, atol=1e-6)
    # Negative control: a mask tiled the wrong way round (token-major) gives other rows other keys.
    if tokens > 1:
        wrong = mask.repeat_interleave(groups, dim=2)
        packed = query.reshape(query.shape[0], key.shape[1], groups * tokens, -1)
        off = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=wrong, scale=0.3)
        assert not torch.allclose(off.reshape(expected.shape), expected, atol=1e-3)


def test_values_narrower_than_keys_keep_their_width():
    query, key, _, mask = _inputs(tokens=3)
    value = torch.randn(*key.shape[:3], 5, generator=torch.Generator().manual_seed(1))
    expected = torch.nn.functional.scaled_dot_product_attention(query, repeat_kv(key, 3), repeat_kv(value, 3), attn_mask=mask)
    assert torch.allclose(attend_packed(query, key, value, mask), expected, atol=1e-6)


def test_the_registered_sdpa_packs_only_inside_the_loop(monkeypatch):
    assert AttentionInterface._global_mapping["sdpa"] is attention.sdpa_attention
    query, key, value, mask = _inputs(tokens=3)
    packed_calls = []
    monkeypatch.setattr(attention, "attend_packed", lambda *a: packed_calls.append(1) or attend_packed(*a))
    expected, _ = sdpa_attention_forward(_Grouped(3), query, key, value, mask, scaling=0.3)
    outside, _ = attention.sdpa_attention(_Grouped(3), query, key, value, mask, scaling=0.3)
    assert not packed_calls and torch.equal(outside, expected)
    with packing_gqa():
        inside, _ = attention.sdpa_attention(_Grouped(3), query, key, value, mask, scaling=0.3)
        assert len(packed_calls) == 1 and inside.shape == expected.shape  # [batch, tokens, heads, dim]
        assert torch.allclose(inside, expected, atol=1e-6)
        # Not packed: one token, wider than MAX_PACKED_TOKENS, no mask, per-head masks, dropout, no groups.
        wide = _inputs(tokens=MAX_PACKED_TOKENS + 1, keys=40)
        for module, args, kwargs in [
            (_Grouped(3), _inputs(tokens=1), {}),
            (_Grouped(3), wide, {}),
            (_Grouped(3), (query, key, value, None), {}),
            (_Grouped(3), (query, key, value, mask.expand(-1, 6, -1, -1)), {}),
            (_Grouped(3), (query, key, value, mask), {"dropout": 0.1}),
            (_Grouped(1), (query, repeat_kv(key, 3), repeat_kv(value, 3), mask), {}),
        ]:
            attention.sdpa_attention(module, *args, **kwargs)
    assert len(packed_calls) == 1


def test_speculative_decoding_packs_its_verification_forwards_and_stays_exact(monkeypatch, partial_drafter):
    target = tiny_models.llama(seed=0)  # 4 query heads over 2 key/value heads
    widths = []
    monkeypatch.setattr(attention, "attend_packed", lambda q, *a: widths.append(q.shape[2]) or attend_packed(q, *a))
    input_ids, mask = tiny_models.prompts(3, seed=4)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=20)
    expected = target.generate(input_ids, **kwargs)
    assert not widths  # plain generate() never packs
    out = target.generate(input_ids, drafter=partial_drafter, gamma=3, **kwargs)
    assert torch.equal(out, expected)
    assert 4 in widths  # gamma 3: the target scores 4 tokens a row (prefills of short prompts pack as well)


def test_uninstall_gives_transformers_its_sdpa_back():
    hf_specdec.uninstall()
    try:
        assert AttentionInterface._global_mapping["sdpa"] is sdpa_attention_forward
    finally:
        hf_specdec.install()
    assert AttentionInterface._global_mapping["sdpa"] is attention.sdpa_attention
