"""Session i A/B (issue 24): the bar a longer draft must clear over the best shorter one (`min_gain`, 2 %), lowered to
0.5 % and 0, with the first draft's bar kept (2 % alone, `min_batch_gain` 5 % in a batch). The head (or the independent
drafter), bf16, greedy, 48 new tokens, in turns with plain generate() and a fixed chain of 2, one calibration per
process, order shuffled per round, summed times; steps counted by drafts per row.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/depth/ab_bar.py BATCH START:STOP ROUNDS [head|indep]"""
import dataclasses
import random
import sys
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import stored_costs
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

batch_size = int(sys.argv[1])
start, stop = map(int, sys.argv[2].split(":"))
rounds = int(sys.argv[3])
which = sys.argv[4] if len(sys.argv) > 4 else "head"
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
drafter = load_drafter({"head": "drafters/smollm2-135m-instruct-eagle3", "indep": "drafters/smollm2-135m-instruct"}[which])


@dataclasses.dataclass(frozen=True, kw_only=True)
class LowBar(P.CostAwareDraftPolicy):
    def draft_gain(self, rows):  # the first draft keeps the shipped bars
        return max(0.02, super().draft_gain(rows))


CURRENT = [""]
counts: dict = {}
original = P.CostAwareSchedule.update


def update(self, active, num_drafted, num_accepted):
    hist = counts.setdefault(CURRENT[0], {})
    hist[int(num_drafted.max())] = hist.get(int(num_drafted.max()), 0) + 1
    original(self, active, num_drafted, num_accepted)


P.CostAwareSchedule.update = update
methods = {"plain": {}, "chain 2": dict(drafter=drafter, gamma=2), "default": dict(drafter=drafter),
           "bar 0.5 %": dict(drafter=drafter, gamma=LowBar(min_gain=0.005)),
           "bar 0": dict(drafter=drafter, gamma=LowBar(min_gain=0.0))}
groups = batches(encode(tok, CHAT_PROMPTS[start:stop]), batch_size, tok.pad_token_id or 0)
for name, kwargs in methods.items():  # warm-up, and the calibration
    for batch in groups:
        target.generate(**batch, max_new_tokens=48, do_sample=False, **kwargs)
counts.clear()
times = {name: [] for name in methods}
rng = random.Random(0)
for r in range(rounds):
    order = list(methods)
    rng.shuffle(order)
    for name in order:
        CURRENT[0] = name
        total = 0.0
        for batch in groups:
            t0 = time.perf_counter()
            target.generate(**batch, max_new_tokens=48, do_sample=False, **methods[name])
            total += time.perf_counter() - t0
        times[name].append(total)
print(f"{which}, batch {batch_size}, prompts {start}:{stop}, {rounds} rounds, bf16 greedy")
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    print(f"  {name}: {sum(times['plain']) / sum(times[name]):.3f}x plain (per round {ratios[0]:.3f}-{ratios[-1]:.3f})"
          + (f"; steps by drafts {dict(sorted(counts[name].items()))}" if name in counts else ""))
costs = stored_costs(target, drafter, batch_size, torch.device("cpu"), P.CostAwareDraftPolicy().widths())
print("calibration loop steps", {k: round(ms, 2) for k, ms in costs.loop_ms})
