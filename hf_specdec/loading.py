"""Loading a drafter (or target) and its tokenizer in one call: a local checkpoint, optionally int8.

Contract: `load_drafter(path, quantization=...)` returns an eval-mode causal LM read from local files
only, or raises a typed error naming the fix before any weight is read (missing path, unknown
quantization, missing backend).
"""

from __future__ import annotations

import importlib.util
import logging
import os

import torch
from huggingface_hub import try_to_load_from_cache
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from hf_specdec.errors import CheckpointNotFoundError, QuantizationBackendError, UnknownQuantizationError

#: quantization name -> (pip package, import name) of the backend that implements it.
QUANTIZATIONS = {"int8": ("optimum-quanto", "optimum.quanto"), "int8-bnb": ("bitsandbytes", "bitsandbytes")}


class _DropBitsAndBytesCastWarning(logging.Filter):
    """bitsandbytes' int8 matmul logs this on every call with fp32 inputs (always, on CPU)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("MatMul8bitLt: inputs will be cast")


_cast_warning_filter = _DropBitsAndBytesCastWarning()


def _in_hub_cache(repo_id: str) -> bool:
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not even a valid hub id: a path that does not exist
        return False


def quantization_config(quantization: str | None):
    """The transformers quantization config for a quantization name, None for None."""
    if quantization is None:
        return None
    if quantization not in QUANTIZATIONS:
        raise UnknownQuantizationError(
            f"unknown quantization {quantization!r}; use one of {sorted(QUANTIZATIONS)} or None."
        )
    package, module = QUANTIZATIONS[quantization]
    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        raise QuantizationBackendError(
            f"quantization={quantization!r} needs {package}; `pip install {package}` (or hf_specdec[quant])."
        )
    if quantization == "int8":
        from transformers import QuantoConfig

        return QuantoConfig(weights="int8")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_8bit=True)


def load_model(
    path: str | os.PathLike,
    quantization: str | None = None,
    device: str | torch.device | dict | None = None,
    dtype: torch.dtype | str | None = None,
    role: str = "drafter",
) -> PreTrainedModel:
    """Loads a causal LM from a local directory (or a hub id already in the local cache).

    Args:
        path: a directory written by `save_pretrained`, or a hub id that is already downloaded.
        quantization: None, "int8" (optimum-quanto weights, any device) or "int8-bnb" (bitsandbytes
            LLM.int8()).
        device: where to put the model: a device, or "auto" / a device map dict to shard it over
            several devices with accelerate; None keeps from_pretrained's default (CPU).
        dtype: torch dtype of the unquantized parts; None keeps the checkpoint's.
        role: "drafter" or "target", only for error messages.

    Returns:
        the model, in eval mode.
    """
    config = quantization_config(quantization)
    path = os.fspath(path)
    if not os.path.isdir(path) and not _in_hub_cache(path):
        raise CheckpointNotFoundError(
            f"{role} {path!r} is neither a directory nor a downloaded hub model (hf_specdec never downloads): "
            "pass a directory written by `model.save_pretrained(...)`, or download the hub model first "
            "(`hf download <repo_id>`)."
        )
    if quantization == "int8-bnb":
        # Only this exact per-call message is dropped; other bitsandbytes logs still reach the user.
        logging.getLogger("bitsandbytes.autograd._functions").addFilter(_cast_warning_filter)
    kwargs = {"local_files_only": True, "quantization_config": config}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if device is not None:  # "auto" or a dict: accelerate shards the model over devices
        kwargs["device_map"] = device if device == "auto" or isinstance(device, dict) else {"": str(device)}
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except ImportError as error:  # the backend is installed but cannot run here (no kernels, wrong torch)
        raise QuantizationBackendError(
            f"loading {role} {path!r} with quantization={quantization!r} failed: {error}. Try another "
            f"quantization ({sorted(QUANTIZATIONS)}) or None."
        ) from error
    return model.eval()


def load_drafter(
    path: str | os.PathLike,
    quantization: str | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
) -> PreTrainedModel:
    """Loads a drafter in one call; what `generate(drafter="path/to/model")` uses. See `load_model`."""
    return load_model(path, quantization=quantization, device=device, dtype=dtype, role="drafter")


def load_tokenizer(path: str | os.PathLike):
    """The tokenizer saved with a checkpoint (local files only); None for a directory without one."""
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "tokenizer_config.json")):
        return None
    return AutoTokenizer.from_pretrained(path, local_files_only=True)
