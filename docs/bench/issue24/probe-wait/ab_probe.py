"""Session i A/B (issue 24, batch > 1): a drafter that does not pay in a batch (the shipped independent drafter, bf16,
batch 4) loses ~4 % of plain speed in exploring: its first run and its probes. Variants on one calibration:
cur (shipped); fix1 = in a batch, a probe's budgeted wait credits only the slowest row's acceptance (the batch waits
for its slowest row, so the others' accepted drafts save no step); fix1+pw2 = that and prior_weight 2; fix1+pa.4 = fix1 and prior_alpha 0.4.
In turns with plain generate(), order shuffled per round.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/probe-wait/ab_probe.py BATCH START:STOP ROUNDS [DRAFTERS [VARIANTS_OFF]]
(e.g. `4 8:16 8 indep,head pw2`). Run at 8a3dfbe, before a26d45b shipped fix1: from a26d45b on, `cur` is fix1."""
import random
import sys
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

torch.set_num_threads(1)
batch_size = int(sys.argv[1])
start, stop = map(int, sys.argv[2].split(":"))
rounds = int(sys.argv[3])
which = sys.argv[4].split(",") if len(sys.argv) > 4 else ["indep", "head"]
VARIANTS_OFF = sys.argv[5].split(",") if len(sys.argv) > 5 else ["pw2"]  # variants left out
gen = dict(max_new_tokens=48, do_sample=False)
target, tok = load_smollm2(torch.bfloat16)
drafters = {"head": load_drafter("drafters/smollm2-135m-instruct-eagle3"),
            "indep": load_drafter("drafters/smollm2-135m-instruct")}
groups = batches(encode(tok, CHAT_PROMPTS[start:stop]), batch_size, tok.pad_token_id or 0)
FIX1 = [False]
original = P.CostAwareSchedule._budgeted_interval


def budgeted(self, rate):
    if FIX1[0] and hasattr(self, "_active") and int(self._active.sum()) > 1:
        rows = self._active & (self.total_accepted + self.total_rejected > 0)
        acc, rej = self.total_accepted[rows].double(), self.total_rejected[rows].double()
        rate = float((acc / (acc + rej)).min()) if rows.any() else 0.0
    return original(self, rate)


P.CostAwareSchedule._budgeted_interval = budgeted
CURRENT = [""]
orig_update = P.CostAwareSchedule.update


def update(self, active, num_drafted, num_accepted):
    counts = lengths[CURRENT[0]]
    counts[int(num_drafted.max())] = counts.get(int(num_drafted.max()), 0) + 1
    orig_update(self, active, num_drafted, num_accepted)


P.CostAwareSchedule.update = update
methods = {"plain": (None, False)}
for name in which:
    d = drafters[name]
    methods[f"{name} cur"] = (dict(drafter=d), False)
    methods[f"{name} fix1"] = (dict(drafter=d), True)
    methods[f"{name} fix1+pw2"] = (dict(drafter=d, gamma=P.CostAwareDraftPolicy(prior_weight=2.0)), True)
    methods[f"{name} fix1+pa.4"] = (dict(drafter=d, gamma=P.CostAwareDraftPolicy(prior_alpha=0.4)), True)
for name in [n for n in methods if any(v in n for v in VARIANTS_OFF)]:
    del methods[name]
lengths = {name: {} for name in methods}
for name, (kwargs, fix) in methods.items():  # warm-up (and calibration)
    FIX1[0], CURRENT[0] = fix, name
    for batch in groups:
        target.generate(**batch, **gen, **(kwargs or {}))
lengths = {name: {} for name in methods}
times = {name: [] for name in methods}
rng = random.Random(0)
for r in range(rounds):
    order = list(methods)
    rng.shuffle(order)
    for name in order:
        kwargs, fix = methods[name]
        FIX1[0], CURRENT[0] = fix, name
        total = 0.0
        for batch in groups:
            t0 = time.perf_counter()
            target.generate(**batch, **gen, **(kwargs or {}))
            total += time.perf_counter() - t0
        times[name].append(total)
print(f"batch {batch_size}, prompts {start}:{stop}, {rounds} rounds, greedy")
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    steps = lengths[name]
    print(f"  {name:14s} {sum(times['plain']) / sum(times[name]):.3f}x plain (per round {ratios[0]:.3f}-{ratios[-1]:.3f}); "
          f"steps by drafts {dict(sorted(steps.items()))}" if steps else f"  {name:14s} {sum(times[name]):.1f} s")
