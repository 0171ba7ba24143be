"""Everything that touches a model's KV cache: ragged feeding, exact positions, rollback, compaction.

Contract: `CachedModel` keeps one HF `DynamicCache` and a [batch, width] validity mask over its columns.
A row's cached tokens are its valid columns in order; rows may hold different numbers of tokens,
positions count valid tokens only (no holes, no padding in RoPE), rollback invalidates columns and
compaction keeps the width within `max(valid tokens) + slack`.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel

from hf_specdec.drafters.base import TargetFeatures
from hf_specdec.errors import UnsupportedModelError


def _accepts(model: PreTrainedModel, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


class CachedModel:
    """A causal LM plus its cache, fed from a shared token buffer.

    The loop keeps every row's tokens in one left-padded buffer `sequences` [batch, length] (row b's
    real tokens are `sequences[b, pad_lens[b]:lens[b]]`). `forward` feeds each row the tokens it has
    not cached yet, so the prefix is never fed twice and a row that fell behind catches up in the same
    call.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        batch_size: int,
        device: torch.device,
        cache: DynamicCache | None = None,
        vocab_subset: torch.Tensor | None = None,
    ):
        self.model = model
        self.device = device  # where the loop's tensors live; the model may sit elsewhere
        self.model_device = model.device
        self.cache = cache if cache is not None else DynamicCache(config=model.config)
        if self.cache.get_seq_length() > 0:
            raise UnsupportedModelError("hf_specdec starts from an empty cache; pass no past_key_values.")
        if any(getattr(layer, "is_sliding", False) for layer in self.cache.layers):
            raise UnsupportedModelError(
                f"{type(model).__name__} uses sliding-window cache layers, which hf_specdec cannot roll back "
                "per row yet; disable the sliding window in its config or decode without drafter=."
            )
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)  # [batch, width]
        self._logits_to_keep = _accepts(model, "logits_to_keep")
        self.num_forwards = 0
        # A reduced head (FR-Spec): logits only for `vocab_subset`, -inf elsewhere.
        self.vocab_subset = None
        if vocab_subset is not None:
            self.vocab_subset = vocab_subset.to(self.model_device)  # [subset]
            self.subset_weight = model.get_output_embeddings().weight[self.vocab_subset]  # [subset, hidden]
            self.vocab_width = model.get_output_embeddings().weight.shape[0]

    @property
    def num_cached(self) -> torch.Tensor:
        """[batch] number of real tokens each row has in the cache."""
        return self.valid.sum(dim=1)

    @torch.no_grad()
    def forward(
        self,
        sequences: torch.Tensor,  # [batch, length] token buffer, left-padded
        pad_lens: torch.Tensor,  # [batch] left padding of each row in `sequences`
        ends: torch.Tensor,  # [batch] feed each row up to (excluding) this index of `sequences`
        num_logits: int,
        anchors: torch.Tensor | None = None,  # [batch] >= ends; defaults to ends
        feature_layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, TargetFeatures | None]:
        """Feeds each row `sequences[b, pad_lens[b] + num_cached[b] : ends[b]]` and returns the logits at
        buffer indices `anchors[b] - num_logits ... anchors[b] - 1`, [batch, num_logits, vocab] float32
        on the loop's device (the logits at index i score the token at index i + 1), and, when
        `feature_layers` names some of the model's `output_hidden_states`, those states for every fed
        column (else None).

        The chunk is aligned on `anchors`, so the returned positions line up across rows even when rows
        feed different numbers of tokens. Chunk columns outside a row's range (before its first uncached
        token, or from `ends[b]` on) are masked and become invalid cache columns; their logits are junk.
        """
        anchors = ends if anchors is None else anchors
        start = pad_lens + self.num_cached  # [batch] first uncached index per row
        width = max(int((anchors - start).max()), num_logits)
        cols = torch.arange(width, device=self.device)  # [width]
        index = anchors[:, None] - width + cols  # [batch, width] buffer index of each chunk column
        chunk_valid = (index >= start[:, None]) & (index < ends[:, None])  # [batch, width]
        chunk = sequences.gather(1, index.clamp_min(0))  # [batch, width]
        # Positions count real tokens only: the next one of row b is num_cached[b].
        positions = self.num_cached[:, None] + chunk_valid.long().cumsum(dim=1) - 1  # [batch, width]

        self.valid = torch.cat([self.valid, chunk_valid], dim=1)  # [batch, width_total]
        inputs = {
            "input_ids": chunk.to(self.model_device),
            "attention_mask": self.valid.long().to(self.model_device),
            "position_ids": positions.clamp_min(0).to(self.model_device),
            "past_key_values": self.cache,
            "use_cache": True,
        }
        if feature_layers:
            inputs["output_hidden_states"] = True
        self.num_forwards += 1
        if self.vocab_subset is not None:
            outputs = self.model.base_model(**inputs)
            hidden = outputs.last_hidden_state[:, -num_logits:]  # [batch, n, hidden]
            subset_logits = hidden @ self.subset_weight.T  # [batch, n, subset]
            logits = subset_logits.new_full((*subset_logits.shape[:2], self.vocab_width), float("-inf"))
            logits[..., self.vocab_subset] = subset_logits
        else:
            if self._logits_to_keep:
                inputs["logits_to_keep"] = num_logits
            outputs = self.model(**inputs)
            logits = outputs.logits[:, -num_logits:]
        features = None
        if feature_layers:
            hidden = torch.cat([outputs.hidden_states[layer] for layer in feature_layers], dim=-1)
            features = TargetFeatures(hidden=hidden.to(self.device), index=index, fed=chunk_valid)
        return logits.to(device=self.device, dtype=torch.float32), features

    def rollback(self, keep: torch.Tensor, slack: int) -> None:
        """Keeps the first `keep[b]` cached tokens of each row ([batch] long) and drops the rest.

        Dropped columns become masked; columns no row uses are cropped from the end (cheap), and the
        cache is compacted (a gather per layer) only once the width exceeds the longest row by `slack`.
        """
        self.valid &= self.valid.long().cumsum(dim=1) <= keep[:, None]
        used = self.valid.any(dim=0).nonzero()
        width = int(used.max()) + 1 if used.numel() else 0
        if width < self.valid.shape[1]:
            self.cache.crop(width - self.valid.shape[1])
            self.valid = self.valid[:, :width]
        if width > int(self.num_cached.max()) + slack:
            self.compact()

    def compact(self) -> None:
        """Moves every row's valid columns to the right end, in order, and drops the all-masked left
        columns, so the width becomes the longest row's token count."""
        keep_width = int(self.num_cached.max())
        # A stable sort puts each row's masked columns first and keeps the valid ones in order.
        order = torch.sort(self.valid.to(torch.int8), dim=1, stable=True).indices[:, -keep_width:]
        for layer in self.cache.layers:
            index = order.to(layer.keys.device)[:, None, :, None]  # [batch, 1, keep_width, 1]
            layer.keys = layer.keys.gather(2, index.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3]))
            layer.values = layer.values.gather(
                2, index.expand(-1, layer.values.shape[1], -1, layer.values.shape[3])
            )
        self.valid = self.valid.gather(1, order)
