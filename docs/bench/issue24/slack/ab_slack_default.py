"""Session i A/B (issue 24): the default's batch calls with the target cache's slack at this step's width + 1 (f57a3ab)
against max_gamma + 1 (before; forced in-process), for the head and the independent drafter, bf16, greedy, 48 new
tokens, in turns with plain generate(), summed times, one calibration per drafter (timed with the new slack).
Run (at f57a3ab, where the new slack is the code's): nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/slack/ab_slack_default.py BATCH START:STOP ROUNDS"""
import random
import sys
import time

import torch

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.cache import CachedModel
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

batch_size = int(sys.argv[1])
start, stop = map(int, sys.argv[2].split(":"))
rounds = int(sys.argv[3])
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
indep = load_drafter("drafters/smollm2-135m-instruct")
OLD = [False]
rollback = CachedModel.rollback


def patched(self, keep, slack):
    rollback(self, keep, 7 if OLD[0] and self.model is target else slack)


CachedModel.rollback = patched
methods = {"plain": ({}, False)}
for name, d in (("head", head), ("indep", indep)):
    methods[f"{name} slack width+1"] = (dict(drafter=d), False)
    methods[f"{name} slack 7 (before)"] = (dict(drafter=d), True)
groups = batches(encode(tok, CHAT_PROMPTS[start:stop]), batch_size, tok.pad_token_id or 0)
for name, (kwargs, old) in methods.items():  # warm-up (the calibration runs with the new slack)
    OLD[0] = old
    for batch in groups:
        target.generate(**batch, max_new_tokens=48, do_sample=False, **kwargs)
times = {name: [] for name in methods}
rng = random.Random(0)
for r in range(rounds):
    order = list(methods)
    rng.shuffle(order)
    for name in order:
        kwargs, OLD[0] = methods[name]
        total = 0.0
        for batch in groups:
            t0 = time.perf_counter()
            target.generate(**batch, max_new_tokens=48, do_sample=False, **kwargs)
            total += time.perf_counter() - t0
        times[name].append(total)
print(f"batch {batch_size}, prompts {start}:{stop}, {rounds} rounds, bf16 greedy")
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    print(f"  {name}: {sum(times['plain']) / sum(times[name]):.3f}x plain (per round {ratios[0]:.3f}-{ratios[-1]:.3f})")
