"""Session k (issue 24): Monte Carlo of the default's schedule (CostAwareSchedule) with the prior at the drafter's declared
acceptance or at 0.5, for drafters right `alpha` of the time (each draft accepted independently), 48 new tokens, 300
calls per case (seeds 0-299), under step costs the bench's calibrations measured at 4764686 (docs/bench/issue24/zen5-j2:
AMD EPYC Zen 5, avx512_bf16, no amx_bf16). Variants: as shipped; prior_weight 8; the thin-first-run rule also for a
first run that accepted nothing (not shipped: see README.md).
Run: .venv/bin/python docs/bench/issue24/prior-k/prior_sim.py
"""
import random, statistics, sys, torch
from hf_specdec.calibration import StepCosts
from hf_specdec.policy import CostAwareDraftPolicy, CostAwareSchedule
import hf_specdec.policy as P

class D:
    def __init__(s, a): s.expected_acceptance = a
COSTS = {
 "bf16 b1": (1, StepCosts(draft_ms=1.0, target_ms={1: 26.6, 2: 27.8}, loop_ms={0: 27.2, 1: 30.6, 2: 32.0})),
 "bf16 b1 head": (1, StepCosts(draft_ms=1.7, target_ms={1: 28.7, 2: 30.5}, loop_ms={0: 29.2, 1: 34.1, 2: 35.7})),
 "fp32 b4": (4, StepCosts(draft_ms=2.4, target_ms={1: 64.3, 2: 80.2}, loop_ms={0: 64.4, 1: 79.9, 2: 93.0})),
 "bf16 b4 head": (4, StepCosts(draft_ms=2.1, target_ms={1: 30.8, 2: 36.5}, loop_ms={0: 31.4, 1: 41.2, 2: 47.1})),
}
def run(policy, declared, costs, alpha, batch, new_tokens, seed):
    rng = random.Random(seed)
    s = policy.start(None, D(declared), batch, torch.device("cpu"), max_new_tokens=new_tokens)
    made, t, drafts = [0]*batch, 0.0, 0
    while min(made) < new_tokens:
        L = s.lengths.clone(); k = int(L.max()); t += costs.step_ms(k); drafts += k > 0
        acc = []
        for r in range(batch):
            c = 0
            while c < int(L[r]) and rng.random() < alpha: c += 1
            acc.append(c); made[r] += c + 1
        s.update(torch.ones(batch, dtype=torch.bool), L, torch.tensor(acc))
    return costs.step_ms(0) * new_tokens / t, drafts
orig = CostAwareSchedule._thin_first_run
def thin_any(self):
    if self.stopped or self.given_up():
        return False
    tried = int((self.total_accepted + self.total_rejected)[self._active].sum())
    return tried < self.policy.prior_weight * min(int(self._active.sum()), P.THIN_RUN_ROWS)
variants = {
  "now": (dict(), orig),
  "weight 8": (dict(prior_weight=8.0), orig),
  "thin even without acceptance": (dict(), thin_any),
}
cases = [("bf16 b1", 0.24, 0.24), ("bf16 b1", 0.24, 0.5), ("bf16 b1", 0.1, 0.24), ("bf16 b1", 0.0, 0.5),
         ("bf16 b1 head", 0.5, 0.509), ("bf16 b4 head", 0.48, 0.509), ("bf16 b4 head", 0.3, 0.509), ("fp32 b4", 0.24, 0.24)]
for vname, (kw, thin) in variants.items():
    CostAwareSchedule._thin_first_run = thin
    print("--", vname)
    for name, alpha, declared in cases:
        batch, costs = COSTS[name]
        res = [run(CostAwareDraftPolicy(costs=costs, **kw), declared, costs, alpha, batch, 48, seed) for seed in range(300)]
        print(f"  {name} alpha {alpha} prior {declared}: x plain {statistics.mean(r[0] for r in res):.3f}, drafting steps {statistics.mean(r[1] for r in res):.1f}")
