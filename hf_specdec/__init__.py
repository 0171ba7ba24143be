"""hf_specdec: lossless speculative decoding as a generate() keyword.

    import hf_specdec  # installs the keyword
    out = target.generate(**inputs, drafter=small_model, gamma=4, max_new_tokens=128)
"""

from hf_specdec.costs import reset_costs
from hf_specdec.cpu import pack_linears, unpack_linears
from hf_specdec.dispatch import install, is_installed, uninstall
from hf_specdec.drafters import Drafter, EarlyExit, FeatureDrafter, ModelDrafter, PromptLookupDrafter, TranslatedDrafter
from hf_specdec.errors import (
    CheckpointNotFoundError,
    DrafterLoadError,
    EarlyExitError,
    EngineBackendError,
    EngineWeightsError,
    HeldOutLeakError,
    IncompatibleDrafterError,
    InvalidGammaError,
    InvalidInputError,
    MaxLengthError,
    QuantizationBackendError,
    SpecialTokenMismatchError,
    SpeculativeError,
    TokenizerMismatchError,
    UnsupportedGenerationError,
    UnknownQuantizationError,
    UnsupportedModelError,
    UnsupportedTreeError,
    VocabMismatchError,
)
from hf_specdec.loading import load_drafter
from hf_specdec.loop import SpeculativeDecoderOnlyOutput
from hf_specdec.output import SpeculativeEncoderDecoderOutput
from hf_specdec.policy import CostAwareDraftPolicy, DraftPolicy, HeuristicDraftPolicy, TreeDraftPolicy
from hf_specdec.stats import SpeculativeStats


def reset_calibration() -> None:
    """Deprecated: the default no longer calibrates; `reset_costs()` forgets the step costs it measured."""
    import warnings

    warnings.warn("hf_specdec.reset_calibration() is now hf_specdec.reset_costs().", FutureWarning, stacklevel=2)
    reset_costs()


def speculative_generate(target, drafter, input_ids=None, gamma: int | str | DraftPolicy | None = None, **generate_kwargs):
    """`target.generate(input_ids, drafter=drafter, gamma=gamma, **generate_kwargs)` without patching
    generate(): same arguments, same return value."""
    from hf_specdec.dispatch import generate_with_drafter

    if input_ids is not None:
        generate_kwargs["inputs"] = input_ids
    return generate_with_drafter(target, drafter, gamma=gamma, **generate_kwargs)


install()

__all__ = [
    "CheckpointNotFoundError",
    "CostAwareDraftPolicy",
    "DraftPolicy",
    "Drafter",
    "DrafterLoadError",
    "EarlyExit",
    "EarlyExitError",
    "EngineBackendError",
    "EngineWeightsError",
    "FeatureDrafter",
    "HeldOutLeakError",
    "HeuristicDraftPolicy",
    "IncompatibleDrafterError",
    "InvalidGammaError",
    "InvalidInputError",
    "MaxLengthError",
    "ModelDrafter",
    "QuantizationBackendError",
    "PromptLookupDrafter",
    "SpecialTokenMismatchError",
    "SpeculativeDecoderOnlyOutput",
    "SpeculativeEncoderDecoderOutput",
    "SpeculativeError",
    "SpeculativeStats",
    "TokenizerMismatchError",
    "TranslatedDrafter",
    "TreeDraftPolicy",
    "UnknownQuantizationError",
    "UnsupportedGenerationError",
    "UnsupportedModelError",
    "UnsupportedTreeError",
    "VocabMismatchError",
    "install",
    "is_installed",
    "load_drafter",
    "pack_linears",
    "reset_calibration",
    "reset_costs",
    "speculative_generate",
    "uninstall",
    "unpack_linears",
]
