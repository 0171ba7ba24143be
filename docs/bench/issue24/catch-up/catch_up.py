"""Session m (issue 24): the drafter's catch-up per token as the calibration measures it (StepCosts.catch_up_ms), next
to the plain loop step, and the first probe's wait with and without it, for the unrelated drafter, the shipped
independent drafter and the shipped head, at batch 1, 4 and 8.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/catch-up/catch_up.py DTYPE
"""
import copy
import dataclasses
import sys

import torch
from transformers import AutoModelForCausalLM

from hf_specdec.calibration import step_costs
from hf_specdec.cpu import describe
from hf_specdec.drafters import resolve_drafter
from hf_specdec.drafters.base import forget_acceptance
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareDraftPolicy, CostAwareSchedule
from hf_specdec.smollm2 import load_smollm2

dtype = getattr(torch, sys.argv[1])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
independent = AutoModelForCausalLM.from_pretrained("drafters/smollm2-135m-instruct", dtype=dtype).eval()
config = copy.deepcopy(independent.config)
forget_acceptance(config)
torch.manual_seed(0)
unrelated = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
print(f"# {describe()}; {sys.argv[1]}, one thread, greedy")
print("drafter      batch  plain ms  1-draft ms  catch-up ms/token  (% of plain)  first probe wait (without catch-up)")
policy = CostAwareDraftPolicy()
cpu = torch.device("cpu")
for name, model in (("unrelated", unrelated), ("independent", independent), ("head", head)):
    drafter = resolve_drafter(model)
    for batch in (1, 4, 8):
        costs = step_costs(target, drafter, batch, cpu, policy.widths(), vocab_size=target.config.vocab_size)
        chain = getattr(costs, "chain", costs)
        waits = [CostAwareSchedule(policy.for_drafter(drafter), c, batch, cpu).first_interval
                 for c in (chain, dataclasses.replace(chain, catch_up_ms=0.0))]
        print(f"{name:12s} {batch:5d}  {chain.step_ms(0):8.2f}  {chain.step_ms(1):10.2f}  {chain.catch_up_ms:17.3f}  "
              f"{100 * chain.catch_up_ms / chain.step_ms(0):11.2f} %  {waits[0]:3d} ({waits[1]})", flush=True)
