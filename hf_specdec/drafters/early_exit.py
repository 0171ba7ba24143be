"""Self-speculation (LayerSkip): the target's own first k layers, its final norm and its LM head draft.

Contract: `EarlyExit(k)` holds only k. Each call views the target through `early_exit_view`: a model object
that shares every weight with the target (no copy) but runs k of its decoder layers, with its own config copy,
so the target and other threads never see a changed config. Where the target allows (`cache.prefix_refusal`),
chains draft on the target's own cache and the verification skips layers 0..k-1 for the drafted tokens
(`cache.SharedPrefix`); elsewhere, and for trees, the view drafts like any causal-LM drafter with its own k-layer cache.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import PreTrainedModel

from hf_specdec.cache import CachedModel, SharedPrefix, prefix_refusal, share_prefix
from hf_specdec.drafters.base import Draft, DraftContext, Drafter
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

    def start(self, target, batch_size: int, device: torch.device) -> "EarlyExitDrafting":
        return EarlyExitDrafting(CachedModel(early_exit_view(target, self.num_layers), batch_size, device), target,
                                self.num_layers)


class EarlyExitDrafting(ModelDraftSession):
    """One call's drafting with the target's first k layers. Chains draft on the target's own cache where it allows
    (`SharedPrefix`, taken at the first chain from `DraftContext.target`): the drafts' keys and values in layers
    0..k-1 are the target's, and its verification runs those layers only for each row's last draft. Trees and the
    prompt's scores (`score_prompt`) use a k-layer cache of the drafter's own, as any drafter model does."""

    def __init__(self, cached: CachedModel, target, num_layers: int):
        super().__init__(cached)
        self.target = target
        self.num_layers = num_layers
        _, decoder, layers_name = decoder_layers(target)
        self.layers = list(getattr(decoder, layers_name))
        # Asked of the target's class and config when the call starts, before any forward.
        self.shares = prefix_refusal(target, self.layers[:num_layers]) is None
        self.prefix: SharedPrefix | None = None
        self.feeding = cached  # the CachedModel this draft's forwards go to

    @property
    def num_forwards(self) -> int:
        return self.cached.num_forwards + (self.prefix.drafter.num_forwards if self.prefix is not None else 0)

    def propose(self, ctx: DraftContext, num_tokens: torch.Tensor) -> Draft:
        if self.prefix is None and self.shares and ctx.target is not None and ctx.target.model is self.target:
            self.prefix = share_prefix(ctx.target, self.layers, self.num_layers, lambda layers: _view(self.target, layers))
            self.shares = self.prefix is not None
        if self.prefix is None:
            return super().propose(ctx, num_tokens)
        self.prefix.begin()
        self.feeding = self.prefix.drafter
        try:
            return super().propose(ctx, num_tokens)
        finally:
            self.feeding = self.cached
            self.proposed = False  # the drafter's own cache holds nothing of this draft; the target's rollback drops it

    def _draft_logits(self, ctx: DraftContext, rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        logits, _ = self.feeding.forward(ctx.sequences, ctx.pad_lens, torch.where(rows, at, ctx.lens), 1, at)
        return logits


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
    return _view(model, list(getattr(decoder, layers_name))[:num_layers])


def _view(model: PreTrainedModel, layers: list[nn.Module]) -> PreTrainedModel:
    """`model` running the decoder `layers` (its own, or modules wrapping them, in order) instead of its own list: shallow
    copies from the root down to the decoder, and a config copy whose `num_hidden_layers` (and `layer_types`) count
    `layers`."""
    path, decoder, layers_name = decoder_layers(model)
    config = copy.deepcopy(model.config)
    text_config = config.get_text_config(decoder=True)
    text_config.num_hidden_layers = len(layers)
    if getattr(text_config, "layer_types", None) is not None:
        text_config.layer_types = list(text_config.layer_types)[: len(layers)]
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
    decoder_view._modules[layers_name] = nn.ModuleList(layers)
    return view
