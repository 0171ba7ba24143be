"""Session m (issue 24): what a useless drafter's default costs at batch B, by part, in turns with plain generate() on
the 48 held-out requests: the default with an unrelated drafter (the shipped drafter's architecture, fresh random
weights, no declared acceptance, as the bench builds it); the same without probes (probe_budget so small that the
first probe waits max_probe_interval = 64 steps, past a 48-token call); its first run alone (one draft per row for 2
steps, as the default drafts from the prior 0.5 until give_up_after = 5 rejections of 4 rows, then plain steps); and
plain steps only (the loop's own overhead with that drafter, no drafting).
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/catch-up/ab_parts.py DTYPE BATCH ROUNDS
"""
import copy
import sys
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, "docs/bench/issue24")
from turns import in_turns, report  # noqa: E402

from hf_specdec.bench.prompts import batches, encode  # noqa: E402
from hf_specdec.calibration import _ClockedPolicy  # noqa: E402
from hf_specdec.cpu import describe  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.drafters.base import forget_acceptance  # noqa: E402
from hf_specdec.policy import CostAwareDraftPolicy, DraftPolicy, DraftSchedule  # noqa: E402
from hf_specdec.smollm2 import load_smollm2  # noqa: E402


class _FirstSteps(DraftSchedule):
    def __init__(self, policy, batch_size, device):
        super().__init__(policy, batch_size, device)
        self.steps = 0

    def update(self, active, num_drafted, num_accepted):
        self.steps += 1
        if self.steps >= self.policy.drafting_steps:
            self.lengths = torch.zeros_like(self.lengths)


@dataclass(frozen=True, kw_only=True)
class FirstRunOnly(DraftPolicy):
    """One draft per row for the first `drafting_steps` steps, then plain steps to the end."""
    max_gamma: int = 1
    drafting_steps: int = 2

    def start(self, target, drafter, batch_size, device, *args, **kwargs):
        return _FirstSteps(self, batch_size, device)


dtype, batch_size, rounds = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = AutoModelForCausalLM.from_pretrained("drafters/smollm2-135m-instruct", dtype=dtype).eval()
config = copy.deepcopy(drafter.config)
forget_acceptance(config)
torch.manual_seed(0)
unrelated = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
groups = batches(encode(tok, HELDOUT_REQUESTS), batch_size, tok.pad_token_id or 0)
methods = {"plain": {}, "unrelated, default": dict(drafter=unrelated),
           "unrelated, default without probes": dict(drafter=unrelated, gamma=CostAwareDraftPolicy(probe_budget=1e-9)),
           "unrelated, first run alone (1 draft, 2 steps)": dict(drafter=unrelated, gamma=FirstRunOnly()),
           "unrelated, plain steps only": dict(drafter=unrelated, gamma=_ClockedPolicy(num_drafts=0))}
print(f"# {describe()}; batch {batch_size}, {len(HELDOUT_REQUESTS)} held-out requests, {rounds} rounds, {sys.argv[1]} "
      "greedy, 48 new tokens", flush=True)
report(in_turns(target, methods, groups, rounds=rounds))
