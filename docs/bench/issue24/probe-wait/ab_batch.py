"""Session i A/B (issue 24): in a batch, price drafting by the slowest row (the batch runs until its last row is done,
and a CPU step costs the same whatever the number of active rows) instead of by the rows' summed tokens.
Variants, all on one calibration per (drafter, batch): cur = summed tokens, 5 % bar (shipped); slow5 = the slowest
row's tokens x rows, 5 % bar; slow2 = the same, 2 % bar. In turns with plain generate(), order shuffled per round.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/probe-wait/ab_batch.py BATCH START:STOP ROUNDS [sampled]
(run at 8a3dfbe, greedy only; not shipped)."""
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
sampled = len(sys.argv) > 4 and sys.argv[4] == "sampled"
gen = dict(max_new_tokens=48, do_sample=sampled)
if sampled:
    gen.update(temperature=0.7, top_k=0, top_p=1.0)
target, tok = load_smollm2(torch.bfloat16)
if sampled:
    target.generation_config.eos_token_id = None  # --ignore-eos
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
indep = load_drafter("drafters/smollm2-135m-instruct")
groups = batches(encode(tok, CHAT_PROMPTS[start:stop]), batch_size, tok.pad_token_id or 0)
SLOWEST = [False]
original = P.best_draft_length


def best_draft_length(alpha, costs, max_gamma, min_gain=0.0, draft_gain=None):
    if SLOWEST[0] and alpha.numel() > 1:
        alpha = alpha.min().expand(alpha.shape)
    return original(alpha, costs, max_gamma, min_gain, draft_gain)


P.best_draft_length = best_draft_length
drafted = {}
orig_update = P.CostAwareSchedule.update


def update(self, active, num_drafted, num_accepted):
    drafted[CURRENT[0]][0] += int(num_drafted.max() > 0)
    drafted[CURRENT[0]][1] += 1
    lengths[CURRENT[0]][int(num_drafted.max())] = lengths[CURRENT[0]].get(int(num_drafted.max()), 0) + 1
    orig_update(self, active, num_drafted, num_accepted)


P.CostAwareSchedule.update = update
CURRENT = [""]
methods = {"plain": (None, False)}
for name, drafter in (("head", head), ("indep", indep)):
    methods[f"{name} cur"] = (dict(drafter=drafter), False)
    methods[f"{name} slow5"] = (dict(drafter=drafter), True)
    methods[f"{name} slow2"] = (dict(drafter=drafter, gamma=P.CostAwareDraftPolicy(min_batch_gain=0.02)), True)
times = {name: [] for name in methods}
drafted = {name: [0, 0] for name in methods}
lengths = {name: {} for name in methods}
for name, (kwargs, slow) in methods.items():  # warm-up (and calibration)
    SLOWEST[0], CURRENT[0] = slow, name
    for batch in groups:
        torch.manual_seed(0)
        target.generate(**batch, **gen, **(kwargs or {}))
drafted = {name: [0, 0] for name in methods}
lengths = {name: {} for name in methods}
rng = random.Random(0)
for r in range(rounds):
    order = list(methods)
    rng.shuffle(order)
    for name in order:
        kwargs, slow = methods[name]
        SLOWEST[0], CURRENT[0] = slow, name
        total = 0.0
        for batch in groups:
            torch.manual_seed(r)
            t0 = time.perf_counter()
            target.generate(**batch, **gen, **(kwargs or {}))
            total += time.perf_counter() - t0
        times[name].append(total)
print(f"batch {batch_size}, prompts {start}:{stop}, {rounds} rounds, {'sampled (ignore eos)' if sampled else 'greedy'}")
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    d, s = drafted[name]
    print(f"  {name:12s} {sum(times['plain']) / sum(times[name]):.3f}x plain (per round {ratios[0]:.3f}-{ratios[-1]:.3f}); "
          f"drafting steps {d}/{s} {dict(sorted(lengths[name].items()))}" if s else f"  {name:12s} {sum(times[name]):.1f} s")
