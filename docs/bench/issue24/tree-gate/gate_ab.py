"""A/B of the default's tree gate at batch 1 (issue 24): `trees_pay` with TREE_MARGIN (0.10, now) against the old
margin (min_gain, 0.02), with the shipped independent drafter and the shipped EAGLE-3 head; SmolLM2-135M-Instruct in
bf16, the bench's 8 chat prompts, 48 new tokens, one thread; greedy keeps EOS, sampled (T 0.7, top-k/top-p off)
ignores it as the bench does. Total time over the prompts and the last 2 of 3 repeats (the first warms up and
calibrates), methods in a shuffled order per repeat, each prompt in turn; "tree-loop calls" counts the calls that
ran as trees.

    nice -n -15 taskset -c 1 python docs/bench/issue24/tree-gate/gate_ab.py greedy   # or sampled
"""
import collections
import random
import sys
import time

import torch

from hf_specdec import tree_loop as tl
from hf_specdec import tree_schedule
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
mode = sys.argv[1]
target, tok = load_smollm2(torch.bfloat16)
indep = load_drafter("drafters/smollm2-135m-instruct")
if hasattr(indep, "to"): indep = indep.to(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
settings = dict(max_new_tokens=48, pad_token_id=tok.pad_token_id)
if mode == "sampled":
    settings.update(do_sample=True, temperature=0.7, top_k=0, top_p=1.0, eos_token_id=None)
else:
    settings.update(do_sample=False)
allin = batches(encode(tok, CHAT_PROMPTS)[:8], 1, tok.pad_token_id)
new_gate = tree_schedule.trees_pay
def old_gate(policy, tc, cc, margin=None):
    return new_gate(policy, tc, cc, margin=policy.min_gain if margin is None else margin)
loops = collections.Counter()
orig_td = tl.tree_decode
def counted(*a, **k):
    loops[current[0]] += 1
    return orig_td(*a, **k)
tl.tree_decode = counted
current = [None]
methods = {"plain": (None, None), "indep new": (indep, new_gate), "indep old": (indep, old_gate),
           "head new": (head, new_gate), "head old": (head, old_gate)}
tot = collections.defaultdict(float)
for rep in range(3):
    order = list(methods); random.Random(rep).shuffle(order)
    for i, inputs in enumerate(allin):
        for m in order:
            d, gate = methods[m]
            current[0] = m if rep else None
            tree_schedule.trees_pay = gate or new_gate
            torch.manual_seed(1000 * rep + i)
            t = time.perf_counter()
            if d is None: target.generate(**inputs, **settings)
            else: target.generate(**inputs, drafter=d, **settings)
            if rep: tot[m] += time.perf_counter() - t
for m in methods:
    print(f"{mode} {m:10s} {tot[m]:7.2f} s  x plain {tot['plain'] / tot[m]:.3f}  tree-loop calls {loops[m]}")
