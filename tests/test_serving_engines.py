"""The EAGLE-3 heads we save serve correctly in vLLM, SGLang and SafeAILab/EAGLE.

Each engine's loader is restated below as rules (read from its source, not copied from it): given a head's
config.json and its tensors, what the engine builds: the rotary base, the width `fc` expects, where the
token embeddings come from, which target states it feeds the head, which tensors reach a parameter, and
which target id each draft id means. The head is right in an engine when all of that equals what our own
loader builds from the same directory. The sources the rules restate:
  vLLM:    vllm/model_executor/models/llama_eagle3.py (Eagle3LlamaForCausalLM.load_weights and its LlamaModel),
           the model registry's EAGLE-3 names, and the GPU model runner's `eagle_aux_hidden_state_layer_ids`.
  SGLang:  python/sglang/srt/models/llama_eagle3.py (LlamaForCausalLMEagle3.load_weights) and the target
           models' `set_eagle3_layers_to_capture` (ids + 1; default 2, N // 2, N - 3).
  EAGLE:   SafeAILab/EAGLE eagle/model/cnets.py (Model.__init__, LlamaAttention._init_rope), ea_model.py
           (load_state_dict(strict=False)) and modeling_llama_kv.py (the three fixed layers).
Engines run the config through transformers; the rules assume transformers 4, where `rope_parameters`
means nothing and a missing `rope_theta` is 10,000.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import tiny_models
from hf_specdec.distill.feature_head import build_feature_head
from hf_specdec.eagle import load_feature_head, save_feature_head

SHIPPED = Path(__file__).resolve().parent.parent / "drafters" / "smollm2-135m-instruct-eagle3"
DEFAULT_ROPE_BASE = 10000.0


@dataclass(frozen=True)
class Target:
    """What an engine knows of the target a head serves."""

    num_layers: int
    hidden_size: int
    vocab_size: int


#: SmolLM2-135M-Instruct, the target of the shipped head (its config: 30 layers, width 576, 49,152 tokens).
SMOLLM2 = Target(num_layers=30, hidden_size=576, vocab_size=49152)


@dataclass
class Served:
    """What one engine builds from a head directory."""

    rope_base: float
    fc_input: int  # the width fc's weight must have
    embeddings: str  # "target" (the target's own) or "random"
    feature_layers: tuple[int, ...]  # hidden-state indices of the target it feeds the head
    loaded: set[str]  # the engine's parameters that received a tensor
    required: set[str]  # the engine's parameters that must receive one
    draft_to_target: torch.Tensor | None  # [draft_vocab] target id of each draft id


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path / "model.safetensors"), framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}


def _default_layers(target: Target) -> tuple[int, ...]:
    return (2, target.num_layers // 2, target.num_layers - 3)


def _rope_base(config: dict) -> float:
    return float(config.get("rope_theta", DEFAULT_ROPE_BASE))


def _fc_input(config: dict) -> int:
    return 3 * config.get("target_hidden_size", config["hidden_size"])


_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
          "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm", "hidden_norm")


def vllm(config: dict, tensors: dict[str, torch.Tensor], target: Target) -> Served:
    # The draft class comes from `architectures` through the registry's EAGLE-3 names.
    assert config["architectures"][0] in ("Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3")
    # Aux layers: the draft config's top-level ids, else the target's default; vLLM's id i is the residual
    # stream entering layer i, which is `output_hidden_states[i]`.
    layers = tuple(config.get("eagle_aux_hidden_state_layer_ids") or _default_layers(target))
    # Names: "midlayer." -> "layers.0."; t2d skipped; d2t -> draft_id_to_target_id; everything but lm_head
    # gains "model."; a name that is then no parameter raises (the loader indexes its parameter dict).
    params = {f"model.layers.0.{name}.weight" for name in _LAYER} | {"model.fc.weight", "model.norm.weight",
                                                                     "lm_head.weight", "model.embed_tokens.weight"}
    loaded, draft_to_target = set(), None
    for name, value in tensors.items():
        if name == "t2d":
            continue
        if name == "d2t":
            draft_to_target = torch.arange(value.shape[0]) + value
            continue
        name = name.replace("midlayer.", "layers.0.")
        name = name if name.startswith("lm_head") else "model." + name
        if name not in params:
            raise KeyError(f"vLLM: {name} is no parameter of Eagle3LlamaForCausalLM")
        loaded.add(name)
    # Without embed_tokens in the checkpoint, the drafter shares the target's.
    return Served(_rope_base(config), _fc_input(config), "target", layers, loaded,
                  params - {"model.embed_tokens.weight"}, draft_to_target)


def sglang(config: dict, tensors: dict[str, torch.Tensor], target: Target) -> Served:
    assert config["architectures"][0] == "LlamaForCausalLMEagle3", "SGLang picks the draft class by this name"
    assert config.get("draft_vocab_size") is not None, "without it SGLang scores the target's whole vocabulary"
    assert not config.get("tie_word_embeddings", False)
    # Aux layers: eagle_config's ids are layer outputs, captured as the stream entering layer id + 1.
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    layers = tuple(int(i) + 1 for i in ids) if ids is not None else _default_layers(target)
    # Names: d2t -> hot token ids; t2d skipped; a name is kept if it, or "model." + it, is a parameter,
    # and silently dropped otherwise (so "layers.0." weights never arrive).
    params = {f"model.midlayer.{name}.weight" for name in _LAYER} | {"model.fc.weight", "model.norm.weight",
                                                                     "lm_head.weight", "model.embed_tokens.weight"}
    loaded, draft_to_target = set(), None
    for name, value in tensors.items():
        if name == "d2t":
            draft_to_target = value + torch.arange(value.shape[0])
        elif name != "t2d":
            for candidate in (name, "model." + name):
                if candidate in params:
                    loaded.add(candidate)
                    break
    # The worker hands the target's embeddings to the draft.
    return Served(_rope_base(config), _fc_input(config), "target", layers, loaded,
                  params - {"model.embed_tokens.weight"}, draft_to_target)


def eagle_repo(config: dict, tensors: dict[str, torch.Tensor], target: Target) -> Served:
    # The rotary embedding: rope_scaling must be None (or name a "type" and "factor"); base rope_theta or 10,000.
    scaling = config.get("rope_scaling")
    assert scaling is None or {"type", "factor"} <= set(scaling), f"SafeAILab/EAGLE cannot read rope_scaling={scaling}"
    # The target's embeddings are loaded only when the config has no target_hidden_size; else the head's
    # own embed_tokens if saved, else they stay as initialised.
    if "target_hidden_size" not in config:
        embeddings = "target"
    else:
        embeddings = "target" if "embed_tokens.weight" in tensors else "random"
    params = {f"midlayer.{name}.weight" for name in _LAYER} | {"fc.weight", "norm.weight", "lm_head.weight",
                                                               "embed_tokens.weight", "d2t", "t2d"}
    shapes = {"d2t": (config["draft_vocab_size"],), "t2d": (config["vocab_size"],),
              "lm_head.weight": (config["draft_vocab_size"], config["hidden_size"])}
    for name, shape in shapes.items():  # load_state_dict(strict=False) still refuses another shape
        assert name not in tensors or tuple(tensors[name].shape) == shape, (name, tensors[name].shape, shape)
    loaded = {name for name in tensors if name in params}  # strict=False: other names are dropped silently
    d2t = tensors.get("d2t")
    draft_to_target = None if d2t is None else torch.arange(d2t.shape[0]) + d2t
    # modeling_llama_kv captures the stream entering layers 2, N // 2 and N - 3, whatever the config says.
    return Served(_rope_base(config), _fc_input(config), embeddings, _default_layers(target), loaded,
                  params - {"embed_tokens.weight"}, draft_to_target)


ENGINES = {"vLLM": vllm, "SGLang": sglang, "SafeAILab/EAGLE": eagle_repo}


def problems(path: Path, config: dict, target: Target, rope_base: float) -> list[str]:
    """How each engine's head differs from the one our loader builds from `path` (empty when it serves right)."""
    ours = load_feature_head(path)
    tensors = _tensors(path)
    found = []
    for engine, rules in ENGINES.items():
        try:
            served = rules(config, tensors, target)
        except (AssertionError, KeyError) as error:
            found.append(f"{engine}: refuses the head ({error})")
            continue
        if served.rope_base != rope_base:
            found.append(f"{engine}: rotary base {served.rope_base}, the target's is {rope_base}")
        if served.fc_input != tensors["fc.weight"].shape[1]:
            found.append(f"{engine}: fc expects {served.fc_input} inputs, the head has {tensors['fc.weight'].shape[1]}")
        if served.embeddings != "target":
            found.append(f"{engine}: token embeddings are {served.embeddings}, not the target's")
        if served.feature_layers != ours.feature_layers_for(target.num_layers):
            found.append(f"{engine}: feeds target states {served.feature_layers}, the head reads "
                         f"{ours.feature_layers_for(target.num_layers)}")
        if served.required - served.loaded:
            found.append(f"{engine}: never receives {sorted(served.required - served.loaded)}")
        if served.draft_to_target is None or not torch.equal(served.draft_to_target, ours.draft_ids()):
            found.append(f"{engine}: maps draft ids to other target ids than the head does")
    return found


@pytest.fixture(scope="module")
def tiny_target():
    model = tiny_models.llama(seed=0, layers=8)
    model.config.rope_parameters = {"rope_theta": 500000.0, "rope_type": "default"}  # not the engines' default
    return model


def _save(target, path: Path, feature_layers=None) -> tuple[Path, dict, Target]:
    head = build_feature_head(target, "eagle3", draft_vocab=list(range(5, 80)))
    if feature_layers is not None:
        head.config.hf_specdec_feature_layers = list(feature_layers)
    save_feature_head(head, path)
    text = target.config.get_text_config()
    return path, json.loads((path / "config.json").read_text()), Target(text.num_hidden_layers, text.hidden_size,
                                                                        text.vocab_size)


def test_a_saved_head_serves_in_vllm_sglang_and_the_eagle_repo(tiny_target, tmp_path):
    path, config, target = _save(tiny_target, tmp_path)
    assert problems(path, config, target, rope_base=500000.0) == []


def test_a_head_on_other_layers_tells_vllm_and_sglang_which(tiny_target, tmp_path):
    """The EAGLE repo always feeds its three default layers; the others read the config."""
    path, config, target = _save(tiny_target, tmp_path, feature_layers=(1, 4, 6))
    assert problems(path, config, target, rope_base=500000.0) == [
        "SafeAILab/EAGLE: feeds target states (2, 4, 5), the head reads (1, 4, 6)"
    ]


def test_the_shipped_head_serves_in_vllm_sglang_and_the_eagle_repo():
    config = json.loads((SHIPPED / "config.json").read_text())
    assert problems(SHIPPED, config, SMOLLM2, rope_base=100000.0) == []


def _as_written_before(config: dict) -> dict:
    """A config as our writer wrote it before these rules were restated: rope base nested only, target width
    given though equal, the layers under our own key only."""
    before = {key: value for key, value in config.items()
              if key not in ("rope_theta", "eagle_aux_hidden_state_layer_ids", "eagle_config")}
    before["target_hidden_size"] = config["hidden_size"]
    before["hf_specdec_feature_layers"] = config.get("eagle_aux_hidden_state_layer_ids")
    return before


def test_the_rules_catch_the_config_we_used_to_write(tiny_target, tmp_path):
    path, config, target = _save(tiny_target, tmp_path, feature_layers=(1, 4, 6))
    (path / "config.json").write_text(json.dumps(_as_written_before(config)))
    found = problems(path, _as_written_before(config), target, rope_base=500000.0)
    assert "vLLM: rotary base 10000.0, the target's is 500000.0" in found
    assert "SGLang: rotary base 10000.0, the target's is 500000.0" in found
    assert "SafeAILab/EAGLE: token embeddings are random, not the target's" in found
    assert "vLLM: feeds target states (2, 4, 5), the head reads (1, 4, 6)" in found
    assert "SGLang: feeds target states (2, 4, 5), the head reads (1, 4, 6)" in found


def test_sglang_drops_a_layers_0_head(tiny_target, tmp_path):
    path, config, target = _save(tiny_target, tmp_path)
    tensors = {name.replace("midlayer.", "layers.0."): value for name, value in _tensors(path).items()}
    served = sglang(config, tensors, target)
    assert served.required - served.loaded == {f"model.midlayer.{name}.weight" for name in _LAYER}
    assert vllm(config, tensors, target).required <= vllm(config, tensors, target).loaded  # vLLM renames both
