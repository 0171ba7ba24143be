"""Drafter distillation: train a small drafter for any causal LM target from its own responses.

``distill(target_path, out_dir, ...)`` generates (or reuses) the data, trains, measures and saves a
``LlamaForCausalLM`` directory that ``AutoModelForCausalLM.from_pretrained`` loads. A reduced head
is stored as ``config.hf_specdec_vocab_subset`` (token ids the drafter may propose).
"""

from .evaluate import Agreement, evaluate_agreement, step_cost_ms
from .model import VOCAB_SUBSET_ATTR, build_drafter, head_logits, vocab_subset_of
from .pipeline import distill

__all__ = [
    "Agreement",
    "VOCAB_SUBSET_ATTR",
    "build_drafter",
    "distill",
    "evaluate_agreement",
    "head_logits",
    "step_cost_ms",
    "vocab_subset_of",
]
