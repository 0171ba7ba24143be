"""The models of this folder's scripts: SmolLM2-135M-Instruct, the shipped independent drafter, and the unrelated drafter
the bench checks the default with (`hf_specdec.bench.models.unrelated_drafter`), all in one dtype."""
import torch
from transformers import AutoModelForCausalLM

from hf_specdec.bench.models import DEFAULT_DRAFTER, unrelated_drafter
from hf_specdec.smollm2 import load_smollm2


def load(dtype: torch.dtype):
    """(target, tokenizer, independent drafter, unrelated drafter)."""
    target, tokenizer = load_smollm2(dtype)
    drafter = AutoModelForCausalLM.from_pretrained(DEFAULT_DRAFTER, dtype=dtype).eval()
    return target, tokenizer, drafter, unrelated_drafter(drafter)
