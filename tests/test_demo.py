"""`make demo`'s every printed answer reads well: on its prompts neither plain generate() nor the shipped head's
speculative decoding repeats a unit of a few characters a dozen times in a row, in bf16 or float32 (real model,
marked `real`). The repetition check itself is shown to catch the loop the demo once printed."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
#: A unit of 1-8 characters, then the same unit 11 more times.
REPEATS = re.compile(r"(.{1,8}?)\1{11,}", re.DOTALL)


def _demo():
    spec = importlib.util.spec_from_file_location("demo", REPO / "examples" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("text, loops", [
    ("1. **1011111111111111111111111111111111111", True),
    ("ha" * 12, True),
    ("The sky is blue because air scatters blue light more than red light.", False),
    ("A cat's a gentle sigh,\nA cat's a gentle sigh,\nA cat's a gentle sigh.", False),
])
def test_the_repetition_check_catches_a_loop(text, loops):
    assert bool(REPEATS.search(text)) == loops


@pytest.mark.real
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_no_demo_answer_loops(dtype):
    from hf_specdec import smollm2
    from hf_specdec.drafters import resolve_drafter

    try:
        smollm2.gguf_path()
    except smollm2.SmolLM2NotInstalledError as error:
        pytest.skip(str(error))
    demo = _demo()
    target, tok = smollm2.load_smollm2(dtype)
    drafter = resolve_drafter(str(demo.DRAFTERS[0]))
    for prompt in demo.PROMPTS:
        inputs = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)
        start = inputs["input_ids"].shape[1]
        for extra in ({}, {"drafter": drafter, "tokenizer": tok}):
            out = target.generate(**inputs, max_new_tokens=96, do_sample=False, **extra)
            text = tok.decode(out[0, start:], skip_special_tokens=True)
            assert not REPEATS.search(text), (prompt, extra.keys(), text)
