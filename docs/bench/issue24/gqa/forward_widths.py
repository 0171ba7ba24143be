"""Session l (issue 24): one cached forward of SmolLM2-135M-Instruct over 1-8 new tokens a row, with transformers'
sdpa (keys and values repeated per query head) and with hf_specdec's packed grouped queries (hf_specdec.attention),
the same inputs for both; 200 cached tokens, a 2D attention mask with 5 padding columns on row 0, medians of 10.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/gqa/forward_widths.py DTYPE BATCH
"""
import statistics
import sys
import time

import torch
from transformers import DynamicCache

import hf_specdec  # noqa: F401  (installs the packed sdpa)
from hf_specdec.attention import packing_gqa
from hf_specdec.cpu import describe
from hf_specdec.smollm2 import load_smollm2

dtype, batch = getattr(torch, sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
cached = 200
prompt = torch.randint(0, 40000, (batch, cached), generator=torch.Generator().manual_seed(0))


@torch.no_grad()
def forward_ms(tokens: int, packed: bool) -> tuple[float, torch.Tensor]:
    cache = DynamicCache(config=target.config)
    target(prompt, past_key_values=cache, use_cache=True)
    new = torch.randint(0, 40000, (batch, tokens), generator=torch.Generator().manual_seed(tokens))
    mask = torch.ones(batch, cached + tokens, dtype=torch.long)
    mask[0, :5] = 0
    times = []
    for _ in range(10):
        start = time.perf_counter()
        if packed:
            with packing_gqa():
                logits = target(new, past_key_values=cache, use_cache=True, attention_mask=mask).logits
        else:
            logits = target(new, past_key_values=cache, use_cache=True, attention_mask=mask).logits
        times.append(time.perf_counter() - start)
        cache.crop(-tokens)
    return 1000 * statistics.median(times), logits


print(f"# {describe()}; {sys.argv[1]}, batch {batch}, {cached} cached tokens, ms per forward (median of 10)")
for tokens in (1, 2, 4, 8):
    (plain, expected), (packed, logits) = forward_ms(tokens, False), forward_ms(tokens, True)
    print(f"  {tokens} tokens a row: repeat_kv {plain:.2f}, packed {packed:.2f} ({packed / plain:.3f}), "
          f"max |logit difference| {(logits - expected).abs().max().item():.2e}", flush=True)
