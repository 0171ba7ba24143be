"""Runs anywhere in seconds: two tiny random Llama models built in memory, one drafting for the other.

Random models make poor drafters for each other, so the speed-up is nil; the point is the API and
the guarantee: the output equals the target's own greedy output, for a padded batch.
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import hf_specdec


def tiny(layers: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


target, drafter = tiny(layers=2, seed=0), tiny(layers=1, seed=0)
input_ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])  # left-padded batch
attention_mask = (input_ids != 0).long()

stats = hf_specdec.SpeculativeStats()
out = target.generate(input_ids, attention_mask=attention_mask, max_new_tokens=16, do_sample=False,
                      drafter=drafter, gamma=4, stats=stats)
plain = target.generate(input_ids, attention_mask=attention_mask, max_new_tokens=16, do_sample=False)
print(out)
print("equal to plain greedy:", torch.equal(out, plain))
print(stats.summary())
