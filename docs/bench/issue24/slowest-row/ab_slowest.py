"""Session m (issue 24): in a batch, choose each step's draft length for the slowest row (the active row with the
lowest estimated acceptance: a batch call lasts as long as its slowest row, and the others ride along at almost no
cost on a CPU) instead of for the tokens summed over the rows. In turns with plain generate() on the 48 held-out
requests: the default (summed tokens), the default choosing for the slowest row (an experiment: CostAwareSchedule's
length choice patched here), and a chain of 1.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/slowest-row/ab_slowest.py DTYPE BATCH ROUNDS DRAFTER
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


@dataclass(frozen=True, kw_only=True)
class SlowestRow(policy_module.CostAwareDraftPolicy):
    slowest_row: bool = True


summed_lengths = policy_module.CostAwareSchedule._lengths


def lengths(self, active, probing):
    if not getattr(self.policy, "slowest_row", False) or int(active.sum()) < 2:
        return summed_lengths(self, active, probing)
    rows = active.cpu()
    alpha = self.alpha()
    slowest = alpha.masked_fill(~rows, 2.0).argmin()  # the active row with the lowest estimated acceptance
    longest = min(self.policy.max_gamma, 1 + int(self.total_accepted[rows].max()))
    k = policy_module.best_draft_length(alpha[slowest][None], self.costs, longest, self.policy.draft_gain(int(rows.sum())))
    if self.given_up():
        k = 0
    if k == 0 and probing:
        k = 1
    return torch.full(rows.shape, k, dtype=torch.long, device=self.device)


policy_module.CostAwareSchedule._lengths = lengths

dtype, batch_size, rounds, which = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=dtype)
groups = batches(encode(tok, HELDOUT_REQUESTS), batch_size, tok.pad_token_id or 0)
methods = {"plain": {}, "default (summed tokens)": dict(drafter=drafter),
           "default, slowest row": dict(drafter=drafter, gamma=SlowestRow(trees=False)),
           "chain 1": dict(drafter=drafter, gamma=1)}
print(f"# {describe()}; batch {batch_size}, {len(HELDOUT_REQUESTS)} held-out requests, {rounds} rounds, {sys.argv[1]} "
      f"greedy, {which} drafter, 48 new tokens", flush=True)
report(in_turns(target, methods, groups, rounds=rounds))
