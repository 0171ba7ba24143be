"""Loading a drafter (or target) and its tokenizer in one call: a local checkpoint, optionally int8.

Contract: `load_drafter(path, ...)` is what `generate(drafter="path")` loads: for a causal-LM checkpoint an
eval-mode model, for an EAGLE-1 / EAGLE-3 head directory a `FeatureDrafter`; both are read from local
files only. Anything else raises a typed error naming what was expected: a missing path, a directory that
holds neither, weights that do not fit their config, an unknown quantization or a missing backend.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path

import torch
from huggingface_hub import try_to_load_from_cache
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
)

from hf_specdec.drafters.feature import FeatureDrafter
from hf_specdec.eagle import SAFETENSORS, is_feature_head, load_feature_head
from hf_specdec.errors import (
    CheckpointNotFoundError,
    DrafterLoadError,
    QuantizationBackendError,
    UnknownQuantizationError,
)

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
    auto = _check_causal_lm_config(path, role)
    if quantization == "int8-bnb":
        # Only this exact per-call message is dropped; other bitsandbytes logs still reach the user.
        logging.getLogger("bitsandbytes.autograd._functions").addFilter(_cast_warning_filter)
    # Mismatched shapes are refused below with our error instead of transformers' RuntimeError.
    kwargs = {"local_files_only": True, "quantization_config": config, "output_loading_info": True,
              "ignore_mismatched_sizes": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if device is not None:  # "auto" or a dict: accelerate shards the model over devices
        kwargs["device_map"] = device if device == "auto" or isinstance(device, dict) else {"": str(device)}
    try:
        model, info = auto.from_pretrained(path, **kwargs)
    except OSError as error:  # a config.json without weights beside it
        raise DrafterLoadError(f"{role} {path!r}: {error}. {_expected(role)}") from error
    except ImportError as error:  # the backend is installed but cannot run here (no kernels, wrong torch)
        raise QuantizationBackendError(
            f"loading {role} {path!r} with quantization={quantization!r} failed: {error}. Try another "
            f"quantization ({sorted(QUANTIZATIONS)}) or None."
        ) from error
    # transformers would start these from random values; refuse rather than decode with an untrained model.
    unfit = sorted(info["missing_keys"]) + sorted(str(key[0]) if isinstance(key, tuple) else key
                                                  for key in info["mismatched_keys"])
    if unfit:
        raise DrafterLoadError(
            f"{role} {path!r}: its weights do not fit the {type(model).__name__} its config.json describes "
            f"(missing or of another shape: {unfit[:5]}{' ...' if len(unfit) > 5 else ''}). {_expected(role)}"
        )
    return model.eval()


def _expected(role: str) -> str:
    """What a directory for `role` should hold, for error messages."""
    model = ("a causal LM (or, for an encoder-decoder target, an encoder-decoder model) written by "
             "`model.save_pretrained(...)` (config.json and its weights)")
    if role != "drafter":
        return f"A {role} directory holds {model}."
    return (
        f"A drafter directory holds {model}, or an EAGLE-1 / EAGLE-3 feature head (config.json and {SAFETENSORS} "
        "or pytorch_model.bin with `fc.weight`, as `hf-specdec distill --kind feature` writes and SafeAILab/EAGLE "
        "publishes)."
    )


def _check_causal_lm_config(path: str, role: str):
    """The auto class that loads `path`: AutoModelForCausalLM, or AutoModelForSeq2SeqLM for a text encoder-decoder
    model (BART, T5, Marian: summarization and translation, docs/encoder-decoder.md); DrafterLoadError for others."""
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise DrafterLoadError(f"{role} {path!r} holds no config.json. {_expected(role)}")
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as error:  # no config.json, or a model_type transformers does not know
        raise DrafterLoadError(f"{role} {path!r} holds no config.json transformers can read ({error}). {_expected(role)}") from error
    if config.is_encoder_decoder and config.model_type in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return AutoModelForSeq2SeqLM
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise DrafterLoadError(
            f"{role} {path!r} holds a {config.model_type!r} model, which is not a causal LM "
            f"(AutoModelForCausalLM does not load it). {_expected(role)}"
        )
    return AutoModelForCausalLM


def load_drafter(
    path: str | os.PathLike,
    quantization: str | None = None,
    device: str | torch.device | dict | None = None,
    dtype: torch.dtype | str | None = None,
) -> PreTrainedModel | FeatureDrafter:
    """Loads a drafter in one call, ready to pass as `drafter=`: exactly what `generate(drafter="path")`
    loads (it calls this).

    Args:
        path: a causal-LM directory written by `save_pretrained` (or a hub id already downloaded), or a
            directory holding an EAGLE-1 / EAGLE-3 feature head (`hf_specdec.eagle`).
        quantization, device, dtype: as for `load_model`. A feature head is one small layer: it takes
            no quantization or device map (`DrafterLoadError`), goes to `device` (None: CPU) and loads in
            float32 unless `dtype` says otherwise ("auto": the dtype its checkpoint was saved in). Without a
            `dtype` it drafts in the target's half precision where the device computes it natively (bf16 on a
            CPU with avx512_bf16 / amx_bf16, bf16 and fp16 on CUDA: `FeatureDrafter.compute_head`); with one,
            always in that dtype.

    Returns:
        the causal LM in eval mode (a `PreTrainedModel`, as before heads were accepted), or a
        `FeatureDrafter` over the head.
    """
    if not is_feature_head(path):
        return load_model(path, quantization=quantization, device=device, dtype=dtype, role="drafter")
    if quantization is not None:
        raise DrafterLoadError(
            f"{os.fspath(path)!r} is a feature head (one layer over the target's own states); quantization="
            f"{quantization!r} applies to causal-LM drafters only. Load the head without quantization."
        )
    if device == "auto" or isinstance(device, dict):
        raise DrafterLoadError(
            f"{os.fspath(path)!r} is a feature head, which is not sharded: pass the target's device, not a "
            "device map."
        )
    head = load_feature_head(path, dtype=_head_dtype(path, dtype))
    # Without a dtype the head drafts in the target's half precision where that is computed natively (compute_head).
    return FeatureDrafter(head if device is None else head.to(device), match_target=dtype is None)


def _head_dtype(path: str | os.PathLike, dtype: torch.dtype | str | None) -> torch.dtype:
    """float32 for None (what `generate(drafter=head_path)` always used: heads are stored in bf16 only to be
    small), the checkpoint's dtype for "auto", else the dtype named."""
    if dtype is None:
        return torch.float32
    if dtype == "auto":
        saved = json.loads((Path(path) / "config.json").read_text())
        dtype = saved.get("dtype") or saved.get("torch_dtype") or "float32"
    named = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(named, torch.dtype):
        raise DrafterLoadError(f"dtype={dtype!r} is not a torch dtype; pass e.g. torch.float32, 'bfloat16' or 'auto'.")
    return named


def load_tokenizer(path: str | os.PathLike):
    """The tokenizer saved with a checkpoint (local files only); None for a directory without one."""
    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "tokenizer_config.json")):
        return None
    return AutoTokenizer.from_pretrained(path, local_files_only=True)
