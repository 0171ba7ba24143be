"""Session n (issue 24): how noisy is this machine? 40 cached bf16 forwards of SmolLM2-135M at batch 1 of each width (1, 2), in turns, after 128 random tokens; percentiles in ms.
Run: taskset -c 0 .venv/bin/python docs/bench/issue24/calib-spread/forward_noise.py
"""
import time, torch, statistics
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
m, tok = load_smollm2(torch.bfloat16)
from transformers import DynamicCache
ids = torch.randint(0, 1000, (1, 128))
with torch.no_grad():
    out = m(ids, use_cache=True)
    cache = out.past_key_values
    ts = {1: [], 2: []}
    for i in range(40):
        for w in (1, 2):
            x = torch.randint(0, 1000, (1, w))
            t = time.perf_counter(); m(x, past_key_values=cache, use_cache=True); ts[w].append((time.perf_counter()-t)*1e3)
            cache.crop(-w)
for w, v in ts.items():
    v = sorted(v); print(w, "min %.1f p25 %.1f med %.1f p75 %.1f max %.1f" % (v[0], v[10], v[20], v[30], v[-1]))
