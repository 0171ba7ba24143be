"""Session i A/B (issue 24, batch 4, head): the default with acceptance per draft position (session h's patch,
docs/bench/issue24/depth/per-position.patch, applied) against one rate per row, in one process (one calibration),
in turns with plain generate() and fixed chains of 1 and 2, order shuffled per round, summed times.
bf16, head version 4, greedy, 48 new tokens, 1 thread. Run (patch applied): nice -n -15 taskset -c 1
.venv/bin/python docs/bench/issue24/depth/ab_depth_b4.py BATCH START:STOP ROUNDS [low]
(`low`: the variants with the bar between lengths at 0.5 %). "tokens a step" is the last call's (stats= records one call)."""
import random
import sys
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import stored_costs
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.stats import SpeculativeStats

batch_size = int(sys.argv[1])
start, stop = map(int, sys.argv[2].split(":"))
rounds = int(sys.argv[3])
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")


class PooledSchedule(P.CostAwareSchedule):
    """One rate per row for every position (the shipped estimator): all positions' counts pooled, the same prior."""

    def depth_alpha(self):
        weight = self.policy.prior_weight
        pooled = (self.depth_hits.sum(1) + self.policy.prior_alpha * weight) / (self.depth_trials.sum(1) + weight)
        return pooled[:, None].expand(-1, self.policy.max_gamma)


class Pooled(P.CostAwareDraftPolicy):
    def start(self, *args, **kwargs):
        schedule = super().start(*args, **kwargs)
        schedule.__class__ = PooledSchedule
        return schedule


methods = {"plain": {}, "chain 1": dict(drafter=head, gamma=1), "chain 2": dict(drafter=head, gamma=2),
           "default (per position)": dict(drafter=head), "default (pooled)": dict(drafter=head, gamma=Pooled())}
if len(sys.argv) > 4:  # the longer-draft bar lowered to 0.5 % (the first draft in a batch keeps min_batch_gain's 5 %)
    methods = {"plain": {}, "chain 2": dict(drafter=head, gamma=2), "default (per position)": dict(drafter=head),
               "per position, min_gain .005": dict(drafter=head, gamma=P.CostAwareDraftPolicy(min_gain=0.005)),
               "pooled, min_gain .005": dict(drafter=head, gamma=Pooled(min_gain=0.005))}
groups = batches(encode(tok, CHAT_PROMPTS[start:stop]), batch_size, tok.pad_token_id or 0)
for name, kwargs in methods.items():  # warm-up, and the calibration
    for batch in groups:
        target.generate(**batch, max_new_tokens=48, do_sample=False, **kwargs)
times = {name: [] for name in methods}
stats = {name: SpeculativeStats() for name in methods if name != "plain"}
rng = random.Random(0)
for r in range(rounds):
    order = list(methods)
    rng.shuffle(order)
    for name in order:
        total = 0.0
        for batch in groups:
            extra = {"stats": stats[name]} if name in stats else {}
            t0 = time.perf_counter()
            target.generate(**batch, max_new_tokens=48, do_sample=False, **methods[name], **extra)
            total += time.perf_counter() - t0
        times[name].append(total)
print(f"batch {batch_size}, prompts {start}:{stop}, {rounds} rounds, bf16 greedy")
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    line = f"  {name}: {sum(times['plain']) / sum(times[name]):.3f}x plain (per round {ratios[0]:.3f}-{ratios[-1]:.3f})"
    if name in stats:
        line += f", {stats[name].tokens_per_step:.3f} tokens a step"
    print(line)
costs = stored_costs(target, head, batch_size, torch.device("cpu"), P.CostAwareDraftPolicy().widths())
print("calibration loop steps", {k: round(ms, 2) for k, ms in costs.loop_ms})
