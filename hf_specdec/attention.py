"""Grouped-query attention over a few tokens without copying the cache: the loop's verification forwards.

Contract: `install()` registers in transformers' AttentionInterface an "sdpa" function that is transformers' own
unless the running thread is inside `packing_gqa()` (the loop's forwards, `CachedModel._run`). There, a forward
of 2 to `MAX_PACKED_TOKENS` tokens of a grouped-query model (each key/value head serves `num_key_value_groups`
query heads), with a mask shared by all heads, attends on the key/value heads as they are cached: the query
heads of each group become rows of one query [batch, kv_heads, groups * tokens, dim] and the mask is tiled to
match. That is what transformers does itself for one token (`pack_gqa`), extended to several: the same scores,
softmax and sums per query row, without `repeat_kv`, which copies every layer's keys and values `groups` times
per forward. Everything else (one token, prefill, dropout, position biases, per-head masks, paged caches,
other attention implementations) reaches transformers' function untouched. `uninstall()` restores it.

Why: SmolLM2-135M-Instruct (9 query heads over 3 key/value heads), 200 cached tokens, one thread on an AMD
EPYC Zen 5 (avx512_bf16 yes, amx_bf16 no): a 2-token forward costs 59.8 -> 47.8 ms at batch 8 in bf16,
123.8 -> 107.7 ms in fp32; 39.8 -> 36.1 ms at batch 4 in bf16, 2026-11-25.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch
from transformers import AttentionInterface

#: Widest forward packed: verification chains and trees. Past it (prefill) packing measured no faster.
MAX_PACKED_TOKENS = 32

_PACKING = contextvars.ContextVar("hf_specdec_packing_gqa", default=False)
_original_sdpa = None


@contextlib.contextmanager
def packing_gqa():
    """Within it, this thread's (or task's) sdpa attention packs grouped queries of few-token forwards."""
    token = _PACKING.set(True)
    try:
        yield
    finally:
        _PACKING.reset(token)


def _packs(module, query: torch.Tensor, key: torch.Tensor, attention_mask, dropout: float, kwargs: dict) -> bool:
    groups = getattr(module, "num_key_value_groups", 1)
    return (
        _PACKING.get()
        and isinstance(groups, int)
        and groups > 1
        and 1 < query.shape[2] <= MAX_PACKED_TOKENS
        and query.shape[1] == key.shape[1] * groups
        and attention_mask is not None
        and attention_mask.dim() == 4
        and attention_mask.shape[1] == 1  # one mask for every head
        and not dropout
        and kwargs.get("position_bias") is None
        and kwargs.get("cache") is None  # a paged cache updates itself inside transformers' function
        and not kwargs.get("softcap")
        and not kwargs.get("output_attentions")
    )


def attend_packed(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scale=None) -> torch.Tensor:
    """Scaled dot-product attention of query [batch, heads, tokens, dim] over key/value [batch, kv_heads, keys, dim]
    (heads = groups * kv_heads, head h reading key/value head h // groups) under a mask shared by the heads
    [batch or 1, 1, tokens, keys] (boolean or additive), on the key/value heads as they are: [batch, heads, tokens, value
    dim]."""
    batch, heads, tokens, dim = query.shape
    groups = heads // key.shape[1]
    # A group's query heads are consecutive: row m * tokens + t of group g is head g * groups + m at token t, and
    # sees mask row t.
    packed = query.reshape(batch, key.shape[1], groups * tokens, dim)
    if tokens > 1:
        mask = mask.repeat(1, 1, groups, 1)  # [batch or 1, 1, groups * tokens, keys]
    attended = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=mask, scale=scale)
    return attended.reshape(batch, heads, tokens, value.shape[-1])


def sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' sdpa attention (query [batch, heads, tokens, dim], key/value [batch, kv_heads, keys, dim];
    returns [batch, tokens, heads, dim] and no weights), with packed groups inside `packing_gqa()`."""
    if not _packs(module, query, key, attention_mask, dropout, kwargs):
        return _original_sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                              is_causal=is_causal, **kwargs)
    return attend_packed(query, key, value, attention_mask, scaling).transpose(1, 2).contiguous(), None


def install() -> None:
    """Registers `sdpa_attention` as transformers' "sdpa". Idempotent."""
    global _original_sdpa
    if _original_sdpa is not None:
        return
    _original_sdpa = AttentionInterface._global_mapping["sdpa"]
    AttentionInterface.register("sdpa", sdpa_attention)


def uninstall() -> None:
    """Gives transformers its own "sdpa" back."""
    global _original_sdpa
    if _original_sdpa is None:
        return
    AttentionInterface.register("sdpa", _original_sdpa)
    _original_sdpa = None
