"""Feature heads on disk, in the layouts SafeAILab/EAGLE publishes and vLLM / SGLang load.

Contract: `load_feature_head(path)` reads a local directory (config.json plus model.safetensors, or
pytorch_model.bin through `torch.load(weights_only=True)`) holding an EAGLE-1 or EAGLE-3 head and
returns a `FeatureHead`; `save_feature_head(head, path)` writes one in the same layout, so the heads
`hf-specdec distill --kind feature` trains load in those engines too. `is_feature_head(path)` tells a
head directory from a causal-LM one by its weight names. Nothing is downloaded.

Layouts, read from SafeAILab/EAGLE (eagle/model/cnets.py, cnets1.py, ea_model.py), vLLM
(vllm/model_executor/models/llama_eagle.py, llama_eagle3.py) and SGLang
(python/sglang/srt/models/llama_eagle.py, llama_eagle3.py):
  EAGLE-1: `fc.weight` [H, 2H] (+ `fc.bias` when config `bias` is not false), `layers.0.self_attn.*`,
           `layers.0.mlp.*`, `layers.0.post_attention_layernorm.weight` (no input norm); the target's
           LM head scores its output.
  EAGLE-3: `fc.weight` [H, 3H], `midlayer.self_attn.*` (q/k/v read 2H), `midlayer.mlp.*`,
           `midlayer.{input_layernorm, hidden_norm, post_attention_layernorm}.weight`, `norm.weight`,
           `lm_head.weight` [draft_vocab, H], `d2t` [draft_vocab] (draft id d is target id d + d2t[d]),
           `t2d` [vocab] bool (training only). Community checkpoints may say `layers.0.` for `midlayer.`.
  Both may carry `embed_tokens.weight`; the target's embeddings are used instead.
Which target states a head reads (hidden-state indices, as `output_hidden_states` counts them): a top-level
`eagle_aux_hidden_state_layer_ids` (vLLM's convention); else `eagle_config.eagle_aux_hidden_state_layer_ids`
(layer outputs, so index + 1: SGLang's); else `hf_specdec_feature_layers` (older heads of ours); else the
published default (EAGLE-3: 2, N // 2, N - 3; EAGLE-1: the last, normalized state).
`published_config` writes what those engines read: a top-level `rope_theta`, `target_hidden_size` only where
it differs from `hidden_size` (SafeAILab/EAGLE skips loading the target's embeddings when it is present),
and the feature layers in both engines' keys. tests/test_serving_engines.py restates their rules.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

from hf_specdec.drafters.feature import FeatureHead
from hf_specdec.errors import CheckpointNotFoundError, IncompatibleDrafterError

SAFETENSORS, PICKLED = "model.safetensors", "pytorch_model.bin"

#: our parameter names -> the published EAGLE-3 / EAGLE-1 names (the decoder layer's prefix differs).
_LAYER_PARAMS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _published_name(name: str, kind: str) -> str:
    layer = "midlayer." if kind == "eagle3" else "layers.0."
    first = name.split(".")[0]
    if first in _LAYER_PARAMS:
        return f"{layer}self_attn.{name}"
    if first in ("mlp", "post_attention_layernorm", "input_layernorm", "hidden_norm"):
        return f"{layer}{name}"
    return name  # fc, norm, lm_head, d2t


def _weights_file(path: Path) -> Path:
    for name in (SAFETENSORS, PICKLED):
        if (path / name).is_file():
            return path / name
    raise CheckpointNotFoundError(
        f"{path} has no {SAFETENSORS} or {PICKLED}; a feature head is one file (sharded heads are not supported)."
    )


def _weight_names(path: Path) -> set[str]:
    file = _weights_file(path)
    if file.name == SAFETENSORS:
        with safe_open(str(file), framework="pt") as handle:
            return set(handle.keys())
    return set(torch.load(file, map_location="cpu", weights_only=True))


def is_feature_head(path: str | os.PathLike) -> bool:
    """True for a directory holding an EAGLE head (its weights include `fc.weight`)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        return False
    try:
        return "fc.weight" in _weight_names(path)
    except CheckpointNotFoundError:
        return False


def _feature_layers(raw: dict) -> list[int] | None:
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    if top is not None:
        return [int(layer) for layer in top]
    nested = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if nested is not None:
        return [int(layer) + 1 for layer in nested]  # layer outputs -> hidden-state indices
    if raw.get("hf_specdec_feature_layers") is not None:
        return [int(layer) for layer in raw["hf_specdec_feature_layers"]]
    return None


def published_config(config: LlamaConfig, kind: str) -> dict:
    """`config` (a head's) as the dict vLLM, SGLang and SafeAILab/EAGLE read from config.json."""
    published = config.to_dict()
    rope = published.get("rope_parameters") or {}
    if "rope_theta" in rope:  # transformers 5 nests it; the engines' loaders read it at the top level
        published["rope_theta"] = rope["rope_theta"]
        if rope.get("rope_type", "default") != "default":  # the transformers-4 spelling of a scaled rope
            published["rope_scaling"] = {"type": rope["rope_type"], **{k: v for k, v in rope.items() if k != "rope_theta"}}
    if published.get("target_hidden_size") == published["hidden_size"]:
        del published["target_hidden_size"]
    layers = published.pop("hf_specdec_feature_layers", None)
    if kind == "eagle3" and layers is not None:
        published["eagle_aux_hidden_state_layer_ids"] = [int(layer) for layer in layers]  # vLLM: hidden-state indices
        published["eagle_config"] = {  # SGLang: layer outputs (index - 1)
            "eagle_aux_hidden_state_layer_ids": [int(layer) - 1 for layer in layers], "use_aux_hidden_state": True,
        }
    elif layers is not None:
        published["hf_specdec_feature_layers"] = [int(layer) for layer in layers]
    return published


def load_feature_head(path: str | os.PathLike, dtype: torch.dtype = torch.float32) -> FeatureHead:
    """The FeatureHead stored in `path` (EAGLE-1 or EAGLE-3 layout), in `dtype`, eval mode."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise CheckpointNotFoundError(f"{path} has no config.json: not a feature head directory.")
    file = _weights_file(path)
    if file.name == SAFETENSORS:
        weights = load_file(str(file))
    else:
        weights = torch.load(file, map_location="cpu", weights_only=True)
    # Community EAGLE-3 heads and every EAGLE-1 head name the decoder layer "layers.0.": read both as one.
    weights = {"midlayer." + name[len("layers.0."):] if name.startswith("layers.0.") else name: value
               for name, value in weights.items()}
    if "fc.weight" not in weights:
        raise IncompatibleDrafterError(f"{path} is not an EAGLE head: its weights have no fc.weight.")
    raw = json.loads((path / "config.json").read_text())
    # EAGLE-3 heads have their own LM head and vocabulary map; EAGLE-1 heads have neither.
    kind = "eagle3" if "lm_head.weight" in weights or "d2t" in weights else "eagle1"
    config = LlamaConfig(**{key: value for key, value in raw.items() if key != "hf_specdec_kind"})
    config.hf_specdec_kind = kind
    config.hf_specdec_feature_layers = _feature_layers(raw)
    if kind == "eagle3":
        config.draft_vocab_size = weights["lm_head.weight"].shape[0]
    head = FeatureHead(config, fc_bias="fc.bias" in weights)
    mine = {}
    for name in head.state_dict():
        published = _published_name(name, "eagle3")  # "layers.0." was mapped to "midlayer." above
        if published in weights:
            mine[name] = weights[published]
    if kind == "eagle3" and "d2t" not in weights:
        mine["d2t"] = torch.zeros(config.draft_vocab_size, dtype=torch.long)  # draft ids are target ids
    missing = set(head.state_dict()) - set(mine)
    if missing:
        raise IncompatibleDrafterError(f"{path}: the {kind} head lacks {sorted(missing)}.")
    head.load_state_dict({name: value.to(head.state_dict()[name].dtype) for name, value in mine.items()}, strict=False)
    return head.to(dtype).eval()


def save_feature_head(head: FeatureHead, path: str | os.PathLike, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Writes `head` to `path` in its published layout (`published_config` + model.safetensors, weights in
    `dtype`, decoder layer under `midlayer.`), with `t2d` for engines that expect it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, value in head.state_dict().items():
        tensors[_published_name(name, head.kind)] = value if name == "d2t" else value.to(dtype)
    if head.kind == "eagle3":
        t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
        t2d[head.draft_ids()] = True
        tensors["t2d"] = t2d
    save_file({name: value.contiguous() for name, value in tensors.items()}, str(path / SAFETENSORS))
    config = published_config(head.config, head.kind)
    config["torch_dtype"] = str(dtype).removeprefix("torch.")
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path
