"""Session i A/B (issue 24, batch 4, head): does the default lose to a chain of 2 through its plain-step dips?
floor1 = while the call's pooled acceptance so far is at least the break-even, never a plain step (at least one draft);
floor1+bar0 = that, and no bar between lengths (first draft's bars kept). In turns with plain generate(), fixed chains
of 1 and 2, one calibration per process, summed times; steps counted by drafts per row.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/slack/ab_floor.py BATCH START:STOP ROUNDS (at 8f4b5f7)"""
import dataclasses
import random
import sys
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

batch_size = int(sys.argv[1])
start, stop = map(int, sys.argv[2].split(":"))
rounds = int(sys.argv[3])
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")


class FloorSchedule(P.CostAwareSchedule):
    def _lengths(self, active, probing):
        lengths = super()._lengths(active, probing)
        accepted, rejected = int(self.total_accepted.sum()), int(self.total_rejected.sum())
        if hasattr(self, "break_even") and accepted and P._rate(accepted, rejected) >= self.break_even:
            lengths = lengths.clamp_min(1)
        return lengths


@dataclasses.dataclass(frozen=True, kw_only=True)
class Floor(P.CostAwareDraftPolicy):
    def draft_gain(self, rows):
        return max(0.02, super().draft_gain(rows))

    def start(self, *args, **kwargs):
        schedule = super().start(*args, **kwargs)
        if type(schedule) is P.CostAwareSchedule:
            schedule.__class__ = FloorSchedule
        return schedule


CURRENT = [""]
counts: dict = {}
original = P.CostAwareSchedule.update


def update(self, active, num_drafted, num_accepted):
    hist = counts.setdefault(CURRENT[0], {})
    hist[int(num_drafted.max())] = hist.get(int(num_drafted.max()), 0) + 1
    original(self, active, num_drafted, num_accepted)


P.CostAwareSchedule.update = update
methods = {"plain": {}, "chain 1": dict(drafter=head, gamma=1), "chain 2": dict(drafter=head, gamma=2),
           "default": dict(drafter=head), "floor1": dict(drafter=head, gamma=Floor()),
           "floor1+bar0": dict(drafter=head, gamma=Floor(min_gain=0.0))}
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
print(f"batch {batch_size}, prompts {start}:{stop}, {rounds} rounds, bf16 greedy, head")
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    print(f"  {name}: {sum(times['plain']) / sum(times[name]):.3f}x plain (per round {ratios[0]:.3f}-{ratios[-1]:.3f})"
          + (f"; steps by drafts {dict(sorted(counts[name].items()))}" if name in counts else ""))
