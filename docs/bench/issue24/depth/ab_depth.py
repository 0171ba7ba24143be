"""Session h A/B (issue 24, batch 1): the default with acceptance per draft position against one rate per row, in one
process (one calibration, so both price steps alike), timed in turns with plain generate() and a fixed chain of 2.
bf16 target, head version 4, greedy, 1 thread, the bench's 8 chat prompts one at a time, 64 new tokens, ROUNDS rounds
(the fastest of each). Run: taskset -c 1 .venv/bin/python docs/bench/issue24/depth/ab_depth.py [batch] [rounds]"""
import sys
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import stored_costs
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.stats import SpeculativeStats

batch_size = int(sys.argv[1]) if len(sys.argv) > 1 else 1
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")


class PooledSchedule(P.CostAwareSchedule):
    """One rate per row for every position (session g's estimator): all positions' counts pooled, the same prior."""

    def depth_alpha(self):
        weight = self.policy.prior_weight
        pooled = (self.depth_hits.sum(1) + self.policy.prior_alpha * weight) / (self.depth_trials.sum(1) + weight)
        return pooled[:, None].expand(-1, self.policy.max_gamma)


class Pooled(P.CostAwareDraftPolicy):
    def start(self, *args, **kwargs):
        schedule = super().start(*args, **kwargs)
        schedule.__class__ = PooledSchedule
        return schedule


methods = {"plain": {}, "chain 2": dict(drafter=head, gamma=2), "default (per position)": dict(drafter=head),
           "default (pooled)": dict(drafter=head, gamma=Pooled(trees=False))}
prompts = batches(encode(tok, CHAT_PROMPTS[:8]), batch_size, tok.pad_token_id or 0)
best = {name: [float("inf")] * len(prompts) for name in methods}
stats = {name: SpeculativeStats() for name in methods if name != "plain"}
for name, kwargs in methods.items():  # warm-up, and the calibration
    target.generate(**prompts[0], max_new_tokens=64, do_sample=False, **kwargs)
for r in range(rounds):
    for i, batch in enumerate(prompts):
        for name, kwargs in methods.items():
            extra = {"stats": stats[name]} if name in stats and r == 0 else {}
            start = time.perf_counter()
            target.generate(**batch, max_new_tokens=64, do_sample=False, **kwargs, **extra)
            best[name][i] = min(best[name][i], time.perf_counter() - start)
plain = sum(best["plain"])
for name in methods:
    line = f"{name}: {sum(best[name]):.2f} s, {plain / sum(best[name]):.3f}x plain"
    if name in stats:
        line += f", {stats[name].tokens_per_step:.3f} tokens a step"
    print(line)
costs = stored_costs(target, head, batch_size, torch.device("cpu"), P.CostAwareDraftPolicy().widths())
print("calibration loop steps", {k: round(ms, 2) for k, ms in costs.loop_ms})
