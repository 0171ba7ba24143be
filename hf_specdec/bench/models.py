"""The benchmarked pair: SmolLM2-135M-Instruct and its drafter (the shipped one, a path, or a stand-in).

Contract: `load_pair(drafter_path)` returns (target, drafter, tokenizer, drafter_source); when the
drafter directory does not exist yet, the drafter is `stand_in_drafter(target)`, a truncated copy of
the target (acceptance of a few percent: it checks the plumbing, it measures nothing), and
`drafter_source` says so. `unrelated_drafter(drafter)` is the never-right drafter of the default's checks.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedModel

from hf_specdec.drafters.base import forget_acceptance

#: Where the distilled drafter and the feature head for SmolLM2-135M-Instruct are shipped (repo root).
DEFAULT_DRAFTER = "drafters/smollm2-135m-instruct"
DEFAULT_FEATURE_DRAFTER = "drafters/smollm2-135m-instruct-eagle3"


def stand_in_drafter(target: PreTrainedModel, num_layers: int = 2) -> PreTrainedModel:
    """A Llama drafter made of the target's embeddings, first `num_layers` layers, final norm and head."""
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[:num_layers]
    drafter = LlamaForCausalLM(config)
    missing, unexpected = drafter.load_state_dict(target.state_dict(), strict=False)
    # Layers past `num_layers` are unexpected by design; everything the drafter has must come from the target.
    if set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"stand-in drafter: weights missing from the target: {missing}")
    drafter.tie_weights()
    drafter.generation_config = copy.deepcopy(target.generation_config)
    return drafter.eval()


def unrelated_drafter(drafter: PreTrainedModel, seed: int = 0) -> PreTrainedModel:
    """A drafter that knows nothing: `drafter`'s architecture, dtype and generation config with fresh random weights
    (seeded; same vocabulary). It declares no acceptance (the drafter's `hf_specdec_acceptance` is not its own), so the
    default starts it from 0.5, as any drafter nobody measured."""
    torch.manual_seed(seed)
    config = copy.deepcopy(drafter.config)
    forget_acceptance(config)
    model = type(drafter)(config).to(next(drafter.parameters()).dtype).eval()
    model.generation_config = copy.deepcopy(drafter.generation_config)
    return model


def load_pair(drafter_path: str | Path = DEFAULT_DRAFTER, dtype: torch.dtype = torch.float32):
    """(target, drafter, tokenizer, drafter_source) for the real benchmark; the target in `dtype`, the
    drafter in float32 (the fastest here for a small model on CPU)."""
    from hf_specdec.loading import load_drafter
    from hf_specdec.smollm2 import load_smollm2

    target, tokenizer = load_smollm2(dtype)
    if Path(drafter_path).is_dir():
        return target, load_drafter(drafter_path, dtype=torch.float32), tokenizer, str(drafter_path)
    source = f"stand-in: first 2 of the target's {target.config.num_hidden_layers} layers ({drafter_path} not found)"
    return target, stand_in_drafter(target), tokenizer, source
