"""A tiny seeded model for every causal-LM type transformers knows, built in memory (no downloads).

Contract: `MODEL_TYPES` is every key of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, sorted. `build(model_type,
seed)` returns that type's causal-LM class (the one the mapping names) in eval mode, float32, with a
roughly 60k-4M parameters: 2 layers (more only where a hybrid needs one of each
layer type), hidden 64, 4 heads, vocab 96, >= 256 positions, sliding windows of 8, pad/bos/eos = 0/1/2
in config and generation_config, and a sharpened LM head. The same (model_type, seed) gives the same
weights; `build(..., is_decoder=False)` builds a type whose config has that flag as an encoder. A type
that cannot be built small raises `Unbuildable(reason)`: a skip is always recorded, never silent.

How: the config class's own defaults, with the size fields it declares (any of `SIZES`, also inside
nested sub-configs such as text_config / vision_config) replaced by small values; per-layer lists
(`layer_types`, `mlp_layer_types`, per-layer sizes, heterogeneous `per_layer_config`) are cut to the
first layer of each distinct combination of kinds. `OVERRIDES` holds the per-type fixes where that
generic pass is not enough, `SKIPS` the types that cannot be built, each with a comment saying why.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Callable

import torch
import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_models  # noqa: E402  (the project's tiny-model conventions: _finish, perturbed, ids)

VOCAB = tiny_models.VOCAB
PAD, BOS, EOS = tiny_models.PAD, tiny_models.BOS, tiny_models.EOS
WINDOW = 8  # sliding window: the sweep's 40-token runs go well past it
LAYERS = 2
HIDDEN = 64
HEADS = 4
HEAD_DIM = HIDDEN // HEADS

MODEL_TYPES: list[str] = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


class Unbuildable(Exception):
    """This model type cannot be built small in memory; the message says why."""


# Size fields, by the names configs use for them. A field is replaced only where the config class
# declares it with a concrete default, so optional features (n_inner=None, sliding_window=None) stay
# off and fields __post_init__ derives stay derived (see FILL_IF_NONE for the exceptions).
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "encoder_layers",
           "num_decoder_layers", "num_encoder_layers", "num_blocks")
_HIDDEN = ("hidden_size", "n_embd", "d_model", "emb_dim", "embedding_dim", "word_embed_proj_dim",
           "attention_hidden_size", "lru_width", "dim_model")
_HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "decoder_attention_heads",
          "encoder_attention_heads", "attention_heads", "num_decoder_attention_heads",
          "num_encoder_attention_heads", "swa_num_attention_heads")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "swa_num_key_value_heads", "n_kv_heads")
_HEAD_DIM = ("head_dim", "d_head", "dim_head", "attention_head_size", "kv_channels", "attention_head_dim",
             "swa_head_dim", "v_head_dim", "qk_head_dim", "index_head_dim", "linear_key_head_dim",
             "linear_value_head_dim", "linear_head_dim")
_FFN = ("intermediate_size", "ffn_dim", "decoder_ffn_dim", "encoder_ffn_dim", "d_ff", "dff", "dim_ff",
        "d_inner", "ffn_hidden_size", "intermediate_size_mlp", "dense_intermediate_size",
        "feed_forward_size", "mlp_dim")
_EXPERT_FFN = ("moe_intermediate_size", "shared_expert_intermediate_size", "shared_experts_intermediate_size",
               "shared_intermediate_size", "expert_ffn_hidden_size", "moe_shared_expert_intermediate_size")
_POSITIONS = ("max_position_embeddings", "n_positions", "n_ctx", "max_target_positions", "max_seq_len",
              "context_length", "original_max_position_embeddings", "model_max_length")
_WINDOWS = ("sliding_window", "sliding_window_size", "attention_window_size", "window_size",
            "local_attention", "attention_chunk_size")

SIZES: dict[str, int] = {
    "vocab_size": VOCAB, "decoder_vocab_size": VOCAB, "vocab_size_per_layer_input": VOCAB,
    **{name: LAYERS for name in _LAYERS},
    **{name: HIDDEN for name in _HIDDEN},
    **{name: HEADS for name in _HEADS},
    **{name: HEAD_DIM for name in _HEAD_DIM},
    **{name: 2 * HIDDEN for name in _FFN},
    **{name: HIDDEN // 2 for name in _EXPERT_FFN},
    **{name: 256 for name in _POSITIONS},
    **{name: WINDOW for name in _WINDOWS},
    # MoE: a few small experts, two per token, so routing still happens.
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "moe_k": 2, "num_experts_per_token": 2,
    "n_shared_experts": 1, "num_shared_experts": 1, "moe_num_shared_experts": 1,
    "n_group": 1, "topk_group": 1, "num_expert_group": 1,
    "first_k_dense_replace": 1,  # one dense layer, one MoE layer
    # Multi-head latent attention (DeepSeek family).
    "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "o_lora_rank": 16,
    "index_n_heads": 2, "index_topk": 64,
    # Linear attention / state-space layers.
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_num_heads": HEADS,
    "mamba_d_state": 16, "state_size": 16, "ssm_state_size": 16,
    # Mamba-2 heads: 4 heads * 32 = the inner width, mamba_expand 2 * hidden 64.
    "mamba_n_heads": 4, "mamba_num_heads": 4, "mamba_headdim": 32, "mamba_d_head": 32, "mamba_head_dim": 32,
    "mamba_d_ssm": 2 * HIDDEN,
    "time_step_rank": 8, "mamba_dt_rank": 8, "n_groups": 1, "mamba_n_groups": 1,
    # Layer patterns given as periods: small enough that 2 layers hold both kinds.
    "global_attn_every_n_layers": 2, "sliding_window_pattern": 2, "no_rope_layer_interval": 2,
    # Smaller side widths that must stay below hidden / head_dim.
    "rotary_dim": 8, "embedding_size": HIDDEN, "input_embedding_size": 32, "output_embedding_size": HIDDEN,
    "hidden_size_per_layer_input": 16, "laurel_rank": 8, "adapter_rank": 8, "num_query_groups": HEADS,
    "router_hidden_size": 32, "hc_lowrank": 8, "hidden_size_global": HIDDEN, "ple_embed_dim": 16,
    "backbone_hidden_size": HIDDEN,
}

#: Fields some defaults leave None although the model code needs them (real checkpoints set them).
FILL_IF_NONE: dict[str, int] = {
    "head_dim": HEAD_DIM, "num_key_value_heads": HEADS, "num_experts_per_tok": 2, "num_local_experts": 4,
    "moe_intermediate_size": HIDDEN // 2,
}

#: Sizes inside per-layer overrides (heterogeneous configs): wider than the global ones where the
#: point of the override is a layer that differs (e.g. Gemma 4's global layers use a larger head_dim).
PER_LAYER_SIZES: dict[str, int] = {"head_dim": 2 * HEAD_DIM}

#: Counts that never grow past the default (a model built for one expert per token stays so).
_AT_MOST_DEFAULT = {"num_experts_per_tok", "moe_topk", "moe_k", "num_experts_per_token", "n_shared_experts",
                    "num_shared_experts", "moe_num_shared_experts", "first_k_dense_replace", *_LAYERS}

#: Per-layer pattern fields: a list (or string) with one entry per layer, cut to one of each kind.
PATTERN_FIELDS = ("layer_types", "block_types", "layers_block_type", "hybrid_override_pattern", "mlp_layer_types")

# Sub-configs (vision / audio towers, text_config) are shrunk with the same table; these extra fields
# keep towers cheap.
_TOWER_SIZES = {"image_size": 32, "patch_size": 8}

_ROPE = {"rope_type": "default", "rope_theta": 10000.0}

#: model_type -> extra config kwargs (a dict, or a function of the default config returning one),
#: applied after the generic pass. Each entry says why the generic pass was not enough.
OVERRIDES: dict[str, Any] = {
    # Hybrids whose attention layers are placed by index or period: with 2 layers the defaults
    # (attention at layer 4 of every 8, or nowhere) leave no attention layer at all.
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},  # default: all Mamba
    # (transformers 5.24+) A recurrent-depth model whose config serialises each layer as two blocks (attention,
    # mlp) and halves them again on load: sized directly, one input, one looped and one output layer.
    "dory": {"num_hidden_layers": 3, "n_input_layers": 1, "n_recurrent_layers": 1, "n_output_layers": 1,
             "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},  # default cycle r, r, a
    # LFM2's default full_attn_idxs is every layer (no conv layer); the checkpoints mix both.
    "lfm2": {"layer_types": ["conv", "full_attention"]},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},  # default layer_types None
    # Zamba ties one shared transformer across its hybrid layers: two are needed for the tie to exist.
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
    # Defaults that leave MoE fields unset (the checkpoints set them).
    "dots1": {"n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1},
    # Cohere Compass's default rope_parameters has no per-layer-type entries, which its rotary needs.
    "cohere_compass_text": {
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {"sliding_attention": dict(_ROPE), "full_attention": dict(_ROPE)},
    },
    # DBRX's attention reads attn_config.rope_theta, which DbrxAttentionConfig does not declare, and
    # clamps q/k/v with clip_qkv unconditionally (the default None fails).
    "dbrx": lambda default: {"attn_config": {**default.attn_config.to_dict(), "kv_n_heads": 2, "rope_theta": 10000.0,
                                             "clip_qkv": 8.0}},
    # BLT: hashed n-gram byte embeddings (500k rows by default) and a local window that is not a
    # plain sliding_window field.
    "blt": {"encoder_hash_byte_group_vocab": 64, "local_attention_window_len": WINDOW},
    # Mamba-2 names its SSM heads num_heads / head_dim: 4 * 32 = expand 2 * hidden 64.
    "mamba2": {"head_dim": 32},
    # xLSTM rounds qk/v widths up to multiples of 64: hidden 128 keeps q, k and v heads the same width.
    "xlstm": {"hidden_size": 128, "embedding_dim": 128},
    # Reformer: axial position factors must sum to hidden and multiply to >= the sequence length.
    "reformer": {"attn_layers": ["local", "lsh"], "axial_pos_embds_dim": [32, 32], "axial_pos_shape": [16, 16],
                 "local_attn_chunk_length": 16, "lsh_attn_chunk_length": 16, "num_buckets": 4},
    # Qwen4-Exp's indexed (QSA) attention layers need the indexer sizes the default leaves None; a
    # budget of 16 tokens makes the 40-token runs really sparse.
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 16,
                       "indexer_compress_ratio": 4},
    # Gemma 3n: the last num_kv_shared_layers layers reuse earlier layers' KV; keep that feature with
    # one producer and one consumer of each attention kind.
    "gemma3n_text": {"num_hidden_layers": 4, "num_kv_shared_layers": 2, "intermediate_size": 2 * HIDDEN,
                     "layer_types": ["sliding_attention", "full_attention"] * 2,
                     "activation_sparsity_pattern": [0.0] * 4},
    # RoCBert's pronunciation and glyph-shape embedding tables (25k x 512 by default).
    "roc_bert": {"shape_vocab_size": 64, "shape_embed_dim": 32, "pronunciation_vocab_size": 64,
                 "pronunciation_embed_dim": 32},
    # MusicGen: one codebook so that input_ids [batch, len] is a plain token stream.
    "musicgen": {"num_codebooks": 1},
    "musicgen_melody": {"num_codebooks": 1},
}
OVERRIDES["qwen4_exp"] = OVERRIDES["qwen4_exp_text"]

_ASSISTANT = (
    "a Gemma 4 assistant (MTP-style) head, not a standalone LM: forward() raises without the backbone's "
    "inputs_embeds and shared_kv_states, and its default config does not validate (every layer reads shared KV, "
    "so no layer produces a cache)"
)

#: model_type -> reason it cannot be built small (checked before any attempt).
SKIPS: dict[str, str] = {
    "gemma4_assistant": _ASSISTANT,
    "gemma4_unified_assistant": _ASSISTANT,
}


def _musicgen_start(model: torch.nn.Module) -> None:
    # MusicGen's own generate() pads its codebook delay pattern with decoder_start_token_id (None by default).
    model.generation_config.decoder_start_token_id = BOS


#: model_type -> a function run on the built model (state the config cannot express).
POST_BUILD: dict[str, Callable[[torch.nn.Module], None]] = {
    "xmod": lambda model: model.set_default_language("en_XX"),  # X-MOD routes through per-language adapters
    "musicgen": _musicgen_start,
    "musicgen_melody": _musicgen_start,
}


def _field_defaults(config) -> dict[str, Any]:
    """The config class's declared defaults (configs are dataclasses): what the class itself sets, before
    __post_init__ derives fields such as attention_hidden_size = 2 * hidden_size."""
    if dataclasses.is_dataclass(config):
        return {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}
    return config.to_dict()


def _declared_values(config) -> dict[str, Any]:
    """A sub-config as constructor kwargs: its current declared fields (the composite's choices, e.g. a
    SigLIP vision tower), without values __post_init__ derived (those are derived again from the new sizes)."""
    values = config.to_dict()
    declared = _field_defaults(config) if dataclasses.is_dataclass(config) else values
    keep = {name: value for name, value in values.items() if name in declared}
    keep["model_type"] = getattr(config, "model_type", values.get("model_type"))
    return keep


def _num_layers_field(values: dict[str, Any]) -> str | None:
    for name in _LAYERS:
        if isinstance(values.get(name), int) and not isinstance(values.get(name), bool):
            return name
    return None


def _pick_layers(kinds: list) -> list[int]:
    """Indices of the layers to keep: the first layer of each kind, then more layers from the start up
    to LAYERS (so a plain stack becomes layers 0 and 1)."""
    picked, seen = [], []
    for index, kind in enumerate(kinds):
        if kind not in seen:
            seen.append(kind)
            picked.append(index)
    for index in range(len(kinds)):
        if len(picked) >= LAYERS:
            break
        if index not in picked:
            picked.append(index)
    return sorted(picked)


def _small(name: str, value: Any) -> Any:
    """`value` with its size fields shrunk (for per-layer entries)."""
    if isinstance(value, int) and not isinstance(value, bool) and name in SIZES:
        return min(SIZES[name], value) if name in _AT_MOST_DEFAULT else SIZES[name]
    return value


def _kv_heads(kv: int, heads: int | None) -> int:
    """Multi-head stays multi-head (kv == heads), grouped-query becomes 2 KV heads, multi-query stays 1."""
    return HEADS if kv == heads else 2 if kv > 1 else 1


def _shrink(config, top: bool) -> dict[str, Any]:
    """Overrides for one (sub-)config: small sizes, cut layer patterns, special ids; sub-configs as dicts."""
    kwargs: dict[str, Any] = {}
    declared = _field_defaults(config)
    values = config.to_dict()  # after __post_init__: derived patterns such as layer_types are filled in
    # Sizes: only fields the class declares with a concrete int default; derived ones are left to
    # __post_init__ so that they stay consistent (qk_head_dim = nope + rope, mamba_headdim, ...).
    for name in SIZES:
        value = declared.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            kwargs[name] = _small(name, value)
    # Windows a config derives when its field is left None (Dots3 fills in 512): still shrink them.
    for name in _WINDOWS:
        if name in declared and declared[name] is None and isinstance(values.get(name), int) and values[name] > 0:
            kwargs[name] = WINDOW
    # Multi-head latent attention: where head_dim is the rotary part, it must stay equal to it.
    rope = declared.get("qk_rope_head_dim")
    if isinstance(rope, int) and declared.get("head_dim") == rope:
        kwargs["head_dim"] = SIZES["qk_rope_head_dim"]
    # Some defaults leave required fields unset (the Hub checkpoints set them); fill those.
    for name, small in FILL_IF_NONE.items():
        if name in declared and declared[name] is None and getattr(config, name, None) is None:
            kwargs[name] = small
    if not top:
        for name, small in _TOWER_SIZES.items():
            if isinstance(declared.get(name), int):
                kwargs[name] = small
    heads = next((values[n] for n in _HEADS if isinstance(values.get(n), int)), None)
    for name in _KV_HEADS:
        if isinstance(declared.get(name), int):
            kwargs[name] = _kv_heads(declared[name], heads)
    # Per-layer fields (lists with one entry per layer: layer_types, mlp_layer_types, per-layer
    # intermediate sizes, ...): keep the first layer of each combination of kinds, at least LAYERS.
    layers_field = _num_layers_field(values)
    num_layers = values.get(layers_field) if layers_field else None
    if isinstance(num_layers, int) and num_layers > LAYERS:
        patterns = {
            name: value for name, value in values.items()
            if not name.startswith("_") and len(value if isinstance(value, (list, tuple, str)) else ()) == num_layers
            and (isinstance(value, (list, tuple)) or name in PATTERN_FIELDS)
        }
        kind_fields = [n for n in PATTERN_FIELDS if n in patterns]
        picked = _pick_layers([tuple(patterns[n][i] for n in kind_fields) for i in range(num_layers)])
        for name, value in patterns.items():
            cut = [_small(name, value[i]) for i in picked]
            kwargs[name] = "".join(cut) if isinstance(value, str) else cut
        kwargs[layers_field] = len(picked)
        # Heterogeneous configs: per-layer overrides keyed by layer index follow their layers.
        per_layer = values.get("per_layer_config")
        if isinstance(per_layer, dict):
            remapped = {}
            for new, old in enumerate(picked):
                entry = per_layer.get(old, per_layer.get(f"{old:02d}", per_layer.get(str(old))))
                if entry is not None:
                    small = {k: PER_LAYER_SIZES.get(k, _small(k, v)) for k, v in entry.items()}
                    if "num_key_value_heads" in entry:
                        small["num_key_value_heads"] = _kv_heads(
                            entry["num_key_value_heads"], entry.get("num_attention_heads", heads)
                        )
                    remapped[new] = small
            kwargs["per_layer_config"] = remapped
    if "is_decoder" in values:
        kwargs["is_decoder"] = True  # BERT-style models are causal only as decoders
    for name, token in (("pad_token_id", PAD), ("bos_token_id", BOS), ("eos_token_id", EOS)):
        if name in values or top:
            kwargs[name] = token
    for name, sub in vars(config).items():
        if isinstance(sub, transformers.PreTrainedConfig):
            kwargs[name] = {**_declared_values(sub), **_shrink(sub, top=False)}
    return kwargs


def model_class(model_type: str) -> type:
    return getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])


def config(model_type: str) -> transformers.PreTrainedConfig:
    """The tiny config of `model_type` (raises Unbuildable)."""
    if model_type in SKIPS:
        raise Unbuildable(SKIPS[model_type])
    try:
        cls = model_class(model_type)
    except AttributeError as error:
        raise Unbuildable(f"transformers exports no {MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]}: {error}")
    config_cls = cls.config_class  # e.g. mllama -> MllamaTextConfig, not the composite MllamaConfig
    default = config_cls()
    kwargs = _shrink(default, top=True)
    extra = OVERRIDES.get(model_type, {})
    kwargs.update(extra(default) if callable(extra) else extra)
    return config_cls(**kwargs)


def _sharpen_heads(model: torch.nn.Module) -> None:
    """tiny_models._finish's sharpening for models with one LM head per codebook (MusicGen)."""
    with torch.no_grad():
        for head in model.lm_heads:
            head.weight.mul_(8.0)


def declares_is_decoder(model_type: str) -> bool:
    """Whether the type's config has an `is_decoder` flag (BERT-like configs default it to False, the way
    encoder checkpoints load): the sweep builds such types a second time with the flag off."""
    try:
        return getattr(config(model_type), "is_decoder", None) is not None
    except Unbuildable:
        return False


def build(model_type: str, seed: int = 0, is_decoder: bool = True) -> torch.nn.Module:
    """The tiny seeded model of `model_type`, eval mode, float32, sharpened head; raises Unbuildable.
    `is_decoder=False` builds a type whose config declares the flag as an encoder (bidirectional)."""
    cfg = config(model_type)
    if not is_decoder:
        if getattr(cfg, "is_decoder", None) is None:
            raise Unbuildable(f"{type(cfg).__name__} has no is_decoder flag")
        cfg.is_decoder = False
    torch.manual_seed(seed)
    try:
        model = model_class(model_type)(cfg)
    except ImportError as error:  # an optional backend (timm, ...) that is not installed
        first = str(error).strip().splitlines()[0].split(". ")[0]
        raise Unbuildable(f"needs a package that is not installed (no downloads here): {first}")
    except (AssertionError, ValueError) as error:
        if is_decoder:
            raise
        raise Unbuildable(f"{model_class(model_type).__name__} cannot be built with is_decoder=False: {error}")
    model = model.float()
    if model_type in POST_BUILD:
        POST_BUILD[model_type](model)
    head = model.get_output_embeddings()
    if head is not None and isinstance(getattr(head, "weight", None), torch.Tensor):
        model = tiny_models._finish(model)
    elif isinstance(getattr(model, "lm_heads", None), torch.nn.ModuleList):
        _sharpen_heads(model)
    else:
        raise Unbuildable(f"{type(model).__name__} has no output embedding with a weight to sharpen")
    model.eval()
    for name, token in (("pad_token_id", PAD), ("bos_token_id", BOS), ("eos_token_id", EOS)):
        setattr(model.generation_config, name, token)
    return model


# Encoder-decoder and speech-to-text types: transformers' seq2seq and speech-seq2seq mappings (the same type may name
# a text and a speech class there: each class is its own record).
from transformers.models.auto.modeling_auto import (  # noqa: E402
    MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
)

#: (model_type, class name) of every class in the two mappings, sorted.
SEQ2SEQ_CLASSES: list[tuple[str, str]] = sorted(
    {(t, c) for mapping in (MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)
     for t, c in mapping.items()}
)

#: Seq2seq types whose tiny config needs more than the generic shrink (each with why).
SEQ2SEQ_OVERRIDES: dict[str, Any] = {
    # LED and BigBird-Pegasus attend locally in blocks/windows sized for long documents.
    "led": {"attention_window": [8, 8]},
    "bigbird_pegasus": {"attention_type": "original_full", "block_size": 8},
    "longt5": {"local_radius": 8},
    "marian": {"decoder_vocab_size": VOCAB, "pad_token_id": PAD, "decoder_start_token_id": PAD},
    # Audio encoders sized for 30 s windows: a window of 32 frames.
    "whisper": {"max_source_positions": 16, "num_mel_bins": 8, "decoder_start_token_id": 3,
                "begin_suppress_tokens": None, "suppress_tokens": None},
    "speech_to_text": {"max_source_positions": 32},
}


def build_seq2seq(model_type: str, class_name: str, seed: int = 0) -> torch.nn.Module:
    """The tiny seeded model of one seq2seq-mapping class, as `build` makes causal LMs (raises Unbuildable); its
    generation config starts the decoder at EOS where the config names no start token (BART's convention)."""
    cls = getattr(transformers, class_name, None)
    if cls is None:
        raise Unbuildable(f"transformers exports no {class_name}")
    config_cls = cls.config_class
    try:
        default = config_cls()
    except Exception as error:  # noqa: BLE001  (composite configs that need sub-configs: EncoderDecoderModel)
        raise Unbuildable(f"{config_cls.__name__}() has no defaults to shrink: {str(error).splitlines()[0][:120]}")
    kwargs = _shrink(default, top=True)
    kwargs.update(SEQ2SEQ_OVERRIDES.get(model_type, {}))
    torch.manual_seed(seed)
    try:
        model = cls(config_cls(**kwargs))
    except Exception as error:  # noqa: BLE001  (a config the generic shrink leaves inconsistent: recorded, not hidden)
        first = str(error).strip().splitlines()
        raise Unbuildable(f"the generic tiny config does not build: {type(error).__name__}: "
                          f"{' '.join(first[:2])[:140]}")
    model = model.float().eval()
    head = model.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise Unbuildable(f"{class_name} has no output embedding with a weight to sharpen")
    model = tiny_models._finish(model)
    generation = model.generation_config
    for name in ("decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id"):
        if name == "decoder_start_token_id" and getattr(generation, name, None) is None:
            setattr(generation, name, getattr(model.config, name, None) or EOS)
        elif name != "decoder_start_token_id":
            setattr(generation, name, None)
    generation.max_length = None
    return model


def encoder_inputs(model: torch.nn.Module, batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded inputs for `model`'s encoder by its main input: token ids (rows of 10, 7, 4 ... tokens, right-padded
    with a mask), or audio features / samples of the first shape its encoder takes (asked by running the encoder on
    candidates). Raises Unbuildable where none fits."""
    gen = torch.Generator().manual_seed(seed)
    name = model.main_input_name
    if name == "input_ids":  # padded on the right for an encoder, on the left for a decoder-only audio LM
        lengths = [max(10 - 3 * row, 3) for row in range(batch)]
        ids = torch.full((batch, max(lengths)), PAD, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, length in enumerate(lengths):
            where = slice(0, length) if model.config.is_encoder_decoder else slice(max(lengths) - length, None)
            ids[row, where] = torch.randint(3, VOCAB, (length,), generator=gen)
            mask[row, where] = 1
        return {"input_ids": ids, "attention_mask": mask}
    config = model.config
    frames = 2 * getattr(config, "max_source_positions", 16)
    width = next((getattr(config, f) for f in ("num_mel_bins", "feature_size", "input_feat_per_channel")
                  if isinstance(getattr(config, f, None), int)), 8)
    candidates = [(batch, width, frames), (batch, frames, width * getattr(config, "input_channels", 1)),
                  (batch, 3200)]
    try:
        encoder = model.get_encoder()
    except Exception as error:  # noqa: BLE001
        raise Unbuildable(f"{type(model).__name__} has no encoder to size its {name}: {error}")
    for shape in candidates:
        values = torch.randn(*shape, generator=gen)
        try:
            with torch.no_grad():
                encoder(**{name: values})
            return {name: values}
        except Exception:  # noqa: BLE001  (a shape this encoder does not take: try the next)
            continue
    raise Unbuildable(f"no {name} shape among {[list(s) for s in candidates]} runs {type(encoder).__name__}")
