"""Session m (issue 24): every batch decision made for the slowest row (the draft length from the active row with the
lowest estimated acceptance; whether a stopped run paid from the slowest row's acceptance in the call) against the
rules before (the tokens summed over rows; the rows' pooled acceptance), in turns with plain generate() on the 48
held-out requests. "before" restores the earlier rules here, on the same calibration.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/slowest-row/ab_rules.py DTYPE BATCH ROUNDS DRAFTER
(DRAFTER: head or independent)
"""
import sys
from dataclasses import dataclass

import torch

sys.path.insert(0, "docs/bench/issue24")
from turns import in_turns, report  # noqa: E402

from hf_specdec import policy as policy_module  # noqa: E402
from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER  # noqa: E402
from hf_specdec.bench.prompts import batches, encode  # noqa: E402
from hf_specdec.cpu import describe  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.loading import load_drafter  # noqa: E402
from hf_specdec.smollm2 import load_smollm2  # noqa: E402

Schedule = policy_module.CostAwareSchedule


@dataclass(frozen=True, kw_only=True)
class Before(policy_module.CostAwareDraftPolicy):
    before: bool = True


new_lengths, new_paying = Schedule._lengths, Schedule._paying


def lengths(self, active, probing):
    if not getattr(self.policy, "before", False):
        return new_lengths(self, active, probing)
    rows = active.cpu()
    k = 0
    if rows.any():
        longest = min(self.policy.max_gamma, 1 + int(self.total_accepted[rows].max()))
        k = policy_module.best_draft_length(self.alpha()[rows], self.costs, longest, self.policy.draft_gain(int(rows.sum())))
        if self.given_up():
            k = 0
        if k == 0 and probing:
            k = 1
    return torch.full(rows.shape, k, dtype=torch.long, device=self.device)


def paying(self):
    if not getattr(self.policy, "before", False):
        return new_paying(self)
    call_rate = policy_module._rate(int(self.total_accepted.sum()), int(self.total_rejected.sum()))
    return max(policy_module._rate(self.run_accepted, self.run_rejected), call_rate) >= self.break_even


Schedule._lengths, Schedule._paying = lengths, paying

dtype, batch_size, rounds, which = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=dtype)
groups = batches(encode(tok, HELDOUT_REQUESTS), batch_size, tok.pad_token_id or 0)
methods = {"plain": {}, "default, rules before (summed tokens, pooled rate)": dict(drafter=drafter, gamma=Before()),
           "default, slowest row (this commit)": dict(drafter=drafter)}
print(f"# {describe()}; batch {batch_size}, {len(HELDOUT_REQUESTS)} held-out requests, {rounds} rounds, {sys.argv[1]} "
      f"greedy, {which} drafter, 48 new tokens", flush=True)
report(in_turns(target, methods, groups, rounds=rounds))
