"""The target's hidden states over a corpus, computed once and kept on disk for training feature heads.

Contract: `extract_features(target, records, directory, layers)` writes, for every record, the target's
`output_hidden_states[layer]` for each requested layer at every token position, float16, into
safetensors shards under `directory`; records are keyed by a hash of their token ids, so a run that
stopped resumes where it stopped and a grown corpus only adds its new records. `FeatureStore` reads
them back. Token ids stay the source of truth: features are cheap to recompute, ids are not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from .data import Record, length_batches, right_padded

MANIFEST = "manifest.json"


def record_key(record: Record) -> str:
    """A stable name for a record's features: the hash of its token ids."""
    return hashlib.sha1(json.dumps(record.ids).encode()).hexdigest()


def _manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


@torch.inference_mode()
def extract_features(
    target,
    records: Sequence[Record],
    directory: str | Path,
    layers: Sequence[int],
    *,
    batch_tokens: int = 2048,
    shard_tokens: int = 65536,
    progress: bool = True,
) -> Path:
    """Writes the target's hidden states `layers` (indices into `output_hidden_states`) for `records`
    that `directory` does not hold yet. Each record gets a float16 tensor [tokens, len(layers), hidden].

    Sequences are batched by length (`length_batches`, right-padded) up to `batch_tokens` tokens a forward,
    and flushed every `shard_tokens` tokens, so an interrupted run loses at most one shard.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = _manifest(directory)
    if manifest and manifest["layers"] != list(layers):
        raise ValueError(f"{directory} holds layers {manifest['layers']}, not {list(layers)}; use another directory.")
    manifest = {"layers": list(layers), "shards": manifest.get("shards", {})}
    done = {key for keys in manifest["shards"].values() for key in keys}
    todo = {}
    for record in records:
        key = record_key(record)
        if key not in done:
            todo.setdefault(key, record)
    keys = list(todo)
    device = next(target.parameters()).device
    pending: dict[str, torch.Tensor] = {}

    def flush() -> None:
        if not pending:
            return
        name = f"shard-{len(manifest['shards']):05d}.safetensors"
        save_file(pending, str(directory / name))
        manifest["shards"][name] = sorted(pending)
        (directory / MANIFEST).write_text(json.dumps(manifest))
        pending.clear()

    bar = tqdm(total=sum(len(record.ids) for record in todo.values()), desc="target features", unit="tok",
               disable=not progress)
    for group in length_batches([todo[key] for key in keys], batch_tokens):
        batch = [todo[keys[i]] for i in group]
        input_ids, attention_mask = right_padded(batch)  # [batch, width]
        hidden_states = target.model(
            input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), output_hidden_states=True
        ).hidden_states
        stacked = torch.stack([hidden_states[layer] for layer in layers], dim=2)  # [batch, width, layers, hidden]
        for row, (i, record) in enumerate(zip(group, batch)):
            pending[keys[i]] = stacked[row, : len(record.ids)].to(torch.float16).cpu().contiguous()
        bar.update(sum(len(record.ids) for record in batch))
        if sum(value.shape[0] for value in pending.values()) >= shard_tokens:
            flush()
    flush()
    bar.close()
    return directory


class FeatureStore:
    """Reads what `extract_features` wrote: `store[record]` is [tokens, layers, hidden] float16."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        manifest = _manifest(self.directory)
        self.layers: list[int] = manifest.get("layers", [])
        self.tensors: dict[str, torch.Tensor] = {}
        for name in manifest.get("shards", {}):
            self.tensors.update(load_file(str(self.directory / name)))

    def __contains__(self, record: Record) -> bool:
        return record_key(record) in self.tensors

    def __getitem__(self, record: Record) -> torch.Tensor:
        return self.tensors[record_key(record)]
