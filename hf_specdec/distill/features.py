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
from safetensors import safe_open
from safetensors.torch import save_file
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
    The manifest records the dtype the target computed them in (`target`'s own: pass a bfloat16 copy for
    bfloat16 states); a store is only grown in its own dtype (one without the key holds float32 states).

    Sequences are batched by length (`length_batches`, right-padded) up to `batch_tokens` tokens a forward,
    and flushed every `shard_tokens` tokens, so an interrupted run loses at most one shard.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = _manifest(directory)
    if manifest and manifest["layers"] != list(layers):
        raise ValueError(f"{directory} holds layers {manifest['layers']}, not {list(layers)}; use another directory.")
    dtype = str(next(target.parameters()).dtype).removeprefix("torch.")
    stored_dtype = manifest.get("dtype", "float32") if manifest else dtype
    manifest = {"layers": list(layers), "dtype": stored_dtype, "shards": manifest.get("shards", {})}
    done = {key for keys in manifest["shards"].values() for key in keys}
    todo = {}
    for record in records:
        key = record_key(record)
        if key not in done:
            todo.setdefault(key, record)
    if todo and dtype != stored_dtype:
        raise ValueError(f"{directory} holds states computed in {stored_dtype}; adding {len(todo)} records computed in "
                         f"{dtype} would mix precisions in one store. Use the store's dtype, or another directory.")
    keys = list(todo)
    pending: dict[str, torch.Tensor] = {}

    def flush() -> None:
        if not pending:
            return
        name = f"shard-{len(manifest['shards']):05d}.safetensors"
        save_file(pending, str(directory / name))
        manifest["shards"][name] = sorted(pending)
        (directory / MANIFEST).write_text(json.dumps(manifest))
        pending.clear()

    for key, states in _hidden_states([todo[key] for key in keys], target, layers, batch_tokens, progress):
        pending[key] = states.to(torch.float16).contiguous()
        if sum(value.shape[0] for value in pending.values()) >= shard_tokens:
            flush()
    flush()
    return directory


def _hidden_states(records: Sequence[Record], target, layers: Sequence[int], batch_tokens: int, progress: bool):
    """Yields (record_key, [tokens, len(layers), hidden] in the target's dtype, on the CPU) per record."""
    device = next(target.parameters()).device
    bar = tqdm(total=sum(len(record.ids) for record in records), desc="target features", unit="tok",
               disable=not progress)
    for group in length_batches(records, batch_tokens):
        batch = [records[i] for i in group]
        input_ids, attention_mask = right_padded(batch)  # [batch, width]
        hidden_states = target.model(
            input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), output_hidden_states=True
        ).hidden_states
        stacked = torch.stack([hidden_states[layer] for layer in layers], dim=2)  # [batch, width, layers, hidden]
        for row, record in enumerate(batch):
            yield record_key(record), stacked[row, : len(record.ids)].cpu()
        bar.update(sum(len(record.ids) for record in batch))
    bar.close()


@torch.inference_mode()
def features_in_memory(target, records: Sequence[Record], layers: Sequence[int], *, batch_tokens: int = 2048,
                       progress: bool = False) -> "FeatureStore":
    """A FeatureStore of `records` held in memory at the target's own precision (no float16 rounding):
    for evaluations small enough to recompute, so a measurement never depends on a stale store."""
    store = FeatureStore(None)
    store.layers = list(layers)
    store.tensors = {key: states.clone() for key, states in _hidden_states(records, target, layers, batch_tokens, progress)}
    return store


class FeatureStore:
    """Reads what `extract_features` wrote: `store[record]` is [tokens, layers, hidden] float16.

    Shards are opened lazily and memory-mapped (safetensors' `safe_open`), and a record's tensor is read
    when asked for, so a store far larger than RAM trains (the page cache keeps what is hot). `tensors`
    holds records kept in memory instead (`features_in_memory`).
    """

    def __init__(self, directory: str | Path | None):
        self.directory = Path(directory) if directory is not None else None
        manifest = _manifest(self.directory) if directory is not None else {}
        self.layers: list[int] = manifest.get("layers", [])
        self.tensors: dict[str, torch.Tensor] = {}
        self._shard_of: dict[str, Path] = {
            key: self.directory / name for name, keys in manifest.get("shards", {}).items() for key in keys
        }
        self._open: dict[Path, object] = {}

    def add(self, other: "FeatureStore") -> None:
        """Serve `other`'s records too (another corpus's store over the same layers)."""
        if other.layers != self.layers:
            raise ValueError(f"feature stores over other layers ({other.layers} and {self.layers}) cannot be merged.")
        self.tensors.update(other.tensors)
        self._shard_of.update(other._shard_of)

    def __len__(self) -> int:
        return len(self.tensors.keys() | self._shard_of.keys())

    def __contains__(self, record: Record) -> bool:
        key = record_key(record)
        return key in self.tensors or key in self._shard_of

    def __getitem__(self, record: Record) -> torch.Tensor:
        key = record_key(record)
        if key in self.tensors:
            return self.tensors[key]
        shard = self._shard_of[key]
        if shard not in self._open:
            self._open[shard] = safe_open(str(shard), framework="pt")
        return self._open[shard].get_tensor(key)


class LiveFeatures:
    """Serves `store[record]` like a FeatureStore, computing the target's states for the record when asked
    (a forward of the target; float16 like a stored shard, so training sees the same precision). Nothing
    goes to disk: for corpora whose stored states would not fit it, at the price of a target forward per
    record each time it is read."""

    def __init__(self, target, layers: Sequence[int]):
        self.target, self.layers = target, list(layers)

    def __contains__(self, record: Record) -> bool:
        return True

    @torch.inference_mode()
    def __getitem__(self, record: Record) -> torch.Tensor:
        device = next(self.target.parameters()).device
        hidden_states = self.target.model(input_ids=torch.tensor([record.ids], device=device),
                                          output_hidden_states=True).hidden_states
        return torch.stack([hidden_states[layer][0] for layer in self.layers], dim=1).to(torch.float16).cpu()
