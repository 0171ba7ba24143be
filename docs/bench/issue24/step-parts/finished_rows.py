"""Session s (issue 24): how many row-steps of a greedy batch are active (rows that hit EOS early stay in the batch, in
generate() and in our loop) on the bench's 8 chat prompts, 128 new tokens, and a plain forward's cost by batch size
(1 token a row after 200 cached random tokens, median of 12).
Run: PYTHONPATH=. nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/step-parts/finished_rows.py DTYPE NEW_TOKENS
"""
import sys, time, torch
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
target, tok = load_smollm2(getattr(torch, sys.argv[1]))
N = int(sys.argv[2])
for bs in (8, 4):
    for g in batches(encode(tok, CHAT_PROMPTS[:8]), bs, tok.pad_token_id or 0):
        out = target.generate(**g, max_new_tokens=N, do_sample=False)
        new = out[:, g["input_ids"].shape[1]:]
        eos = tok.eos_token_id
        lens = [(int((row == eos).nonzero()[0]) + 1) if (row == eos).any() else new.shape[1] for row in new]
        steps = max(lens)
        active_rows = sum(lens)
        print(f"b{bs}: row lengths {sorted(lens)}; steps {steps}; active row-steps {active_rows} of {bs * steps} ({active_rows / (bs * steps):.2f})")
# cost of a plain forward by batch (1 token per row, context ~200)
from transformers import DynamicCache
ids = encode(tok, CHAT_PROMPTS[:8])
for b in (1, 2, 4, 8):
    x = torch.randint(100, 1000, (b, 200))
    with torch.no_grad():
        o = target(x, use_cache=True); c = o.past_key_values
        t = []
        for i in range(12):
            s = time.perf_counter(); o = target(torch.randint(100, 1000, (b, 1)), past_key_values=c, use_cache=True); t.append(time.perf_counter() - s)
    print(f"forward b{b}: {sorted(t)[6]*1e3:.1f} ms")
