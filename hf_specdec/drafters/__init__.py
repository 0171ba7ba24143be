"""What proposes tokens: a second model, prompt lookup, or anything implementing `Drafter`."""

from __future__ import annotations

import os

from transformers import PreTrainedModel

from hf_specdec.drafters.base import Draft, DraftContext, Drafter, DraftSession, StatelessDrafter, TargetFeatures
from hf_specdec.drafters.early_exit import EarlyExit
from hf_specdec.drafters.feature import FeatureDrafter
from hf_specdec.drafters.model import ModelDrafter
from hf_specdec.drafters.prompt_lookup import PromptLookupDrafter
from hf_specdec.drafters.translated import TranslatedDrafter

__all__ = [
    "Draft",
    "DraftContext",
    "DraftSession",
    "Drafter",
    "EarlyExit",
    "FeatureDrafter",
    "ModelDrafter",
    "PromptLookupDrafter",
    "StatelessDrafter",
    "TargetFeatures",
    "TranslatedDrafter",
    "resolve_drafter",
]


def resolve_drafter(drafter) -> Drafter:
    """Turns what a user passes as `drafter=` into a Drafter: a Drafter as is, a causal LM, the name
    "prompt_lookup", or a path: a causal-LM checkpoint or an EAGLE feature head directory, loaded by
    `hf_specdec.load_drafter` (the one loader for paths)."""
    if isinstance(drafter, Drafter):
        return drafter
    if isinstance(drafter, PreTrainedModel):
        return ModelDrafter(drafter)
    if isinstance(drafter, str) and drafter == "prompt_lookup":
        return PromptLookupDrafter()
    if isinstance(drafter, (str, os.PathLike)):
        from hf_specdec.loading import load_drafter  # loading imports this package

        return resolve_drafter(load_drafter(drafter))
    raise TypeError(
        "drafter must be a transformers causal LM, a path to one or to an EAGLE feature head directory, "
        "'prompt_lookup', or a hf_specdec Drafter (e.g. FeatureDrafter), "
        f"got {type(drafter).__name__}."
    )
