"""Session n (issue 24): which estimator of the calibration's loop steps holds still on a noisy machine. Each
calibration times ROUNDS rounds of scratch generate() calls (as hf_specdec.calibration does: 0, 1 and 2 drafts per row
in turns, LOOP_STEPS steps each over LOOP_CONTEXT random tokens) and keeps every step's time; the 1- and 2-draft
steps' ratios to the plain step are then estimated several ways from the same raw times:
  shipped:   min over the first 2 rounds of each call's median step (the calibration at cf67484)
  median6:   the same over all ROUNDS rounds
  min:       the fastest single step (step 1 of each call left out) over all rounds
  paired:    the median over rounds of each round's ratio of medians (the calls of a round run next to each other)
and the physical floor (plain step * v(k + 1) / v(1) + k * drafter step, from the fastest forwards).
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/calib-spread/estimators.py DTYPE BATCHES DRAFTER CALIBRATIONS ROUNDS
"""
import copy
import dataclasses
import statistics
import sys

import torch
from transformers import AutoModelForCausalLM

from hf_specdec.calibration import LOOP_CONTEXT, LOOP_STEPS, _ClockedPolicy, measure
from hf_specdec.cpu import describe
from hf_specdec.dispatch import generate_with_drafter
from hf_specdec.drafters import resolve_drafter
from hf_specdec.drafters.base import forget_acceptance
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareDraftPolicy
from hf_specdec.smollm2 import load_smollm2

dtype_name, batch_sizes, which, calibrations, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
dtype = getattr(torch, dtype_name)
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
if which == "head":
    drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3")
else:
    config = copy.deepcopy(AutoModelForCausalLM.from_pretrained("drafters/smollm2-135m-instruct", dtype=dtype).config)
    forget_acceptance(config)
    torch.manual_seed(0)
    drafter = resolve_drafter(AutoModelForCausalLM.from_config(config, dtype=dtype).eval())
policy = CostAwareDraftPolicy()
config = copy.deepcopy(target.generation_config)
config.update(max_new_tokens=LOOP_STEPS + 1, do_sample=False, eos_token_id=None)
print(f"# {describe()}; {dtype_name}, greedy, {which} drafter, {calibrations} calibrations of {rounds} rounds", flush=True)
for batch in [int(b) for b in batch_sizes.split(",")]:
    ids = torch.randint(0, target.config.vocab_size, (batch, LOOP_CONTEXT), generator=torch.Generator().manual_seed(1))
    estimates = {name: [] for name in ("shipped", "median6", "min", "paired", "floor")}
    for calibration in range(calibrations):
        forwards = measure(target, drafter, batch, torch.device("cpu"), policy.widths(), loop_steps=False)
        steps = {k: [] for k in (0, 1, 2)}  # per round: the call's step times (ms)
        for attempt in range(rounds):
            for k in steps:
                clocked = _ClockedPolicy(max_gamma=max(1, k), num_drafts=k)
                generate_with_drafter(target, drafter, ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                      gamma=clocked, generator=torch.Generator().manual_seed(attempt))
                times = clocked.schedules[0].times
                steps[k].append([(b - a) * 1e3 for a, b in zip(times, times[1:])])
        medians = {k: [statistics.median(s) for s in v] for k, v in steps.items()}
        shipped = {k: min(m[:2]) for k, m in medians.items()}
        median6 = {k: min(m) for k, m in medians.items()}
        fastest = {k: min(t for s in v for t in s[1:]) for k, v in steps.items()}
        paired = {k: statistics.median(m / p for m, p in zip(medians[k], medians[0])) for k in (1, 2)}
        v1 = forwards.verify_ms(1)
        floor = {k: (fastest[0] * forwards.verify_ms(k + 1) / v1 + k * forwards.draft_ms) / fastest[0] for k in (1, 2)}
        for name, est in (("shipped", shipped), ("median6", median6), ("min", fastest)):
            estimates[name].append((est[1] / est[0], est[2] / est[0]))
        estimates["paired"].append((paired[1], paired[2]))
        estimates["floor"].append((floor[1], floor[2]))
        print(f"  batch {batch} calibration {calibration}: plain medians {[round(m, 1) for m in medians[0]]}, "
              f"1-draft {[round(m, 1) for m in medians[1]]}, v2/v1 {forwards.verify_ms(2) / v1:.3f}, draft {forwards.draft_ms:.1f}",
              flush=True)
    for name, values in estimates.items():
        ones, twos = [v[0] for v in values], [v[1] for v in values]
        print(f"  batch {batch} {name:8s}: 1 draft {min(ones):.3f}-{max(ones):.3f} (spread {max(ones) - min(ones):.3f}), "
              f"2 drafts {min(twos):.3f}-{max(twos):.3f}", flush=True)
