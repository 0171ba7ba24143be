"""What proposes tokens: a second model today; anything implementing `Drafter` tomorrow."""

from __future__ import annotations

from transformers import PreTrainedModel

from hf_specdec.drafters.base import Draft, DraftContext, Drafter
from hf_specdec.drafters.model import ModelDrafter

__all__ = ["Draft", "DraftContext", "Drafter", "ModelDrafter", "resolve_drafter"]


def resolve_drafter(drafter) -> Drafter:
    """Turns what a user passes as `drafter=` into a Drafter."""
    if isinstance(drafter, Drafter):
        return drafter
    if isinstance(drafter, PreTrainedModel):
        return ModelDrafter(drafter)
    raise TypeError(
        f"drafter must be a transformers causal LM or a hf_specdec Drafter, got {type(drafter).__name__}."
    )
