"""The default policy with and without trees at batch 1 (issue 24's batch-1 miss): SmolLM2-135M-Instruct in bf16,
greedy, the bench's 8 chat prompts, 48 new tokens, one thread; time per method summed over prompts and the last 2 of 3
repeats (the first warms up and calibrates), methods in a shuffled order per repeat, each prompt in turn. Methods:
plain generate(); the default (no gamma=) and the default kept to chains (CostAwareDraftPolicy(trees=False)) with an
unrelated drafter (the shipped drafter's architecture, random weights) and with the shipped EAGLE-3 head; fixed
gamma=2 with the head. A substring argument keeps only the methods it names (and plain), e.g. `unrel`.

    nice -n -15 taskset -c 1 python docs/bench/issue24/trees_vs_chains.py
"""
import collections
import random
import sys
import time

import torch
from hf_specdec import CostAwareDraftPolicy
from transformers import AutoConfig, AutoModelForCausalLM
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
torch.manual_seed(0)
unrelated = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("drafters/smollm2-135m-instruct")).to(torch.bfloat16).eval()
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
settings = dict(max_new_tokens=48, do_sample=False, pad_token_id=tok.pad_token_id)
allin = batches(encode(tok, CHAT_PROMPTS)[:8], 1, tok.pad_token_id)
methods = {
    "plain": {},
    "unrel default": {"drafter": unrelated},
    "unrel chains": {"drafter": unrelated, "gamma": CostAwareDraftPolicy(trees=False)},
    "head default": {"drafter": head},
    "head chains": {"drafter": head, "gamma": CostAwareDraftPolicy(trees=False)},
    "head g2": {"drafter": head, "gamma": 2},
}
if len(sys.argv) > 1:
    methods = {k: v for k, v in methods.items() if k == "plain" or any(s in k for s in sys.argv[1].split(","))}
tot = collections.defaultdict(float)
for rep in range(3):
    order = list(methods); random.Random(rep).shuffle(order)
    for i, inputs in enumerate(allin):
        for m in order:
            t = time.perf_counter()
            target.generate(**inputs, **methods[m], **settings)
            if rep:
                tot[m] += time.perf_counter() - t
for m in methods:
    print(f"{m:14s} {tot[m]:7.2f} s  x plain {tot['plain'] / tot[m]:.3f}")
