"""Every error hf_specdec raises, in one place.

Each subclasses the builtin a caller would catch and is raised before any decoding starts; messages
say what differs and how to fix it.
"""


class SpeculativeError(Exception):
    """Base class of hf_specdec's errors."""


class IncompatibleDrafterError(SpeculativeError, ValueError):
    """The drafter cannot verify against this target (vocabulary, special tokens, lengths, tokenizer)."""


class VocabMismatchError(IncompatibleDrafterError):
    """Drafter and target score different vocabularies."""


class SpecialTokenMismatchError(IncompatibleDrafterError):
    """Drafter and target disagree on bos/eos/pad token ids."""


class TokenizerMismatchError(IncompatibleDrafterError):
    """The tokenizers given for drafter and target differ in class or vocabulary map."""


class EarlyExitError(IncompatibleDrafterError):
    """`EarlyExit(k)` with a k the target cannot serve (k < 1, k >= its layer count) or a target whose final norm
    and LM head cannot be separated from its layers."""


class MaxLengthError(IncompatibleDrafterError):
    """The requested length does not fit in the drafter's (or target's) position embeddings."""


class InvalidGammaError(SpeculativeError, ValueError):
    """`gamma` is not a positive int (or a supported policy name)."""


class UnsupportedGenerationError(SpeculativeError, NotImplementedError):
    """A generate() option that speculative decoding does not support (beam search, hidden states...)."""


class InvalidInputError(SpeculativeError, ValueError):
    """Inputs generate() takes that the loop cannot decode exactly as given: padding that is not on the left of each
    row, `stop_strings` without the `tokenizer=` that turns them into tokens."""


class UnsupportedModelError(SpeculativeError, NotImplementedError):
    """A model or cache layout that the speculative loop cannot run (encoder-decoder, sliding window)."""


class CheckpointNotFoundError(SpeculativeError, FileNotFoundError):
    """A drafter (or the CLI's target) path that is neither a directory nor a downloaded hub model."""


class DrafterLoadError(SpeculativeError, ValueError):
    """A drafter (or the CLI's target) directory that holds neither a causal LM nor an EAGLE feature head,
    whose weights do not fit its config, or a load option that does not apply to what it holds."""


class UnknownQuantizationError(SpeculativeError, ValueError):
    """A quantization name that hf_specdec does not know."""


class QuantizationBackendError(SpeculativeError, ImportError):
    """The package that implements the requested quantization is not installed or cannot run here."""


class UnsupportedTreeError(UnsupportedGenerationError):
    """Draft trees (`TreeDraftPolicy`) where the loop cannot run them yet; use a chain policy meanwhile."""


class HeldOutLeakError(SpeculativeError, ValueError):
    """A held-out evaluation's requests overlap the training data (shared token runs or Magpie seeds)."""


class EngineBackendError(SpeculativeError, ImportError):
    """The package a data-generation engine needs (llama-cpp-python for `--engine llama-cpp`) is not installed."""


class EngineWeightsError(SpeculativeError, ValueError):
    """A data-generation engine has no weights for this target (no GGUF given or made), or weights whose
    tokenizer differs from the target's."""
