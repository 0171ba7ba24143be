"""Tiny seeded causal LMs and a word-level tokenizer, built in memory (no downloads)."""

from __future__ import annotations

import copy

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers import Qwen2Config, Qwen2ForCausalLM

VOCAB = 96
PAD, BOS, EOS = 0, 1, 2
SPECIAL = {"pad_token_id": PAD, "bos_token_id": BOS, "eos_token_id": EOS}


def _finish(model: torch.nn.Module) -> torch.nn.Module:
    # Random init gives nearly flat next-token distributions; sharpen them so greedy choices and
    # acceptance rates behave like a trained model's instead of hinging on ties.
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model.eval()
    model.generation_config.pad_token_id = PAD
    model.generation_config.bos_token_id = BOS
    model.generation_config.eos_token_id = EOS
    return model


def llama(seed: int = 0, layers: int = 2, hidden: int = 64, vocab: int = VOCAB, max_positions: int = 256):
    """Llama shape with grouped-query attention (4 query heads, 2 KV heads)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions, **SPECIAL,
    )
    return _finish(LlamaForCausalLM(config))


def qwen2(seed: int = 0, layers: int = 2, hidden: int = 64, vocab: int = VOCAB):
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256, use_sliding_window=False,
        **SPECIAL,
    )
    return _finish(Qwen2ForCausalLM(config))


def gpt2(seed: int = 0, layers: int = 2, hidden: int = 64, vocab: int = VOCAB):
    """Learned absolute positions: wrong position ids show up as wrong tokens at once."""
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=4, n_positions=256, tie_word_embeddings=False, **SPECIAL)
    return _finish(GPT2LMHeadModel(config))


BUILDERS = {"llama": llama, "qwen2": qwen2, "gpt2": gpt2}


def perturbed(model: torch.nn.Module, scale: float, seed: int = 123) -> torch.nn.Module:
    """A copy of `model` with Gaussian noise on every weight: a drafter that agrees only part of the time."""
    torch.manual_seed(seed)
    noisy = copy.deepcopy(model)
    with torch.no_grad():
        for param in noisy.parameters():
            param.add_(torch.randn_like(param) * scale * param.std().clamp_min(1e-3))
    return noisy


def tokenizer(vocab: int = VOCAB) -> PreTrainedTokenizerFast:
    """Word-level tokenizer: ids 0-2 are <pad>, <s>, </s>; id i >= 3 is the word `w{i}`, except the last
    id, "abcdef", which StopStringCriteria uses to probe how tokens decode."""
    words = {"<pad>": PAD, "<s>": BOS, "</s>": EOS, **{f"w{i}": i for i in range(3, vocab - 1)}, "abcdef": vocab - 1}
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", padding_side="left"
    )


def prompts(batch: int, seed: int = 0, min_len: int = 3, max_len: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded random prompts of mixed lengths: (input_ids, attention_mask), [batch, max_len]."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (batch,), generator=gen)
    lengths[0] = max_len  # at least one unpadded row
    input_ids = torch.full((batch, max_len), PAD, dtype=torch.long)
    attention_mask = torch.zeros(batch, max_len, dtype=torch.long)
    for row, length in enumerate(lengths.tolist()):
        input_ids[row, max_len - length :] = torch.randint(3, VOCAB, (length,), generator=gen)
        attention_mask[row, max_len - length :] = 1
    return input_ids, attention_mask


#: Windowed attention, one family per way transformers builds its masks: one sliding mask for every layer
#: (Mistral), a mask per layer type from `layer_types` (Gemma 2 eager with softcapping, Gemma 3 sdpa,
#: GPT-OSS with attention sinks, Qwen2 with only some layers sliding), chunked attention (Llama 4).
WINDOWED = ("mistral", "gemma2", "gemma3_text", "gpt_oss", "qwen2", "llama4_text")


def windowed(model_type: str, window: int = 8, seed: int = 0, hidden: int = 64, vocab: int = VOCAB):
    """A 2-layer model of `model_type` whose attention sees at most `window` positions (Llama 4: chunks of
    `window`); layer 0 is windowed in every family, and the mixed families keep layer 1 full."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    size = dict(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=256,
        tie_word_embeddings=False,  # tied, Gemma's scaled embeddings make tiny models repeat one token
        **SPECIAL,
    )
    extra = {
        "mistral": dict(sliding_window=window),
        "gemma2": dict(sliding_window=window),
        "gemma3_text": dict(sliding_window=window, layer_types=["sliding_attention", "full_attention"]),
        "gpt_oss": dict(sliding_window=window, num_local_experts=4, num_experts_per_tok=2),
        "qwen2": dict(
            sliding_window=window, use_sliding_window=True, layer_types=["sliding_attention", "full_attention"]
        ),
        "llama4_text": dict(
            attention_chunk_size=window, num_local_experts=2, intermediate_size_mlp=2 * hidden, no_rope_layers=[1, 1]
        ),
    }[model_type]
    config = AutoConfig.for_model(model_type, **size, **extra)
    return _finish(AutoModelForCausalLM.from_config(config))
