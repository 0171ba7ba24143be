"""Monte Carlo (session d, for the next person; the policy is unchanged): the default's first probe when drafting
does not pay on the prior (break-even above prior_alpha), batch 1, 64 new tokens: today's wait (budgeted at
acceptance 0) against a wait budgeted at the prior's acceptance. Costs: a Zen 3 fp32-like setting (a 2-token forward
1.7 steps, drafter step 0.05). 300 calls per cell, seeds 0-299. Output (2026-11-24): break-even 0.772, first wait
today 64 (the cap), at the prior 24; x plain today 1.000 for every alpha (never probed in 64 tokens), at the prior
0.989 / 0.987 / 0.991 / 1.006 / 1.077 for alpha 0 / 0.3 / 0.6 / 0.75 / 0.9.

    python docs/bench/issue24/first_probe_sim.py
"""
import random
import statistics

import torch

from hf_specdec.calibration import StepCosts
from hf_specdec.policy import CostAwareDraftPolicy

COSTS = StepCosts(draft_ms=1.5, target_ms={1: 30.0, 2: 51.0, 3: 60.0, 4: 69.0, 5: 78.0, 7: 96.0},
                  loop_ms={0: 30.5, 1: 53.0})

def run(alpha, seed, prior_wait, n=64):
    rng = random.Random(seed)
    schedule = CostAwareDraftPolicy(costs=COSTS).start(None, None, 1, torch.device("cpu"), max_new_tokens=n)
    if prior_wait:
        schedule.first_interval = schedule.probe_interval = schedule._budgeted_interval(schedule.policy.prior_alpha)
    made, t = 0, 0.0
    while made < n:
        k = int(schedule.lengths[0])
        t += COSTS.step_ms(k)
        acc = 0
        while acc < k and rng.random() < alpha:
            acc += 1
        made += acc + 1
        schedule.update(torch.tensor([True]), torch.tensor([k]), torch.tensor([acc]))
    return t / n

s = CostAwareDraftPolicy(costs=COSTS).start(None, None, 1, torch.device("cpu"), max_new_tokens=64)
print("break-even", round(s.break_even, 3), "first wait today", s.first_interval,
      "at the prior", s._budgeted_interval(0.5))
for alpha in (0.0, 0.3, 0.6, 0.75, 0.9):
    plain = COSTS.step_ms(0)
    row = [f"alpha {alpha}:"]
    for prior_wait in (False, True):
        ms = statistics.mean(run(alpha, seed, prior_wait) for seed in range(300))
        row.append(f"{'prior' if prior_wait else 'today'} {plain / ms:.3f}x plain")
    print("  ".join(row))
