"""A feature drafter (EAGLE): a one-layer head that reads the target's own hidden states.

Contract: `FeatureHead` holds the head's weights and config (a description: shared by calls and
threads, never changed by one); `FeatureDrafter` asks the loop for the target's hidden states and
gives each call a `FeatureDraftSession` with its own cache and feature buffer. The head's entry at
position p pairs the target's state at p with the token at p + 1 and predicts the state at p + 1;
the LM head turns that into the token at p + 2, and the predicted state is fed back to draft on.

Two layouts, as SafeAILab/EAGLE publishes them and vLLM / SGLang load them (see `hf_specdec.eagle`):
  eagle1: `fc(cat(embed(x), f))` -> a decoder layer without input norm -> the target's LM head;
          f = the target's last, normalized hidden state.
  eagle3: g = `fc(cat(h_low, h_mid, h_high))` (three layers of the target's residual stream), then a
          decoder layer over `cat(input_layernorm(embed(x)), hidden_norm(g))` with residual g, a final
          `norm` and its own LM head over a draft vocabulary (`d2t`: draft id d is target id d + d2t[d]).
Tokens outside a draft vocabulary get probability 0, so verification stays exact.
"""

from __future__ import annotations

import copy
import threading

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LlamaConfig
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from hf_specdec.attention import MAX_PACKED_TOKENS, attend_packed
from hf_specdec.cache import CachedModel
from hf_specdec.cpu import computes_bf16
from hf_specdec.drafters.base import Draft, DraftContext, Drafter, TargetFeatures, declared_acceptance
from hf_specdec.drafters.model import ModelDraftSession
from hf_specdec.tree import DraftTree, build_tree
from hf_specdec.errors import IncompatibleDrafterError

KINDS = ("eagle1", "eagle3")


def default_feature_layers(kind: str, num_layers: int) -> tuple[int, ...]:
    """The target hidden states a head reads, as `output_hidden_states` indices: EAGLE-1 the last
    (normalized) one; EAGLE-3 the residual stream entering layers 2, N // 2 and N - 3, as SafeAILab/EAGLE,
    vLLM and SGLang capture it by default."""
    if kind == "eagle1":
        return (num_layers,)
    return (2, num_layers // 2, num_layers - 3)


class FeatureHead(nn.Module):
    """The head's weights. `config` is a LlamaConfig of one layer (hidden_size = the target's) plus:
    `hf_specdec_kind` ("eagle1" / "eagle3"), `draft_vocab_size` (eagle3), `target_hidden_size` (eagle3,
    when it differs) and, optionally, `hf_specdec_feature_layers` (the target's hidden-state indices it
    reads; without it, `default_feature_layers` of the target it serves).

    Buffers: `d2t` [draft_vocab] (eagle3): draft id d is target id d + d2t[d].
    """

    def __init__(self, config: LlamaConfig, fc_bias: bool = False):
        super().__init__()
        kind = getattr(config, "hf_specdec_kind", "eagle3")
        if kind not in KINDS:
            raise ValueError(f"unknown feature head kind {kind!r}; one of {KINDS}.")
        self.config, self.kind = config, kind
        hidden = config.hidden_size
        target_hidden = getattr(config, "target_hidden_size", None) or hidden
        num_features = len(self.explicit_feature_layers or ()) or (1 if kind == "eagle1" else 3)
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // heads
        attention_in = hidden if kind == "eagle1" else 2 * hidden
        if kind == "eagle1":
            self.fc = nn.Linear(2 * hidden, hidden, bias=fc_bias)
        else:
            self.fc = nn.Linear(num_features * target_hidden, hidden, bias=fc_bias)
            self.input_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
            self.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
            self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
            self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
            self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.q_proj = nn.Linear(attention_in, heads * self.head_dim, bias=config.attention_bias)
        self.k_proj = nn.Linear(attention_in, kv_heads * self.head_dim, bias=config.attention_bias)
        self.v_proj = nn.Linear(attention_in, kv_heads * self.head_dim, bias=config.attention_bias)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=config.attention_bias)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    @property
    def explicit_feature_layers(self) -> tuple[int, ...] | None:
        layers = getattr(self.config, "hf_specdec_feature_layers", None)
        return None if layers is None else tuple(int(layer) for layer in layers)

    def feature_layers_for(self, num_target_layers: int) -> tuple[int, ...]:
        """The `output_hidden_states` indices this head reads from a target of `num_target_layers` layers."""
        return self.explicit_feature_layers or default_feature_layers(self.kind, num_target_layers)

    def draft_ids(self) -> torch.Tensor | None:
        """[draft_vocab] the target ids the head scores (eagle3), None for the target's whole vocabulary."""
        if self.kind == "eagle1":
            return None
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t

    def input_features(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """[..., hidden] what one entry reads, from the target's requested states concatenated
        ([..., num_features * target_hidden]): eagle3 fuses them with fc, eagle1 reads them as they are."""
        return target_hidden if self.kind == "eagle1" else self.fc(target_hidden)

    def layer_input(self, embeds: torch.Tensor, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(attention input, residual) of the decoder layer, from token embeddings and input features
        (both [batch, seq, hidden])."""
        if self.kind == "eagle1":
            fused = self.fc(torch.cat([embeds, features], dim=-1))
            return fused, fused  # EAGLE-1's layer has no input norm
        return torch.cat([self.input_layernorm(embeds), self.hidden_norm(features)], dim=-1), features

    def qkv(self, attention_input: torch.Tensor, position_ids: torch.Tensor):
        """Rotated queries, keys and values, each [batch, heads, seq, head_dim]."""
        batch, seq, _ = attention_input.shape
        shape = (batch, seq, -1, self.head_dim)
        query = self.q_proj(attention_input).view(shape).transpose(1, 2)
        key = self.k_proj(attention_input).view(shape).transpose(1, 2)
        value = self.v_proj(attention_input).view(shape).transpose(1, 2)
        cos, sin = self.rotary_emb(value, position_ids)
        query, key = apply_rotary_pos_emb(query, key, cos, sin)
        return query, key, value

    def layer_output(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The layer's output state [batch, seq, hidden], from attention outputs [batch, heads, seq, dim]."""
        batch, _, seq, _ = attended.shape
        hidden = residual + self.o_proj(attended.transpose(1, 2).reshape(batch, seq, -1))
        return hidden + self.mlp(self.post_attention_layernorm(hidden))

    def forward_sequence(self, embeds: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Teacher-forced pass over whole sequences without a cache: entry p reads `embeds[:, p]` (token
        p + 1) and `features[:, p]` (the state at p), causally; returns the states [batch, seq, hidden]."""
        attention_input, residual = self.layer_input(embeds, features)
        query, key, value = self.qkv(attention_input, position_ids)
        attended = F.scaled_dot_product_attention(
            query, key, value, is_causal=True, enable_gqa=key.shape[1] != query.shape[1]
        )
        return self.layer_output(attended, residual)

    def scores(self, hidden: torch.Tensor, target_head: nn.Module | None = None) -> torch.Tensor:
        """Logits over the head's vocabulary: eagle3 its draft vocabulary, eagle1 the target's LM head."""
        if self.kind == "eagle1":
            return target_head(hidden)
        return self.lm_head(self.norm(hidden))


class BoundHead(nn.Module):
    """A FeatureHead bound to one target's embeddings and LM head, with the causal-LM forward that
    `CachedModel` drives (one cache layer; `features` come in per fed column). Made per call: it only
    references the shared weights."""

    def __init__(self, head: FeatureHead, target):
        super().__init__()
        self.head = head
        self.config = head.config
        self.embed_tokens = target.get_input_embeddings()
        self.target_head = target.get_output_embeddings() if head.kind == "eagle1" else None
        self.target_dtype = target.dtype  # EAGLE-1 scores its states with the target's head, in its dtype
        self.vocab_size = target.config.get_text_config().vocab_size
        self.draft_ids = head.draft_ids()

    @property
    def device(self) -> torch.device:
        return self.head.q_proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.head.q_proj.weight.dtype

    def forward(
        self, input_ids, attention_mask, position_ids, past_key_values, features, use_cache=True, logits_to_keep=0, **_
    ):
        """input_ids [batch, seq] (token p + 1 of each entry), features [batch, seq, hidden] (state p),
        attention_mask [batch, cached + seq] over the cache's columns (the new ones last); logits for the
        last `logits_to_keep` columns (0: all), states for all."""
        head = self.head
        embeds = self.embed_tokens(input_ids).to(self.dtype)
        attention_input, residual = head.layer_input(embeds, features.to(self.dtype))
        query, key, value = head.qkv(attention_input, position_ids)
        key, value = past_key_values.update(key, value, 0)
        seq, total = query.shape[2], key.shape[2]
        # Cache columns are in feeding order, so a column at or before the query's slot is not its future.
        if attention_mask.dim() == 4:  # a ready additive mask in position space (a draft tree's, CachedModel.forward_tree)
            mask = attention_mask.to(query.dtype)
        else:
            slots = torch.arange(total, device=key.device)
            causal = slots[None, :] <= slots[total - seq :, None]  # [seq, total]
            visible = attention_mask.bool()[:, None, None, :] & causal  # [batch, 1, seq, total]
            mask = torch.zeros(visible.shape, dtype=query.dtype, device=query.device)
            mask.masked_fill_(~visible, torch.finfo(query.dtype).min)  # additive: padding rows stay finite
        if key.shape[1] != query.shape[1] and seq <= MAX_PACKED_TOKENS:  # drafting: grouped heads packed, no kv copy
            attended = attend_packed(query, key, value, mask)
        else:
            attended = F.scaled_dot_product_attention(
                query, key, value, attn_mask=mask, enable_gqa=key.shape[1] != query.shape[1]
            )
        hidden = head.layer_output(attended, residual)  # [batch, seq, hidden]
        last = hidden[:, -logits_to_keep:]
        if self.target_head is not None:
            last = last.to(self.target_dtype)
        scores = head.scores(last, self.target_head).float()
        if self.draft_ids is not None:
            logits = scores.new_full((*scores.shape[:2], self.vocab_size), float("-inf"))
            logits[..., self.draft_ids] = scores
        else:
            logits = scores
        return CausalLMOutputWithPast(logits=logits, hidden_states=(hidden,))


class FeatureDrafter(Drafter):
    """Drafts with a FeatureHead from the target's own hidden states (EAGLE-1 / EAGLE-3 layouts).

    The first step of a call drafts nothing (there are no target states before the target's first
    forward); afterwards each step first feeds the head what the last verification confirmed, then drafts
    autoregressively from its own predicted states. Sampling, the confidence stop and draft policies
    work as with `ModelDrafter`. `hf_specdec.load_drafter(path)` returns one for a head directory; passing
    the directory as `drafter=` does the same.
    """

    def __init__(self, head: FeatureHead, *, match_target: bool = True):
        """`match_target`: draft in the target's half precision where its device computes that natively (see
        `compute_head`); False: always in the head's own dtype (what `load_drafter(path, dtype=...)` asks for)."""
        self.head = head.eval()
        self.match_target = match_target
        self._cast: tuple[tuple, FeatureHead] | None = None  # (key, the head in another dtype): derived, shared by calls
        self._cast_lock = threading.Lock()

    def __getstate__(self) -> dict:  # copies and pickles keep the description, not the lock or the derived copy
        return {**self.__dict__, "_cast": None, "_cast_lock": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _cast_lock=threading.Lock())

    def compute_head(self, target) -> FeatureHead:
        """The head a call drafts with: `head` itself, or with `match_target` a copy in the target's dtype when that
        is a half precision the head's device computes natively: bf16 or fp16 on CUDA, bf16 on a CPU with
        avx512_bf16 / amx_bf16 (`cpu.computes_bf16`). On an AMD EPYC Zen 5 (avx512_bf16) with a bf16 target, the
        shipped head drafted in bf16 gave 4-5 % more speed than in float32 at batch 1 and 4, at the same acceptance.
        The copy is made once per dtype and version of the head's weights (training the head on makes a new one);
        `head` itself is never changed. Which head drafts changes the drafts, never what verification keeps."""
        dtype, device = target.dtype, self.head.q_proj.weight.device
        native = (device.type == "cuda" and dtype in (torch.bfloat16, torch.float16)) or (
            device.type == "cpu" and dtype == torch.bfloat16 and computes_bf16())
        if not self.match_target or not native or dtype == self.head.q_proj.weight.dtype:
            return self.head
        key = (dtype, tuple(param._version for param in self.head.parameters()))
        with self._cast_lock:
            if self._cast is None or self._cast[0] != key:  # one copy at a time: of the head's latest weights
                self._cast = (key, copy.deepcopy(self.head).to(dtype))
            return self._cast[1]

    def feature_layers(self, target) -> tuple[int, ...]:
        return self.head.feature_layers_for(target.config.get_text_config().num_hidden_layers)

    @property
    def expected_acceptance(self) -> float | None:
        """The head config's `hf_specdec_acceptance` (written by `hf-specdec distill --kind feature`), else None."""
        return declared_acceptance(self.head.config, "the feature head")

    def check_compatible(self, target, generation_config, tokenizer=None, drafter_tokenizer=None) -> int:
        text = target.config.get_text_config()
        expected = getattr(self.head.config, "target_hidden_size", None) or self.head.config.hidden_size
        if text.hidden_size != expected:
            raise IncompatibleDrafterError(
                f"the feature head reads hidden states of width {expected}, the target's are {text.hidden_size}: "
                "it was trained for another target."
            )
        if text.vocab_size != self.head.config.vocab_size:
            raise IncompatibleDrafterError(
                f"the feature head was trained for a vocabulary of {self.head.config.vocab_size} ids, the target has "
                f"{text.vocab_size}: it was trained for another target."
            )
        num_states = text.num_hidden_layers + 1
        layers = self.feature_layers(target)
        if any(not -num_states <= layer < num_states for layer in layers):
            raise IncompatibleDrafterError(f"the feature head reads hidden states {layers}, the target has {num_states}.")
        return text.vocab_size

    def start(self, target, batch_size: int, device: torch.device) -> "FeatureDraftSession":
        bound = BoundHead(self.compute_head(target), target)
        return FeatureDraftSession(CachedModel(bound, batch_size, device), bound)


class FeatureDraftSession(ModelDraftSession):
    """One call's head cache and feature buffer. `features[b, i]` is the head's input state for the
    entry at buffer index i: the target's (fused) state once verification confirmed token i, the head's
    own prediction while drafting. Entries computed from predicted states are dropped after every
    verification and recomputed from the target's. What `observe` hands over is fused into `features` only when
    the head next drafts (`_take_observed`): a step that drafts nothing (the default policy once the head does
    not pay) costs the head no tensor op."""

    def __init__(self, cached: CachedModel, bound: BoundHead):
        super().__init__(cached)
        self.bound = bound
        self.features: torch.Tensor | None = None  # [batch, buffer, hidden]
        self.exact_entries = torch.zeros_like(cached.num_cached)  # [batch] head entries computed from target states
        self.observed: list[tuple[TargetFeatures, torch.Tensor]] = []  # (target states, num_valid) not fused yet

    def propose(self, ctx: DraftContext, num_tokens: torch.Tensor) -> Draft:
        self._take_observed()
        if self.features is None:  # before the target's first forward: nothing to read yet
            return Draft(tokens=num_tokens.new_empty(num_tokens.shape[0], 0), num_drafted=torch.zeros_like(num_tokens))
        # Entries up to index lens - 2 pair a confirmed state with a committed token: exact.
        self.exact_entries = ctx.lens - 1 - ctx.pad_lens
        self._reserve(ctx.sequences.shape[1], self.features)
        return super().propose(ctx, num_tokens)

    def score_prompt(self, ctx: DraftContext, num_positions: int):
        """The head over the prompt's target states (its prefill), with logits at the last `num_positions` entries:
        the entry at head column c (state c, token c + 1) guesses the token at c + 2."""
        self._take_observed()
        if self.features is None:
            return None
        self._reserve(ctx.sequences.shape[1], self.features)
        logits, _ = self.cached.forward(ctx.sequences[:, 1:], ctx.pad_lens, ctx.lens - 2, num_positions,
                                        column_inputs={"features": self.features})
        logits = logits[..., : ctx.vocab_size]  # [batch, positions, vocab]
        column = ctx.lens[:, None] - num_positions - 2 + torch.arange(num_positions, device=ctx.lens.device)
        return torch.where(column >= ctx.pad_lens[:, None], logits.argmax(dim=-1), -1), logits

    def _draft_logits(self, ctx: DraftContext, rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        # The entry that predicts the token at index `at` sits at at - 2 (state at - 2, token at - 1); in
        # the head's sequence (the buffer shifted by one) it is column at - 2, fed up to at - 1.
        ends = torch.where(rows, at - 1, ctx.lens - 1)
        logits, state = self.cached.forward(
            ctx.sequences[:, 1:], ctx.pad_lens, ends, 1, at - 1, feature_layers=(0,),
            column_inputs={"features": self.features},
        )
        # The predicted state at index at - 1 is the next entry's input.
        index = rows.nonzero().squeeze(1)
        self.features[index, at[index] - 1] = state.hidden[index, -1].to(self.features.dtype)
        return logits

    def observe(self, num_valid: torch.Tensor, features: TargetFeatures | None = None) -> None:
        if features is not None:
            self.observed.append((features, num_valid))
        if self.proposed:
            keep = torch.minimum(self.exact_entries, num_valid)
            self.cached.rollback(torch.minimum(self.cached.num_cached, keep), slack=self.slack)
            self.proposed = False

    def _take_observed(self) -> None:
        """Fuses the target states observed since the last draft and keeps those of the tokens that survived
        verification, at their buffer index (each token's state arrives once: a verification feeds the target
        only tokens it has not kept). One fusion over every pending column instead of one per step."""
        if not self.observed:
            return
        observed, self.observed = self.observed, []
        hidden = torch.cat([features.hidden for features, _ in observed], dim=1)  # [batch, columns, layers * hidden]
        index = torch.cat([features.index for features, _ in observed], dim=1)  # [batch, columns]
        kept = torch.cat([features.fed & (features.positions < num_valid[:, None]) for features, num_valid in observed],
                         dim=1)  # [batch, columns]
        rows, cols = kept.nonzero(as_tuple=True)  # fused only for those: a tree's forward fed many more
        fused = self.bound.head.input_features(hidden[rows, cols].to(self.bound.dtype))  # [kept, hidden]
        self._reserve(int(index.max()) + 1, fused.expand(hidden.shape[0], -1, -1))
        self.features[rows, index[rows, cols]] = fused

    drafts_trees = True

    def check_trees(self) -> None:
        """The head's forward takes the 4D masks of `CachedModel.forward_tree` (BoundHead.forward)."""

    def propose_tree(self, ctx: DraftContext, policy, row_depth: torch.Tensor) -> DraftTree:
        """EAGLE-2's tree from the head: the entry of a node is (the state the head predicted at its parent's
        entry, the node's token), the root's (the target's state before the root, the root): exact, as in
        chains. One head forward per depth, each node attending to the committed entries and its own path.
        Before the target's first forward there is no state to read: the root alone (a plain step)."""
        self._take_observed()
        self.proposed = True
        roots = ctx.sequences.gather(1, (ctx.lens - 1)[:, None]).squeeze(1)  # [batch]
        if self.features is None:
            return DraftTree.chain(roots[:, None])
        self.exact_entries = ctx.lens - 1 - ctx.pad_lens
        self._reserve(ctx.sequences.shape[1], self.features)
        cached = self.cached
        # The head's sequence is the buffer shifted by one: entry j holds (state j, token j + 1).
        head_tokens, head_lens = ctx.sequences[:, 1:], ctx.lens - 1
        # The root's entry is fed with the tree (rows that did not move on since the last step cached it).
        cached.rollback(torch.minimum(cached.num_cached, head_lens - ctx.pad_lens - 1), slack=self.slack)
        states = self.features.new_zeros(roots.shape[0], 1, self.features.shape[2])  # [batch, nodes, hidden] by node

        def expand(candidates: DraftTree, frontier: torch.Tensor) -> torch.Tensor:
            nonlocal states
            if states.shape[1] < candidates.tokens.shape[1]:
                states = torch.cat([states, states.new_zeros(states.shape[0], candidates.tokens.shape[1] - states.shape[1], states.shape[2])], dim=1)
            if not cached.tree_pending:  # the committed entries, the root's last
                logits, columns = cached.forward_tree(
                    head_tokens, ctx.pad_lens, head_lens, candidates, feed=frontier[:, :0], feature_layers=(0,),
                    column_inputs={"features": self.features},
                )
                states[:, 0] = columns.hidden[:, -1].to(states.dtype)
            else:
                parent_states = states.gather(1, candidates.parents.clamp_min(0)[:, :, None].expand(-1, -1, states.shape[2]))
                logits, columns = cached.forward_tree(
                    head_tokens, ctx.pad_lens, head_lens, candidates, feed=frontier, feature_layers=(0,),
                    node_inputs={"features": parent_states},
                )
                fed = frontier >= 0
                rows, slots = fed.nonzero(as_tuple=True)
                states[rows, frontier[rows, slots]] = columns.hidden[rows, slots].to(states.dtype)
            return logits[..., : ctx.vocab_size].softmax(dim=-1)

        tree = build_tree(roots, expand, policy.top_k, policy.max_depth, policy.max_nodes, row_depth)
        if cached.tree_pending:  # drop the nodes: their entries came from predicted states
            cached.keep_paths(row_depth.new_zeros(row_depth.shape[0], 0), torch.zeros_like(row_depth))
        self.slack = policy.top_k * policy.max_depth + 1
        return tree

    def _reserve(self, length: int, like: torch.Tensor) -> None:
        """Makes the feature buffer at least `length` columns wide (it follows the loop's token buffer)."""
        if self.features is None:
            self.features = like.new_zeros(like.shape[0], length, like.shape[-1])
        elif self.features.shape[1] < length:
            grown = self.features.new_zeros(self.features.shape[0], length, self.features.shape[2])
            grown[:, : self.features.shape[1]] = self.features
            self.features = grown
