"""The shipped EAGLE-3 head drafting in float32 (`load_drafter(path, dtype=torch.float32)`, what every load did before
6cfc438) against the default load (`load_drafter(path)`: bf16 drafting with a bf16 target on a CPU that computes bf16),
fixed gamma=2 and the default policy, bf16 target, greedy, the bench's 8 chat prompts, 48 new tokens, one thread;
total time over the last 2 of 3 repeats (the first warms up and calibrates), methods in turns per prompt.

    nice -n -15 taskset -c 1 python docs/bench/issue24/head-bf16/head_dtype.py 4   # batch size
"""
import collections
import random
import sys
import time

import torch

import hf_specdec
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
b = int(sys.argv[1])
target, tok = load_smollm2(torch.bfloat16)
heads = {"fp32": load_drafter("drafters/smollm2-135m-instruct-eagle3", dtype=torch.float32),
         "auto": load_drafter("drafters/smollm2-135m-instruct-eagle3")}
settings = dict(max_new_tokens=48, do_sample=False, pad_token_id=tok.pad_token_id)
allin = batches(encode(tok, CHAT_PROMPTS)[:8], b, tok.pad_token_id)
methods = {"plain": None}
for name, h in heads.items():
    for g in (2, None):
        methods[f"{name} {'default' if g is None else f'g{g}'}"] = (h, g)
tot = collections.defaultdict(float); stats = {m: hf_specdec.SpeculativeStats() for m in methods}
for rep in range(3):
    order = list(methods); random.Random(rep).shuffle(order)
    for inputs in allin:
        for m in order:
            t = time.perf_counter()
            if methods[m] is None: target.generate(**inputs, **settings)
            else: target.generate(**inputs, drafter=methods[m][0], gamma=methods[m][1], stats=stats[m] if rep else None, **settings)
            if rep: tot[m] += time.perf_counter() - t
for m in methods:
    extra = "" if methods[m] is None else f" alpha {stats[m].acceptance_rate:.3f} tok/fwd {stats[m].tokens_per_step:.3f}"
    print(f"b{b} {m:8s} {tot[m]:7.2f} s x plain {tot['plain'] / tot[m]:.3f}{extra}")
