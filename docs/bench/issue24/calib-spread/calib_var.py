"""Session q (issue 24): how far the calibrated ratio R of a 1-draft loop step to a plain one moves between calibrations in
one process, under variants of the rules that time the loop steps (`hf_specdec.calibration`'s LOOP_* constants, patched
per variant; the variants take turns, so a slow stretch of the machine hits them alike). Prints each calibration's
loop steps with 0 / 1 / 2 drafts, R, the break-even acceptance of one draft (the batch bar applied as the policy does),
the forwards' width ratio, the rounds timed where the agreement rule was asked, and the calibration's wall time.
Variants: (LOOP_ROUNDS, LOOP_MAX_ROUNDS, LOOP_STEPS, LOOP_AGREEMENT, LOOP_CONTEXT).
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/calib-spread/calib_var.py DTYPE BATCH {head,indep} \
     RUNS VARIANT [VARIANT ...]
"""
import statistics
import sys
import time

import torch

from hf_specdec import calibration as C
from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER
from hf_specdec.calibration import reset_calibration, step_costs
from hf_specdec.cpu import describe
from hf_specdec.drafters import resolve_drafter
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareDraftPolicy
from hf_specdec.smollm2 import load_smollm2

VARIANTS = {  # name: (LOOP_ROUNDS, LOOP_MAX_ROUNDS, LOOP_STEPS, LOOP_AGREEMENT, LOOP_CONTEXT)
    "now": (2, 4, 6, 0.03, 128),  # the rules at fb97de3
    "min4": (4, 4, 6, 0.03, 128),
    "steps18": (2, 4, 18, 0.03, 128),
    "ctx32min4": (4, 4, 6, 0.03, 32),
}
dtype, batch, which, runs = getattr(torch, sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = resolve_drafter(
    load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=dtype))
policy = CostAwareDraftPolicy().for_drafter(drafter)
rounds_used = []  # calls per length each time the agreement rule was asked (what LOOP_ROUNDS left to it)
_agree = C._rounds_agree


def counting(rounds):
    rounds_used.append(min(len(t) for t in rounds.values()))
    return _agree(rounds)


C._rounds_agree = counting
print(f"# {describe()}; {sys.argv[1]} batch {batch} {which}, prior {policy.prior_alpha:.3f}, bar {policy.draft_gain(batch):.3f}", flush=True)
results = {name: [] for name in sys.argv[5:]}
for run in range(runs):
    for name in sys.argv[5:]:  # variants in turns
        C.LOOP_ROUNDS, C.LOOP_MAX_ROUNDS, C.LOOP_STEPS, C.LOOP_AGREEMENT, C.LOOP_CONTEXT = VARIANTS[name]
        reset_calibration(); rounds_used.clear()
        start = time.perf_counter()
        costs = step_costs(target, drafter, batch, torch.device("cpu"), policy.widths())
        seconds = time.perf_counter() - start
        r = costs.step_ms(1) / costs.step_ms(0)
        be = r * (1 + policy.draft_gain(batch)) - 1
        results[name].append(r)
        print(f"  {name:12s} run {run}: steps {costs.step_ms(0):.1f} / {costs.step_ms(1):.1f} / {costs.step_ms(2):.1f}; "
              f"R {r:.3f}, break-even {be:.3f}; v2/v1 {costs.verify_ms(2)/costs.verify_ms(1):.3f}; rounds {max(rounds_used, default=0)}; {seconds:.1f} s", flush=True)
for name, rs in results.items():
    print(f"# {name}: R {min(rs):.3f}-{max(rs):.3f}, mean {statistics.mean(rs):.3f}, sd {statistics.stdev(rs) if len(rs) > 1 else 0:.3f}")
