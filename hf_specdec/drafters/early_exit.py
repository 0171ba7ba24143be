"""Self-speculation (LayerSkip): the target's own first k layers, its final norm and its LM head draft.

Contract: `EarlyExit(k)` holds only k. Each call views the target through `early_exit_view`: a model object
that shares every weight with the target (no copy) but runs k of its decoder layers, with its own config copy,
so the target and other threads never see a changed config. The view drafts like any causal-LM drafter
(its own k-layer cache per call, chains and trees).
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import PreTrainedModel

from hf_specdec.cache import CachedModel
from hf_specdec.drafters.base import Drafter
from hf_specdec.drafters.model import ModelDraftSession
from hf_specdec.errors import EarlyExitError


class EarlyExit(Drafter):
    """Drafts with the target's first `num_layers` decoder layers followed by its final norm and LM head.

    No second model and no weight copy: the draft costs about k / N of a target forward per token (plus the
    head). Pays where early layers already predict the next token often, as in models trained for it
    (LayerSkip checkpoints); a model trained without early-exit loss accepts little (docs/results.md).
    """

    def __init__(self, num_layers: int):
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise EarlyExitError(
                f"EarlyExit needs a positive number of layers to draft with, got {num_layers!r}; e.g. EarlyExit(4)."
            )
        self.num_layers = num_layers

    def __repr__(self) -> str:
        return f"EarlyExit({self.num_layers})"

    def check_compatible(self, target, generation_config, tokenizer=None, drafter_tokenizer=None) -> int:
        early_exit_view(target, self.num_layers)  # raises EarlyExitError for a k or a model it cannot serve
        return target.config.get_text_config().vocab_size

    def start(self, target, batch_size: int, device: torch.device) -> ModelDraftSession:
        return ModelDraftSession(CachedModel(early_exit_view(target, self.num_layers), batch_size, device))


def decoder_layers(model: PreTrainedModel) -> tuple[str, nn.Module, str]:
    """(the decoder's dotted path in `model`, the decoder, the name of its ModuleList of decoder layers), found by
    asking the model (`get_decoder`) and its config (`num_hidden_layers`); EarlyExitError if it has none."""
    name = type(model).__name__
    text_config = model.config.get_text_config(decoder=True)
    num_layers = getattr(text_config, "num_hidden_layers", None)
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    if decoder is None or not num_layers:
        raise EarlyExitError(f"{name} exposes no decoder with a layer count (get_decoder, num_hidden_layers), so its "
                             "first layers cannot draft alone; use another drafter.")
    lists = [child for child, module in decoder.named_children()
             if isinstance(module, nn.ModuleList) and len(module) == num_layers]
    path = next((path for path, module in model.named_modules() if module is decoder), None)
    if len(lists) != 1 or path is None:
        raise EarlyExitError(
            f"{name}'s decoder holds {'no' if not lists else 'several'} lists of its {num_layers} layers, so its final "
            "norm and head cannot be separated from them; use another drafter."
        )
    if model.get_output_embeddings() is None:
        raise EarlyExitError(f"{name} has no LM head to score early hidden states with; use another drafter.")
    if getattr(text_config, "num_kv_shared_layers", 0):  # later layers read earlier layers' caches
        raise EarlyExitError(f"{name} shares key/value caches between layers; its first layers cannot run alone. "
                             "Use another drafter.")
    if getattr(text_config, "hidden_size_per_layer_input", 0):  # embeddings made for every layer (Gemma 3n, 4)
        raise EarlyExitError(f"{name} embeds each token once per decoder layer, sized by its layer count, so its "
                             "first layers cannot run alone; use another drafter.")
    return path, decoder, lists[0]


def early_exit_view(model: PreTrainedModel, num_layers: int) -> PreTrainedModel:
    """A model that runs `model`'s first `num_layers` decoder layers, then its final norm and LM head: shallow
    copies of the modules from the root down to the decoder (their other children, parameters and buffers are
    `model`'s own objects), a config copy with `num_hidden_layers = num_layers` (and its `layer_types` cut),
    and the first layers in a new ModuleList. Raises EarlyExitError for num_layers outside [1, N - 1]."""
    path, decoder, layers_name = decoder_layers(model)
    total = len(getattr(decoder, layers_name))
    if not 1 <= num_layers < total:
        raise EarlyExitError(
            f"EarlyExit({num_layers}) needs between 1 and {total - 1} layers: {type(model).__name__} has {total} "
            f"decoder layers (all {total} would draft with the target itself); pick a smaller k, e.g. "
            f"EarlyExit({max(1, total // 4)})."
        )
    config = copy.deepcopy(model.config)
    text_config = config.get_text_config(decoder=True)
    text_config.num_hidden_layers = num_layers
    if getattr(text_config, "layer_types", None) is not None:
        text_config.layer_types = list(text_config.layer_types)[:num_layers]
    originals = {id(model.config): config, id(model.config.get_text_config(decoder=True)): text_config}

    def shallow(module: nn.Module) -> nn.Module:
        clone = copy.copy(module)
        clone._modules = dict(module._modules)  # the clone's children can change without touching `module`
        own = getattr(module, "config", None)
        if own is not None and id(own) in originals:
            clone.config = originals[id(own)]
        return clone

    view = shallow(model)
    parent = view
    for part in path.split(".") if path else ():
        child = shallow(parent._modules[part])
        parent._modules[part] = child
        parent = child
    decoder_view = parent if path else view
    decoder_view._modules[layers_name] = nn.ModuleList(list(getattr(decoder, layers_name))[:num_layers])
    return view
