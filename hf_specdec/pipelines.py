"""`drafter=` in transformers' text-generation and automatic-speech-recognition pipelines:
`pipe(prompt, drafter=draft, gamma=4)`.

Contract: TextGenerationPipeline already forwards kwargs it does not know (at construction or per call)
to generate(); `install()` adds only what generate() cannot know: the pipeline's tokenizer as
`tokenizer=` (for the drafter compatibility check), and a drafter given as a path loaded once per
pipeline (with its own tokenizer when the checkpoint has one), not once per batch. The loaded drafter
is shared by every call of the pipeline, which drafters allow (their per-call state lives in the call). The
speech-recognition pipeline hands generate() every keyword it does not know already; it gains the load-once of path
drafters (a distil-whisper decoder checkpoint).
"""

from __future__ import annotations

import os
import threading

from transformers import AutomaticSpeechRecognitionPipeline, TextGenerationPipeline

from hf_specdec.loading import load_drafter, load_tokenizer

_original_sanitize_parameters = None
_original_asr_sanitize_parameters = None


_LOAD_LOCK = threading.Lock()


def _load_path_drafter(pipe: TextGenerationPipeline, path: str | os.PathLike):
    """(drafter, tokenizer or None) of a drafter directory (`load_drafter`: a causal LM or a feature head,
    on the target's device); cached on the pipeline, so calling it in a loop loads the checkpoint once."""
    key = os.fspath(path)
    with _LOAD_LOCK:  # a pipeline shared by threads: their first calls load it once, not once each
        cache = pipe.__dict__.setdefault("_hf_specdec_drafters", {})
        if key not in cache:
            cache[key] = (load_drafter(key, device=pipe.model.device), load_tokenizer(key))
        return cache[key]


def _sanitize_parameters(self: TextGenerationPipeline, **kwargs):
    preprocess_params, forward_params, postprocess_params = _original_sanitize_parameters(self, **kwargs)
    drafter = forward_params.get("drafter")
    if drafter is not None:
        if isinstance(drafter, (str, os.PathLike)) and drafter != "prompt_lookup":
            forward_params["drafter"], drafter_tokenizer = _load_path_drafter(self, drafter)
            if drafter_tokenizer is not None:
                forward_params.setdefault("drafter_tokenizer", drafter_tokenizer)
        forward_params.setdefault("tokenizer", self.tokenizer)
    return preprocess_params, forward_params, postprocess_params


def _asr_sanitize_parameters(self: AutomaticSpeechRecognitionPipeline, **kwargs):
    preprocess_params, forward_params, postprocess_params = _original_asr_sanitize_parameters(self, **kwargs)
    drafter = forward_params.get("drafter")
    if isinstance(drafter, (str, os.PathLike)) and drafter != "prompt_lookup":
        forward_params["drafter"], _ = _load_path_drafter(self, drafter)
    return preprocess_params, forward_params, postprocess_params


def install() -> None:
    """Makes every text-generation pipeline hand its tokenizer (and loaded path drafters) to generate(), and every
    speech-recognition pipeline its loaded path drafters. Idempotent."""
    global _original_sanitize_parameters, _original_asr_sanitize_parameters
    if _original_sanitize_parameters is not None:
        return
    _original_sanitize_parameters = TextGenerationPipeline._sanitize_parameters
    TextGenerationPipeline._sanitize_parameters = _sanitize_parameters
    _original_asr_sanitize_parameters = AutomaticSpeechRecognitionPipeline._sanitize_parameters
    AutomaticSpeechRecognitionPipeline._sanitize_parameters = _asr_sanitize_parameters


def uninstall() -> None:
    global _original_sanitize_parameters, _original_asr_sanitize_parameters
    if _original_sanitize_parameters is None:
        return
    TextGenerationPipeline._sanitize_parameters = _original_sanitize_parameters
    AutomaticSpeechRecognitionPipeline._sanitize_parameters = _original_asr_sanitize_parameters
    _original_sanitize_parameters = _original_asr_sanitize_parameters = None
