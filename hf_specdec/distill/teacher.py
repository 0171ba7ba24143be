"""Soft labels: the target's top-k logits at every response position of a corpus, computed once.

The result is cached next to the corpus (``<corpus>.teacher-k<k>.safetensors``) and extended, not
recomputed, when the corpus has grown since.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from .data import Record, length_batches, right_padded


def teacher_cache_path(corpus: str | Path, k: int) -> Path:
    corpus = Path(corpus)
    return corpus.with_name(f"{corpus.name}.teacher-k{k}.safetensors")


@torch.inference_mode()
def compute_topk(
    target,
    records: Sequence[Record],
    k: int = 32,
    *,
    batch_tokens: int = 4096,
    body_dtype: torch.dtype = torch.bfloat16,
    progress: bool = True,
) -> dict[str, torch.Tensor]:
    """Top-k next-token logits of the target at the response positions of ``records``.

    The transformer body runs in ``body_dtype`` (bf16 is ~3x faster on CPU than fp32); the LM head
    runs in fp32 so the ranking of close logits is not decided by bf16 rounding.

    Returns:
        ``topk_ids`` int32 [positions, k] and ``topk_logits`` float16 [positions, k], positions of
        all records concatenated in order, ``response_len`` of each record.
    """
    param = next(target.parameters())
    device, dtype = param.device, param.dtype
    body = target.get_decoder().to(body_dtype)
    head_weight = target.get_output_embeddings().weight.float()  # [vocab, hidden]
    out_ids: list[torch.Tensor | None] = [None] * len(records)
    out_logits: list[torch.Tensor | None] = [None] * len(records)
    bar = tqdm(total=len(records), desc="teacher top-k", unit="seq", disable=not progress)
    try:
        for group in length_batches(records, batch_tokens):
            batch = [records[i] for i in group]
            input_ids, attention_mask = right_padded(batch)  # [batch, width]
            hidden = body(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)
            ).last_hidden_state  # [batch, width, hidden]
            for row, (index, record) in enumerate(zip(group, batch)):
                positions = slice(record.prompt_len - 1, len(record.ids) - 1)
                logits = hidden[row, positions].float() @ head_weight.T  # [response_len, vocab]
                values, ids = logits.topk(k, dim=-1)
                out_ids[index] = ids.to(torch.int32).cpu()
                out_logits[index] = values.to(torch.float16).cpu()
            bar.update(len(batch))
    finally:
        target.get_decoder().to(dtype)
        bar.close()
    return {
        "topk_ids": torch.cat(out_ids) if records else torch.zeros(0, k, dtype=torch.int32),
        "topk_logits": torch.cat(out_logits) if records else torch.zeros(0, k, dtype=torch.float16),
        "response_len": torch.tensor([r.response_len for r in records], dtype=torch.int64),
    }


def load_or_compute_topk(
    target, records: Sequence[Record], corpus: str | Path, k: int = 32, progress: bool = True
) -> dict[str, torch.Tensor]:
    """``compute_topk`` with a cache next to ``corpus``; only records new since the cache run."""
    path = teacher_cache_path(corpus, k)
    cached = load_file(path) if path.exists() else None
    lengths = torch.tensor([r.response_len for r in records], dtype=torch.int64)
    done = 0
    if cached is not None:
        done = len(cached["response_len"])
        if done > len(records) or not torch.equal(cached["response_len"], lengths[:done]):
            cached, done = None, 0  # the corpus changed under the cache: start over
    if cached is not None and done == len(records):
        return cached
    fresh = compute_topk(target, records[done:], k, progress=progress)
    if cached is not None:
        fresh = {name: torch.cat([cached[name], fresh[name]]) for name in fresh}
    save_file(fresh, str(path))
    return fresh
