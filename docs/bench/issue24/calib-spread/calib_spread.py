"""Session n (issue 24): how far one process's calibration moves the default's decisions on this machine. Times the
calibration (hf_specdec.calibration.step_costs, reset before each) N times in one process for the unrelated drafter
(the shipped drafter's architecture, random weights) and the shipped EAGLE-3 head, at each batch size, and prints
each run's loop steps with 0 / 1 / 2 drafts, their ratios to the plain step, the break-even acceptance of one
draft (the batch bar applied as the policy does) and the calibration's wall time.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/calib-spread/calib_spread.py DTYPE BATCHES RUNS
"""
import copy
import sys
import time

import torch
from transformers import AutoModelForCausalLM

from hf_specdec.calibration import reset_calibration, step_costs
from hf_specdec.cpu import describe
from hf_specdec.drafters import resolve_drafter
from hf_specdec.drafters.base import forget_acceptance
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareDraftPolicy
from hf_specdec.smollm2 import load_smollm2

dtype, batch_sizes, runs = getattr(torch, sys.argv[1]), [int(b) for b in sys.argv[2].split(",")], int(sys.argv[3])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
shipped = AutoModelForCausalLM.from_pretrained("drafters/smollm2-135m-instruct", dtype=dtype).eval()
config = copy.deepcopy(shipped.config)
forget_acceptance(config)
torch.manual_seed(0)
unrelated = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
drafters = {"unrelated": resolve_drafter(unrelated), "head": load_drafter("drafters/smollm2-135m-instruct-eagle3")}
policy = CostAwareDraftPolicy()
print(f"# {describe()}; {sys.argv[1]}, greedy, {runs} calibrations per setting in one process", flush=True)
for batch in batch_sizes:
    for name, drafter in drafters.items():
        for run in range(runs):
            reset_calibration()
            start = time.perf_counter()
            costs = step_costs(target, drafter, batch, torch.device("cpu"), policy.widths())
            seconds = time.perf_counter() - start
            plain, one, two = (costs.step_ms(k) for k in (0, 1, 2))
            break_even = max(0.0, one * (1 + policy.draft_gain(batch)) / plain - 1)
            print(f"  batch {batch} {name:9s} run {run}: forwards v1 {costs.verify_ms(1):.1f} v2 {costs.verify_ms(2):.1f} "
                  f"({costs.verify_ms(2) / costs.verify_ms(1):.3f}); steps {plain:.1f} / {one:.1f} / {two:.1f} ms "
                  f"({one / plain:.3f}, {two / plain:.3f}); draft {costs.draft_ms:.1f} ms; break-even {break_even:.3f}; "
                  f"calibration {seconds:.1f} s",
                  flush=True)
