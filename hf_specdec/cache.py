"""Everything that touches a model's KV cache: ragged feeding, exact positions, masks, rollback, compaction.

Contract: `CachedModel` keeps one HF `DynamicCache` and, per [batch, width] cache column, whether it
holds a live token of the row and that token's position. Rows may hold different numbers of tokens;
positions count a row's real tokens only (no holes, no padding in RoPE); rollback invalidates
columns and compaction keeps the width within `max(live columns) + slack`. Models with sliding-window
or chunked layers keep full cache layers and get masks built in position space, so a window always
means the same tokens it means in plain generate(), whatever holes the columns have.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, get_layer_types_and_kwargs

from hf_specdec.attention import packing_gqa
from hf_specdec.compat import cache_argument, feeds_positions, forward_parameters
from hf_specdec.errors import UnsupportedModelError
from hf_specdec import seq2seq
from hf_specdec import tree as trees

#: Layer types whose attention a position-space mask can express (transformers' `layer_types` names).
MASKABLE = ("full_attention", "sliding_attention", "chunked_attention")
#: transformers' mask builders that apply a window; a windowed model's own code calls one of them.
WINDOW_MASK_BUILDERS = ("create_sliding_window_causal_mask", "create_chunked_causal_mask")
#: transformers' mask builders; a model that calls one passes a ready 4D mask (a draft tree's) through as is.
MASK_BUILDERS = ("create_causal_mask", "create_masks_for_generate", *WINDOW_MASK_BUILDERS)


@dataclass
class TargetFeatures:
    """The target's hidden states over the tokens one verification forward fed, for drafters that ask.

    Column j of row b holds the hidden states at the token at buffer index `index[b, j]`, the row's
    token number `positions[b, j]` (0 = its first real token), when `fed[b, j]`; other columns are
    junk. Only tokens that survive verification (`positions < num_valid`, see `DraftSession.observe`)
    have states a drafter may keep.
    """

    hidden: torch.Tensor  # [batch, width, num_layers * hidden] the requested layers, concatenated
    index: torch.Tensor  # [batch, width] long, buffer index of each column's token
    positions: torch.Tensor  # [batch, width] long, the token's position within its row
    fed: torch.Tensor  # [batch, width] bool, the column held one of the row's tokens


@dataclass
class TreeColumns:
    """What `CachedModel.forward_tree` fed, per chunk column, with the requested hidden states: a committed
    token (its buffer `index`, node -1) or a tree node (its node id, index -1)."""

    hidden: torch.Tensor  # [batch, chunk, num_layers * hidden]
    index: torch.Tensor  # [batch, chunk] long, buffer index of a committed token; -1 for nodes
    nodes: torch.Tensor  # [batch, chunk] long, node id; -1 for committed tokens
    positions: torch.Tensor  # [batch, chunk] long
    fed: torch.Tensor  # [batch, chunk] bool


@dataclass(frozen=True)
class AttentionLayout:
    """How a model's layers attend, read from its config the way transformers builds its cache.

    `windows[t]` is the window of layer type t: None for full attention, ("sliding", w) for a key at
    most w - 1 positions behind the query, ("chunked", c) for keys in the query's chunk of c positions.
    `by_type`: the model takes one mask per layer type (a dict), as generate() passes them to models
    whose config lists `layer_types`; otherwise one mask serves every layer.
    """

    windows: dict[str, tuple[str, int] | None]
    by_type: bool

    @property
    def windowed(self) -> bool:
        return any(window is not None for window in self.windows.values())

    @property
    def bounded(self) -> bool:
        """Every attention layer forgets old tokens, so columns behind every row's window can go."""
        return all(window is not None for window in self.windows.values())


def prefers_position_masks(model: PreTrainedModel, device: torch.device) -> bool:
    """Whether the loop should hand `model` 4D masks it builds itself rather than a 2D mask: in half precision on a
    CPU with eager or sdpa attention. For a 2D mask without padding transformers passes no mask, and SDPA's unmasked
    few-token path on a CPU measured 8 % (batch 1) to 19 % (batch 4) slower than with a mask in bf16 (docs/policies.md).
    Float32 and GPUs keep generate()'s own path, so fp32 outputs stay token-identical to generate()'s."""
    half = model.dtype in (torch.bfloat16, torch.float16)
    return half and device.type == "cpu" and model.config._attn_implementation in ("eager", "sdpa")


def check_starts_empty(model: PreTrainedModel, cache) -> None:
    """Refuses a cache given to generate() that already holds tokens (prefix caching: plain generate() feeds only the
    uncached ones, the loop starts from an empty cache), before any forward. `attention_layout` first: it refuses the
    layers whose caches (5.24+) have no sequence length."""
    attention_layout(model)
    if cache is not None and cache.get_seq_length() > 0:
        raise UnsupportedModelError("hf_specdec starts from an empty cache; pass none to generate().")


def attention_layout(model: PreTrainedModel) -> AttentionLayout:
    """The model's AttentionLayout; raises UnsupportedModelError for layers the loop cannot run exactly
    (recurrent / linear-attention state, which cannot be rolled back per row)."""
    config = model.config.get_text_config(decoder=True)
    layer_types, layer_kwargs = get_layer_types_and_kwargs(config)
    windows: dict[str, tuple[str, int] | None] = {}
    for layer_type, kwargs in zip(layer_types, layer_kwargs):
        if layer_type == "dummy":  # shares another layer's cache (or has no attention): nothing to mask
            continue
        if layer_type not in MASKABLE:
            raise UnsupportedModelError(
                f"{type(model).__name__} has {layer_type!r} layers, whose cache (recurrent or convolution state, "
                "or a sparse index) hf_specdec cannot roll back per row; decode it without drafter=."
            )
        window = None
        if layer_type != "full_attention":
            window = ("sliding" if layer_type == "sliding_attention" else "chunked", int(kwargs["sliding_window"]))
        if windows.setdefault(layer_type, window) != window:
            raise UnsupportedModelError(
                f"{type(model).__name__} gives its {layer_type} layers different windows; hf_specdec builds one "
                "mask per layer type. Decode it without drafter=."
            )
    layout = AttentionLayout(windows=windows, by_type=getattr(config, "layer_types", None) is not None)
    if layout.windowed and not _builds_window_masks(model):
        raise UnsupportedModelError(
            f"{type(model).__name__}'s cache keeps only a window of tokens, but its own masks have no window: it "
            "attends to everything in a multi-token forward and to the window one token at a time, so a "
            "verification forward cannot match its decoding; decode it without drafter=."
        )
    return layout


def _builds_window_masks(model: PreTrainedModel) -> bool:
    """Whether the code of the model (or of its base model) builds windowed masks with transformers' mask
    builders, so that a multi-token forward windows its attention the way its cache does."""
    return _builds_masks(model, WINDOW_MASK_BUILDERS)


def _builds_masks(model: PreTrainedModel, builders: tuple[str, ...]) -> bool:
    """Whether the code of the model (or of its base model) calls one of transformers' mask `builders`."""
    for cls in (type(model), type(model.base_model)):
        try:
            source = inspect.getsource(sys.modules[cls.__module__])
        except (OSError, TypeError, KeyError):
            return True  # no source to read (compiled, or defined interactively): trust the cache layout
        if any(builder in source for builder in builders):
            return True
    return False


def _new_cache(model: PreTrainedModel, layout: AttentionLayout) -> DynamicCache:
    """The cache plain generate() would build, with full layers instead of sliding ones: a sliding layer
    keeps its last window of *slots*, which after per-row holes is not the last window of positions."""
    cache = DynamicCache(config=model.config)
    if layout.windowed:
        cache.layers = [
            DynamicLayer() if isinstance(layer, DynamicSlidingWindowLayer) else layer for layer in cache.layers
        ]
    return cache


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
        position_masks: bool = False,
    ):
        self.model = model
        self.device = device  # where the loop's tensors live; the model may sit elsewhere
        self.model_device = model.device
        self._cache_kwarg = cache_argument(model)
        if self._cache_kwarg is None:
            raise UnsupportedModelError(f"{type(model).__name__}'s forward takes no cache, so its drafts cannot be rolled back.")
        self.layout = attention_layout(model)
        if self.layout.windowed and model.config._attn_implementation not in ("eager", "sdpa"):
            raise UnsupportedModelError(
                f"{type(model).__name__} has sliding-window or chunked layers, which hf_specdec masks with 4D masks; "
                f"attn_implementation={model.config._attn_implementation!r} takes none. Load the model with "
                "attn_implementation='sdpa' (or 'eager')."
            )
        # A decoder attending to an encoder output (an encoder-decoder model's): fed from the call's source; `cache` is
        # then its self-attention cache.
        self.feed = seq2seq.feed_for(model)
        self.cache = _new_cache(model, self.layout) if self.feed is None else self.feed.self_attention
        self._mask_dtype = model.dtype  # read once: PreTrainedModel.dtype walks the parameters
        # The two values of an additive mask, made once (each costs a tensor op; on a GPU torch.tensor(value) waits).
        self._seen = torch.zeros((), dtype=self._mask_dtype, device=self.model_device)
        self._hidden = torch.full((), torch.finfo(self._mask_dtype).min, dtype=self._mask_dtype, device=self.model_device)
        # 4D masks built here (in positions) instead of a 2D mask transformers turns into one: required for
        # windowed layers; for others a speed choice (`prefers_position_masks`), honoured only where
        # the attention takes 4D masks as given.
        self.position_masks = self.layout.windowed or (
            position_masks and model.config._attn_implementation in ("eager", "sdpa")
        )
        self._tree = None  # [batch, width] tree node held by each column (-1: committed) while a tree awaits keep_paths
        self._tree_start = 0  # the first column the pending tree's forwards fed
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=device)  # [batch, width] live columns
        self.positions = torch.zeros(batch_size, 0, dtype=torch.long, device=device)  # [batch, width]
        self.num_cached = torch.zeros(batch_size, dtype=torch.long, device=device)  # [batch] tokens fed and kept
        self._logits_to_keep = "logits_to_keep" in forward_parameters(model)
        # As plain generate() places the model's tokens (compat.feeds_positions): a wrapper that hides position_ids
        # from generate() makes a model with position embeddings place them itself. A drafter's positions
        # change only its drafts, never the output.
        self._positions = feeds_positions(model) or vocab_subset is not None
        if self.feed is not None:  # a decoder reading an encoder output: where its decoder takes them (DecoderFeed)
            self._positions = self.feed.feeds_positions or (self._positions and not self.feed.seq2seq)
        self.num_forwards = 0
        # A drafter running this model's first layers on this cache (`SharedPrefix`), whose columns the next forward
        # takes from layer k on; None for every other drafter.
        self.prefix: SharedPrefix | None = None
        # A reduced head (FR-Spec): logits only for `vocab_subset`, -inf elsewhere.
        self.vocab_subset = None
        if vocab_subset is not None:
            self.vocab_subset = vocab_subset.to(self.model_device)  # [subset]
            self.subset_weight = model.get_output_embeddings().weight[self.vocab_subset]  # [subset, hidden]
            self.vocab_width = model.get_output_embeddings().weight.shape[0]

    @torch.no_grad()
    def forward(
        self,
        sequences: torch.Tensor,  # [batch, length] token buffer, left-padded
        pad_lens: torch.Tensor,  # [batch] left padding of each row in `sequences`
        ends: torch.Tensor,  # [batch] feed each row up to (excluding) this index of `sequences`
        num_logits: int,
        anchors: torch.Tensor | None = None,  # [batch] >= ends; defaults to ends
        feature_layers: tuple[int, ...] = (),
        column_inputs: dict[str, torch.Tensor] | None = None,
        width: int | None = None,
    ) -> tuple[torch.Tensor, TargetFeatures | None]:
        """Feeds each row `sequences[b, pad_lens[b] + num_cached[b] : ends[b]]` and returns the logits at
        buffer indices `anchors[b] - num_logits ... anchors[b] - 1`, [batch, num_logits, vocab] float32
        on the loop's device (the logits at index i score the token at index i + 1), and, when
        `feature_layers` names some of the model's `output_hidden_states`, those states for every fed
        column (else None). `column_inputs` are further model inputs laid out like `sequences`
        ([batch, length, ...]), passed for the fed columns only (a feature head's per-token features).

        The chunk is aligned on `anchors`, so the returned positions line up across rows even when rows
        feed different numbers of tokens. Chunk columns outside a row's range (before its first uncached
        token, or from `ends[b]` on) are masked and become invalid cache columns; their logits are junk.
        The chunk is as wide as the most uncached tokens a row has before its anchor (at least `num_logits`);
        a caller that knows no row has more than `width` tells it, which saves a sync.
        """
        anchors = ends if anchors is None else anchors
        if self.prefix is not None and self.prefix.pending:
            if feature_layers or column_inputs:
                raise ValueError("a forward after a shared-prefix draft takes no feature_layers or column_inputs.")
            return self.prefix.verify(sequences, pad_lens, ends, num_logits, anchors), None
        self._no_pending_tree()
        start = pad_lens + self.num_cached  # [batch] first uncached index per row
        width = max(int((anchors - start).max()) if width is None else width, num_logits)
        if width == 1:  # one token per row (every plain step): fewer tensor ops
            index = (anchors - 1)[:, None]  # [batch, 1] buffer index of the chunk's column
        else:
            index = anchors[:, None] - width + torch.arange(width, device=self.device)  # [batch, width]
        chunk_valid = index >= start[:, None]  # [batch, width]
        if anchors is not ends:  # (with anchors at ends, every column is before its row's end)
            chunk_valid &= index < ends[:, None]
        chunk = sequences.gather(1, index.clamp_min(0))  # [batch, width]
        # Positions count real tokens only: the next one of row b is num_cached[b].
        fed = chunk_valid.long().cumsum(dim=1) if width > 1 else chunk_valid.long()  # [batch, width]
        positions = (self.num_cached[:, None] + fed - 1).clamp_min(0)  # [batch, width]

        self.valid = torch.cat([self.valid, chunk_valid], dim=1)  # [batch, width_total]
        self.positions = torch.cat([self.positions, positions], dim=1)
        self.num_cached = self.num_cached + chunk_valid.sum(dim=1)
        if self.position_masks:
            attention_mask = self._position_masks(chunk_valid, positions)
        else:
            attention_mask = self.valid.long().to(self.model_device)
        inputs = {
            "input_ids": chunk.to(self.model_device),
            "attention_mask": attention_mask,
            self._cache_kwarg: self.cache,
            "use_cache": True,
        }
        if self._positions:
            inputs["position_ids"] = positions.to(self.model_device)
        for name, values in (column_inputs or {}).items():
            gathered = values.gather(1, index.clamp_min(0).reshape(*index.shape, *[1] * (values.dim() - 2))
                                     .expand(-1, -1, *values.shape[2:]))
            inputs[name] = gathered.to(self.model_device)  # [batch, width, ...]
        if feature_layers:
            inputs["output_hidden_states"] = True
        logits, outputs = self._run(inputs, num_logits)
        features = None
        if feature_layers:
            hidden = torch.cat([outputs.hidden_states[layer] for layer in feature_layers], dim=-1)
            features = TargetFeatures(hidden=hidden.to(self.device), index=index, positions=positions, fed=chunk_valid)
        return logits, features

    def _run(self, inputs: dict, num_logits: int, model: PreTrainedModel | None = None):
        """One forward of the model (or of `model`, a view of it) on prepared inputs: (logits of the last
        `num_logits` chunk columns, [batch, n, vocab] float32 on the loop's device; the model's outputs)."""
        self.num_forwards += 1
        if self.feed is not None:
            inputs = self.feed.inputs(inputs)
        with packing_gqa():  # a few-token forward attends without copying grouped keys (hf_specdec.attention)
            if self.vocab_subset is not None:
                outputs = self.model.base_model(**inputs)
                hidden = outputs.last_hidden_state[:, -num_logits:]  # [batch, n, hidden]
                subset_logits = hidden @ self.subset_weight.T  # [batch, n, subset]
                logits = subset_logits.new_full((*subset_logits.shape[:2], self.vocab_width), float("-inf"))
                logits[..., self.vocab_subset] = subset_logits
            else:
                if self._logits_to_keep:
                    inputs["logits_to_keep"] = num_logits
                outputs = (self.model if model is None else model)(**inputs)
                logits = outputs.logits
                if logits.shape[1] != num_logits:
                    logits = logits[:, -num_logits:]
        return logits.to(device=self.device, dtype=torch.float32), outputs

    def _position_masks(self, chunk_valid: torch.Tensor, query_positions: torch.Tensor, visible: torch.Tensor | None = None):
        """Additive [batch, 1, chunk, width_total] masks in the model's dtype, one per layer type (a dict) or
        one for all layers: a query sees a key when the key is live, not after the query, and inside the
        query's window, all counted in token positions (transformers counts cache slots, which equal
        positions in plain generate(), where rows have no holes). `visible` [batch, chunk, width_total]
        replaces "live and not after the query" (a tree: see `hf_specdec.tree.visible_keys`)."""
        if visible is None and not self.layout.windowed:
            return self._causal_masks(chunk_valid, query_positions)
        keys, queries = self.positions[:, None, :], query_positions[:, :, None]  # [batch, 1, total], [batch, chunk, 1]
        causal = self.valid[:, None, :] & (keys <= queries) if visible is None else visible  # [batch, chunk, total]
        # A padding query sees only itself: a fully masked row would make a NaN that reaches the values.
        itself = None
        if not bool(chunk_valid.all()):
            itself = torch.zeros_like(causal)
            itself[:, :, -chunk_valid.shape[1] :] = torch.diag_embed(~chunk_valid)
        masks = {}
        for layer_type, window in self.layout.windows.items():
            visible = causal
            if window is not None and window[0] == "sliding":
                visible = causal & (keys > queries - window[1])
            elif window is not None:
                visible = causal & (keys // window[1] == queries // window[1])
            if itself is not None:
                visible = visible | itself
            masks[layer_type] = torch.where(visible.to(self.model_device)[:, None], self._seen, self._hidden)
        if self.layout.by_type:
            return masks
        (mask,) = masks.values()
        return mask

    def _causal_masks(self, chunk_valid: torch.Tensor, query_positions: torch.Tensor):
        """`_position_masks` of a chunk `forward` just appended, for layers without windows, in fewer tensor ops
        (this runs every step): every live column cached before the chunk holds a position below the row's
        `num_cached` before it, so it precedes every query of the chunk and only the chunk's own block
        compares positions. A padding query sees itself (and the live columns, as in `_position_masks`)."""
        chunk = chunk_valid.shape[1]
        before = self.valid[:, None, : self.valid.shape[1] - chunk]  # [batch, 1, total - chunk]
        if chunk == 1:  # a plain step: the one query sees the live columns and itself
            visible = torch.nn.functional.pad(before, (0, 1), value=True)  # [batch, 1, total]
        else:
            own = chunk_valid[:, None, :] & (query_positions[:, None, :] <= query_positions[:, :, None])
            own = own | torch.diag_embed(~chunk_valid)  # [batch, chunk, chunk]
            visible = torch.cat([before.expand(-1, chunk, -1), own], dim=-1)  # [batch, chunk, total]
        mask = torch.where(visible.to(self.model_device)[:, None], self._seen, self._hidden)  # [batch, 1, chunk, total]
        return {layer_type: mask for layer_type in self.layout.windows} if self.layout.by_type else mask

    def rollback(self, keep: torch.Tensor, slack: int) -> None:
        """Keeps the first `keep[b]` cached tokens of each row ([batch] long) and drops the rest.

        Dropped columns become masked; columns no row uses are cropped from the end (cheap), and the
        cache is compacted (a gather per layer) only once the width exceeds the longest row by `slack`.
        When every layer is windowed, tokens behind every future query's window are dropped too, so the
        cache stays within the window (plus slack) however long the rows grow.
        """
        self._no_pending_tree()
        if not self.layout.bounded and bool((keep >= self.num_cached).all()):
            # Nothing to drop (a plain step, a drafter that sat out, a tree whose path `keep_paths` kept); the
            # masked columns a tree's other nodes leave between live ones still count against the slack.
            if self.valid.shape[1] > int(self.num_cached.max()) + slack:
                self.compact()
            return
        self.valid &= self.positions < keep[:, None]
        self.num_cached = keep.clone()
        if self.layout.bounded:
            # Future queries sit at positions >= keep; a key at p is visible to q only if q - p < reach.
            reach = max(window[1] for window in self.layout.windows.values())
            self.valid &= self.positions > keep[:, None] - reach
        used = self.valid.any(dim=0).nonzero()
        width = int(used.max()) + 1 if used.numel() else 0
        if width < self.valid.shape[1]:
            self.cache.crop(width - self.valid.shape[1])
            self.valid = self.valid[:, :width]
            self.positions = self.positions[:, :width]
        if width > int(self.valid.sum(dim=1).max()) + slack:
            self.compact()

    def splice(self, rows: torch.Tensor, other: "CachedModel") -> None:
        """Gives `rows` ([n] long) of this cache the contents of `other`, a cache of the same model over n
        rows (row i of `other` becomes row rows[i]; those rows must hold no live columns). The columns
        arrive appended at the right end, masked for every other row: a prefill done on n rows joins a
        running batch without the batch computing it."""
        if bool(self.valid[rows].any()):
            raise ValueError("splice needs rows without live columns; roll them back to 0 first.")
        width, extra = self.valid.shape[1], other.valid.shape[1]
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            if getattr(theirs, "keys", None) is None:
                continue
            if not mine.is_initialized:
                mine.lazy_initialization(theirs.keys, theirs.values)
            for name in ("keys", "values"):
                source = getattr(theirs, name)  # [n, heads, extra, dim]
                target = getattr(mine, name)
                if target.numel() == 0:  # nothing cached yet: an empty [batch, heads, 0, dim]
                    target = source.new_zeros(self.valid.shape[0], source.shape[1], 0, source.shape[3])
                grown = torch.cat([target, target.new_zeros(*target.shape[:2], extra, target.shape[3])], dim=2)
                grown[rows.to(grown.device), :, width:] = source
                setattr(mine, name, grown)
        self.valid = torch.cat([self.valid, self.valid.new_zeros(self.valid.shape[0], extra)], dim=1)
        self.positions = torch.cat([self.positions, self.positions.new_zeros(self.positions.shape[0], extra)], dim=1)
        self.valid[rows, width:] = other.valid
        self.positions[rows, width:] = other.positions
        self.num_cached[rows] = other.num_cached

    @property
    def rows_selectable(self) -> bool:
        """Whether `select_rows` can drop rows: every cache layer is a plain `DynamicLayer` (keys and values are its
        only per-row state) and no tree awaits `keep_paths`."""
        return self._tree is None and all(type(layer) is DynamicLayer for layer in self.cache.layers)

    def select_rows(self, index: torch.Tensor) -> None:
        """Keeps the rows `index` ([n] long, in that order) and drops the others from the cache and every per-row
        state: a batch stops computing rows that are done. Needs `rows_selectable`."""
        if not self.rows_selectable:
            raise ValueError("select_rows needs a cache of DynamicLayers and no pending tree.")
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                value = getattr(layer, name, None)
                if isinstance(value, torch.Tensor) and value.dim() == 4:  # [batch, heads, width, dim]; None before use
                    setattr(layer, name, value.index_select(0, index.to(value.device)))
        self.valid = self.valid[index]
        self.positions = self.positions[index]
        self.num_cached = self.num_cached[index]
        if self.feed is not None:
            self.feed.select_rows(index)

    def compact(self) -> None:
        """Moves every row's live columns to the right end, in order, and drops the all-masked left
        columns, so the width becomes the largest number of live columns of a row."""
        keep_width = int(self.valid.sum(dim=1).max())
        # A stable sort puts each row's masked columns first and keeps the live ones in order.
        order = torch.sort(self.valid.to(torch.int8), dim=1, stable=True).indices[:, -keep_width:]
        self._take_columns(order, start=0)
        self.valid = self.valid.gather(1, order)
        self.positions = self.positions.gather(1, order)

    def _take_columns(self, order: torch.Tensor, start: int) -> None:
        """Every layer's keys and values keep their first `start` columns, then the columns `start + order[b]` of
        each row (`order` [batch, kept], in that order); the columns after those are cut. Each (row, head)'s
        columns are copied as rows of the tensor seen as [batch * heads * width, dim]: index_select measured 8-15x
        faster than a gather along the width (bf16 and fp32, Zen 5)."""
        kept = order.shape[1]
        flat_index = {}  # (heads, width, device) -> [batch * heads * kept] long
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None:  # a layer that stores nothing (shared KV)
                continue
            for name in ("keys", "values"):
                states = getattr(layer, name)  # [batch, heads, width, dim]
                batch, heads, width, dim = states.shape
                key = (heads, width, states.device)
                if key not in flat_index:
                    starts = torch.arange(batch * heads, device=states.device)[:, None] * (width - start)
                    flat_index[key] = (starts + order.to(states.device).repeat_interleave(heads, dim=0)).reshape(-1)
                moved = states[:, :, start:].reshape(-1, dim).index_select(0, flat_index[key]).view(batch, heads, kept, dim)
                if start:  # the tensor was made by the last update's cat, so it is ours to write into
                    states[:, :, start : start + kept] = moved
                    moved = states[:, :, : start + kept]
                setattr(layer, name, moved)

    # Draft trees (hf_specdec.tree): forwards over tree nodes, then keep each row's accepted path.

    def check_trees(self) -> None:
        """Raises UnsupportedModelError if this model cannot score a tree in one forward: its attention must
        take 4D masks (eager or sdpa attention, masks built by transformers' mask builders, which pass a 4D
        mask through) and it must take `position_ids` (an encoder-decoder model: `decoder_position_ids`; siblings
        share a position, so positions cannot come from the cache length)."""
        name = type(self.model).__name__
        if self.model.config._attn_implementation not in ("eager", "sdpa"):
            raise UnsupportedModelError(
                f"draft trees need 4D attention masks, which {name} with attn_implementation="
                f"{self.model.config._attn_implementation!r} takes none of; load it with attn_implementation='sdpa' "
                "(or 'eager'), or draft chains (gamma=an int)."
            )
        # The class's own position_ids (not a wrapper's); a decoder reading an encoder output: its feed's (DecoderFeed).
        if not (self.feed.feeds_positions if self.feed is not None else "position_ids" in forward_parameters(self.model)):
            what = "'s decoder takes no decoder_position_ids" if self.feed is not None and self.feed.seq2seq else (
                " takes no position_ids")
            raise UnsupportedModelError(
                f"{name}{what}; the nodes of a draft tree share positions, which it cannot be told. "
                "Draft chains with it (gamma=an int)."
            )
        if not self._positions:  # a tree's nodes need explicit positions, fed as generate() would feed them
            raise UnsupportedModelError(
                f"{name}'s forward is wrapped in a function whose signature hides position_ids from generate(), so plain "
                "decoding lets it place tokens itself (counting padding), which a tree's shared positions cannot "
                "match; wrap forward with functools.wraps, or draft chains (gamma=an int)."
            )
        if not _builds_masks(self.model, MASK_BUILDERS):
            raise UnsupportedModelError(
                f"{name} builds its attention masks itself, not with transformers' mask builders, so it cannot be "
                "given a draft tree's 4D mask. Draft chains with it (gamma=an int)."
            )

    @property
    def tree_pending(self) -> bool:
        """Tree nodes were fed and `keep_paths` has not resolved them yet."""
        return self._tree is not None

    @torch.no_grad()
    def forward_tree(
        self,
        sequences: torch.Tensor,  # [batch, length] token buffer, left-padded
        pad_lens: torch.Tensor,  # [batch] left padding of each row in `sequences`
        lens: torch.Tensor,  # [batch] row b's committed tokens end here; the last one is its tree's root
        tree: "trees.DraftTree",  # [batch, nodes]; the root's token is read from `sequences`
        feed: torch.Tensor | None = None,  # [batch, m] ids of drafted nodes to feed, -1 none; None: all
        feature_layers: tuple[int, ...] = (),
        column_inputs: dict[str, torch.Tensor] | None = None,  # [batch, length, ...] laid out like `sequences`
        node_inputs: dict[str, torch.Tensor] | None = None,  # [batch, nodes, ...] by node id
    ):
        """Feeds tree nodes, each at position `lens[b] - pad_lens[b] - 1 + depth`, attending to the row's live
        committed tokens, its ancestors and itself (`tree.visible_keys`; windows in position space, as for
        chains). The first forward of a tree first feeds each row's uncached committed tokens,
        `sequences[b, pad_lens[b] + num_cached[b] : lens[b]]` (at least the root); later forwards of the
        same tree (a drafter growing it level by level: `tree` then holds every node made so far, with the
        same ids) feed only `feed`, whose ancestors must have been fed before or in the same call.

        Returns logits [batch, 1 + m, vocab] float32 on a tree's first forward (the root's, then the fed
        nodes'), [batch, m, vocab] on later ones; junk where feed is -1. With `feed=None` (all drafted
        nodes) that is the logits at every node, in node order: what the target verifies.

        Fed nodes stay in the cache, provisional, until `keep_paths` keeps the accepted ones; `forward`
        and `rollback` refuse to run before it. Call `check_trees` once before the first.

        Further model inputs per fed column (a feature head's features): `column_inputs` for the committed
        tokens (as in `forward`), `node_inputs` for the nodes. With `feature_layers` (as in `forward`) the
        return value is (logits, TreeColumns) with those hidden states for every fed column.
        """
        self._no_pending_prefix()
        batch, num_nodes = tree.tokens.shape
        if feed is None:
            feed = torch.where(tree.valid[:, 1:], torch.arange(1, num_nodes, device=self.device), -1)
        feed_valid = feed >= 0  # [batch, m]
        feed_ids = feed.clamp_min(0)
        first = self._tree is None
        if first:
            start = pad_lens + self.num_cached  # [batch] first uncached index per row
            catch_up = lens - start  # [batch] committed tokens to feed, the root included
            if bool((catch_up < 1).any()):
                raise ValueError("forward_tree needs every row's root (its last committed token) uncached; roll back first.")
            # The committed tokens right-aligned on one root column, then the fed nodes.
            width = int(catch_up.max())
            index = lens[:, None] - width + torch.arange(width, device=self.device)  # [batch, width] buffer index
            fed = index >= start[:, None]  # [batch, width]
            committed_tokens = sequences.gather(1, index.clamp_min(0))
            committed_positions = (self.num_cached[:, None] + fed.long().cumsum(dim=1) - 1).clamp_min(0)
            self.num_cached = self.num_cached + fed.sum(dim=1)
            self._tree = torch.full_like(self.valid, -1, dtype=torch.long)  # [batch, width_total] node per column
            self._tree_start = self.valid.shape[1]  # the tree's columns (and this catch-up) start here
        else:
            fed = torch.zeros(batch, 0, dtype=torch.bool, device=self.device)
            index = committed_tokens = committed_positions = torch.zeros(batch, 0, dtype=torch.long, device=self.device)
        root_positions = lens - pad_lens - 1  # [batch] committed tokens before the root
        node_positions = root_positions[:, None] + tree.depths().gather(1, feed_ids)  # [batch, m]
        chunk_valid = torch.cat([fed, feed_valid], dim=1)  # [batch, chunk]
        chunk = torch.cat([committed_tokens, tree.tokens.gather(1, feed_ids).clamp_min(0)], dim=1)
        positions = torch.cat([committed_positions, torch.where(feed_valid, node_positions, root_positions[:, None])], dim=1)
        chunk_nodes = torch.cat([torch.full_like(committed_tokens, -1), torch.where(feed_valid, feed, -1)], dim=1)

        self.valid = torch.cat([self.valid, chunk_valid], dim=1)  # [batch, width_total]
        self.positions = torch.cat([self.positions, positions], dim=1)
        self._tree = torch.cat([self._tree, chunk_nodes], dim=1)
        visible = trees.visible_keys(self.valid, self.positions, self._tree, positions, chunk_nodes, tree.ancestors())
        inputs = {
            "input_ids": chunk.to(self.model_device),
            "attention_mask": self._position_masks(chunk_valid, positions, visible),
            "position_ids": positions.to(self.model_device),
            self._cache_kwarg: self.cache,
            "use_cache": True,
        }
        for name in set(column_inputs or {}) | set(node_inputs or {}):
            parts = []
            for values, where in (((column_inputs or {}).get(name), index), ((node_inputs or {}).get(name), feed_ids)):
                if where.shape[1]:
                    spread = where.clamp_min(0).reshape(*where.shape, *[1] * (values.dim() - 2)).expand(-1, -1, *values.shape[2:])
                    parts.append(values.gather(1, spread))
            inputs[name] = torch.cat(parts, dim=1).to(self.model_device)  # [batch, chunk, ...]
        if feature_layers:
            inputs["output_hidden_states"] = True
        logits, outputs = self._run(inputs, feed.shape[1] + first)  # (the root's column and) the fed nodes'
        if not feature_layers:
            return logits
        hidden = torch.cat([outputs.hidden_states[layer] for layer in feature_layers], dim=-1).to(self.device)
        return logits, TreeColumns(hidden=hidden, index=torch.cat([index, torch.full_like(feed, -1)], dim=1),
                                   nodes=chunk_nodes, positions=positions, fed=chunk_valid)

    def keep_paths(self, path: torch.Tensor, num_accepted: torch.Tensor) -> None:
        """Resolves the tree fed since the last `keep_paths`: the nodes on each row's accepted path (`path`
        [batch, k] node ids, -1 padded, as `verify_tree_*` return it; `num_accepted` [batch] of them)
        become committed tokens, every other fed node is dropped. Positions are explicit and masks are built
        in position space, so only the order of a row's live columns matters: the tree's columns are closed
        up (live ones first, in order) and the columns no row uses are cut, at the cost of a gather over the
        tree's columns only. A path node must have been fed."""
        nodes = self._tree  # [batch, width] node id per column, -1 committed
        num_ids = max(int(nodes.max()) if nodes.numel() else 0, int(path.max()) if path.numel() else 0, 0) + 1
        kept = torch.zeros(path.shape[0], num_ids, dtype=torch.bool, device=self.device)
        kept.scatter_(1, path.clamp_min(0), path >= 0)  # [batch, ids] by node id
        self.valid &= (nodes < 0) | kept.gather(1, nodes.clamp_min(0))
        self.num_cached = self.num_cached + num_accepted
        self._tree = None
        self._close_up(self._tree_start)

    def _close_up(self, start: int) -> None:
        """Moves each row's live columns from `start` on ahead of its masked ones, in order, and cuts the columns
        no row uses any more (a row that kept fewer keeps masked columns up to the longest; `rollback` compacts
        those once they pass its slack)."""
        tail = self.valid[:, start:]  # [batch, tail]
        if bool(tail.all()):
            return
        keep_width = int(tail.sum(dim=1).max())
        # A stable sort puts each row's live columns first and keeps them in order.
        order = torch.sort((~tail).to(torch.int8), dim=1, stable=True).indices[:, :keep_width]  # [batch, keep_width]
        self._take_columns(order, start)
        self.valid = torch.cat([self.valid[:, :start], tail.gather(1, order)], dim=1)
        self.positions = torch.cat([self.positions[:, :start], self.positions[:, start:].gather(1, order)], dim=1)

    def _no_pending_prefix(self) -> None:
        if self.prefix is not None and self.prefix.pending:
            raise RuntimeError("a drafter fed this cache's first layers: the next forward must be a chain's (forward()).")

    def _no_pending_tree(self) -> None:
        self._no_pending_prefix()
        if self._tree is not None:
            raise RuntimeError("a draft tree was fed and not resolved: call keep_paths() after forward_tree().")


# One cache for the target and a drafter running its first k decoder layers (`hf_specdec.EarlyExit`): the drafter
# writes those layers' keys and values into the target's own cache and keeps each column's state after layer k - 1;
# the verification forward runs layers 0..k-1 only for the columns the drafter did not feed.

#: What a decoder layer may be called with for `SharedPrefix` to run it on a chunk's last columns alone: each is
#: either laid out along the chunk in a known way (and sliced) or not a tensor.
LAYER_INPUTS = ("hidden_states", "attention_mask", "position_ids", "past_key_values", "layer_past", "use_cache",
                "output_attentions", "position_embeddings", "cache_position")


def prefix_refusal(model: PreTrainedModel, layers) -> str | None:
    """Why a drafter running `model`'s decoder `layers` (its first k) cannot share `model`'s cache with the
    verification (`SharedPrefix`), or None where it can; asked of the model's class and config, never of a list of
    names. It needs: 4D masks given as is (eager or sdpa attention, masks from transformers' builders, explicit
    position_ids), no encoder, and layers whose inputs `LAYER_INPUTS` names (hidden states first)."""
    implementation = model.config._attn_implementation
    if implementation not in ("eager", "sdpa"):
        return f"attn_implementation={implementation!r} takes no 4D masks"
    if seq2seq.feed_for(model) is not None:
        return "its decoder attends to an encoder"
    if "position_ids" not in forward_parameters(model) or not feeds_positions(model):
        return "it is not fed position_ids"
    if not _builds_masks(model, MASK_BUILDERS):
        return "it builds its attention masks itself, so it takes no ready 4D mask"
    for layer in layers:
        named = [name for name, parameter in forward_parameters(layer).items()
                 if parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        if not named or named[0] != "hidden_states" or set(named) - set(LAYER_INPUTS):
            return f"its decoder layers ({type(layer).__name__}) take inputs ({', '.join(named)}) not laid out as known"
    return None


class _SharedLayer(torch.nn.Module):
    """One of the target's decoder layers inside a view (the same module, so the same cache layer); attributes the
    decoder reads of its layers (`attention_type`) read through to it."""

    def __init__(self, layer: torch.nn.Module, prefix: "SharedPrefix"):
        super().__init__()
        self.layer = layer
        self.prefix = prefix

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["layer"], name)


class _Recorded(_SharedLayer):
    """The drafter's last layer (k - 1): keeps its output, the state the target's layer k reads."""

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        out = self.layer(hidden_states, *args, **kwargs)
        self.prefix.states.append(out if isinstance(out, torch.Tensor) else out[0])  # [batch, chunk, hidden]
        return out


class _FreshOnly(_SharedLayer):
    """Layer i < k in the verification: runs on the chunk's last `prefix.fresh` columns only (the tokens the drafter
    did not feed); layer k - 1 (`last`) puts the drafter's kept states back in front of them, the other layers pass
    the columns before through untouched (they are replaced there)."""

    def __init__(self, layer: torch.nn.Module, prefix: "SharedPrefix", last: bool):
        super().__init__(layer, prefix)
        self.last = last

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        fresh = self.prefix.fresh
        before = self.prefix.kept if self.last else hidden_states[:, : hidden_states.shape[1] - fresh]
        if not fresh:
            return before
        kwargs.update(zip(list(forward_parameters(self.layer))[1:], args))  # every input by name
        inputs = {name: _last_columns(name, value, hidden_states.shape[1], fresh) for name, value in kwargs.items()}
        out = self.layer(hidden_states[:, -fresh:], **inputs)
        merged = torch.cat([before, out if isinstance(out, torch.Tensor) else out[0]], dim=1)  # [batch, chunk, hidden]
        return merged if isinstance(out, torch.Tensor) else (merged, *out[1:])


#: Where each input of `LAYER_INPUTS` that is laid out along the chunk has its queries (a dimension from the end).
_QUERY_DIMS = {"attention_mask": -2, "position_ids": -1, "cache_position": -1, "position_embeddings": -2}


def _last_columns(name: str, value, chunk: int, fresh: int):
    """A decoder layer's input `name` cut to the chunk's last `fresh` of its `chunk` queries: masks [batch, 1, queries,
    keys] (one, or one per layer type), position ids [batch, queries], rotary embeddings [batch, queries, dim] (one,
    or a (cos, sin) pair). Anything else laid out along the chunk is an error, never a guess."""
    if isinstance(value, dict) and name == "attention_mask":
        return {kind: _last_columns(name, mask, chunk, fresh) for kind, mask in value.items()}
    if isinstance(value, (tuple, list)) and name == "position_embeddings":
        return tuple(_last_columns(name, part, chunk, fresh) for part in value)
    if not isinstance(value, torch.Tensor) or name in ("past_key_values", "layer_past"):
        return value
    dim = _QUERY_DIMS.get(name)
    if dim is None or value.dim() < -dim or value.shape[dim] != chunk:
        raise RuntimeError(f"a decoder layer was given {name!r} of shape {tuple(value.shape)}, not laid out along its "
                           f"{chunk} tokens as hf_specdec.cache.SharedPrefix expects.")
    return value.narrow(dim, chunk - fresh, fresh)


class SharedPrefix:
    """A drafter running `target`'s first k decoder layers on the target's own cache: one cache, not two.

    `drafter` is a CachedModel over a view of the first k layers (the last one recording its output), the target's
    final norm and head, whose cache is the target's: its forwards add columns to cache layers 0..k-1 only, after the
    target's columns, and keep each column's state after layer k - 1 (`states`). The target's next `forward` (the
    verification) then feeds those columns again as its chunk's first ones, at the same cache columns, through a view
    whose layers 0..k-1 run only on the chunk's last columns (the tokens the drafter did not feed: a chain's last
    draft) and whose layer k - 1 hands on the kept states; layers k.. run on the whole chunk. Every layer then holds
    the same columns again, so the target's rollback and compaction cover both. Build it with `share_prefix`.
    """

    def __init__(self, target: CachedModel, layers: list, num_layers: int, view, batch_size: int):
        self.target = target
        self.states: list[torch.Tensor] = []  # [batch, chunk, hidden] per drafter forward since the last verification
        self.fresh = 0  # the verification's columns that layers 0..k-1 run on
        self.kept: torch.Tensor | None = None  # [batch, pending, hidden] during the verification
        first = [*layers[: num_layers - 1], _Recorded(layers[num_layers - 1], self)]
        self.drafter = CachedModel(view(first), batch_size, target.device)
        self.drafter.cache = target.cache
        fresh_only = [_FreshOnly(layer, self, last=i == num_layers - 1) for i, layer in enumerate(layers[:num_layers])]
        self.verify_view = view([*fresh_only, *layers[num_layers:]])

    @property
    def pending(self) -> bool:
        """The drafter fed columns the target has not taken yet."""
        return bool(self.states)

    def begin(self) -> None:
        """Before a draft: the drafter's columns are the target's (after its rollback or compaction)."""
        target, drafter = self.target, self.drafter
        drafter.valid, drafter.positions, drafter.num_cached = target.valid, target.positions, target.num_cached
        self.states = []

    @torch.no_grad()
    def verify(self, sequences: torch.Tensor, pad_lens: torch.Tensor, ends: torch.Tensor, num_logits: int,
               anchors: torch.Tensor) -> torch.Tensor:
        """The target's `forward` after a draft: feeds the drafter's columns from layer k on and each row's tokens up
        to `ends` it did not feed through every layer; [batch, num_logits, vocab] logits at buffer indices
        `anchors - num_logits ... anchors - 1` as `CachedModel.forward` returns them (junk where a row fed none)."""
        target, drafter = self.target, self.drafter
        device = target.device
        width = target.valid.shape[1]
        start = pad_lens + drafter.num_cached  # [batch] first index the drafter did not feed
        fresh = max(int((ends - start).max()), 0)
        fresh_index = ends[:, None] - fresh + torch.arange(fresh, device=device)  # [batch, fresh]
        fresh_valid = fresh_index >= start[:, None]
        fresh_positions = (drafter.num_cached[:, None] + fresh_valid.long().cumsum(dim=1) - 1).clamp_min(0)
        chunk_valid = torch.cat([drafter.valid[:, width:], fresh_valid], dim=1)  # [batch, chunk]
        positions = torch.cat([drafter.positions[:, width:], fresh_positions], dim=1)
        index = (pad_lens[:, None] + positions).clamp(max=sequences.shape[1] - 1)  # [batch, chunk] buffer index
        target.valid = torch.cat([target.valid, chunk_valid], dim=1)
        target.positions = torch.cat([target.positions, positions], dim=1)
        target.num_cached = target.num_cached + chunk_valid.sum(dim=1)
        # Each wanted logit's chunk column; logits are computed from the first one any row wants.
        wanted = anchors[:, None] - num_logits + torch.arange(num_logits, device=device)  # [batch, num_logits]
        match = (index[:, None, :] == wanted[:, :, None]) & chunk_valid[:, None, :]  # [batch, num_logits, chunk]
        columns = torch.where(match.any(dim=2), match.long().argmax(dim=2), chunk_valid.shape[1] - 1)
        first = int(columns.min())
        inputs = {
            "input_ids": sequences.gather(1, index).to(target.model_device),
            "attention_mask": target._position_masks(chunk_valid, positions),
            "position_ids": positions.to(target.model_device),
            target._cache_kwarg: target.cache,
            "use_cache": True,
        }
        self.fresh, self.kept = fresh, torch.cat(self.states, dim=1).to(target.model_device)
        try:
            logits, _ = target._run(inputs, chunk_valid.shape[1] - first, model=self.verify_view)
        finally:
            self.states, self.kept, self.fresh = [], None, 0
        return logits.gather(1, (columns - first)[:, :, None].expand(-1, -1, logits.shape[2]))


def share_prefix(target: CachedModel, layers: list, num_layers: int, view) -> SharedPrefix | None:
    """A `SharedPrefix` of `target`'s first `num_layers` decoder `layers` (its whole list), registered with `target`,
    or None where the cache cannot be shared (`prefix_refusal`, an encoder, a reduced head, one already shared).
    `view(layers)` makes a model running `target.model` with that list of decoder layers (and the same norm, head,
    embeddings and rotary embeddings)."""
    if target.prefix is not None or target.feed is not None or target.vocab_subset is not None or not target._positions:
        return None
    if prefix_refusal(target.model, layers[:num_layers]) is not None:
        return None
    target.prefix = SharedPrefix(target, layers, num_layers, view, target.valid.shape[0])
    return target.prefix
