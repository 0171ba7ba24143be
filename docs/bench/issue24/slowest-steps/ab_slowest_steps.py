"""Session n (issue 24): the batch's draft length priced by its slowest row's expected steps (`slowest_row_steps`)
against the rule before (the bar on summed tokens alone: `_slowest_row_length` bypassed) and a chain of 1, in turns
with plain generate() on the 48 held-out requests; then each method's real time per target forward against the
calibrated step prices, which the default decided with.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/slowest-steps/ab_slowest_steps.py DTYPE BATCH ROUNDS DRAFTER
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
from hf_specdec.calibration import stored_costs  # noqa: E402
from hf_specdec.cpu import describe  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.drafters import resolve_drafter  # noqa: E402
from hf_specdec.loading import load_drafter  # noqa: E402
from hf_specdec.smollm2 import load_smollm2  # noqa: E402


@dataclass(frozen=True, kw_only=True)
class Before(policy_module.CostAwareDraftPolicy):
    """The default with the bar on summed tokens alone (the rule before this session)."""


class BeforeSchedule(policy_module.CostAwareSchedule):
    def _slowest_row_length(self, rows, longest):
        return longest


_start = policy_module.CostAwareDraftPolicy.start


def start_before(self, *args, **kwargs):
    schedule = _start(self, *args, **kwargs)
    if type(schedule) is policy_module.CostAwareSchedule:
        schedule.__class__ = BeforeSchedule
        schedule.lengths = schedule._lengths(schedule._active, probing=False)
    return schedule


Before.start = start_before

dtype_name, batch_size, rounds, which = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
dtype = getattr(torch, dtype_name)
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = resolve_drafter(
    load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=dtype))
groups = batches(encode(tok, HELDOUT_REQUESTS), batch_size, tok.pad_token_id or 0)
methods = {"plain": {}, "default, slowest row's steps (this commit)": dict(drafter=drafter),
           "default, rule before": dict(drafter=drafter, gamma=Before()), "chain 1": dict(drafter=drafter, gamma=1)}
print(f"# {describe()}; batch {batch_size}, {len(HELDOUT_REQUESTS)} held-out requests, {rounds} rounds, {dtype_name} "
      f"greedy, {which} drafter, 48 new tokens", flush=True)
results = in_turns(target, methods, groups, rounds=rounds)
report(results)
costs = stored_costs(target, drafter, batch_size, torch.device("cpu"), policy_module.CostAwareDraftPolicy().widths())
print(f"  calibrated steps: plain {costs.step_ms(0):.1f} ms, 1 draft {costs.step_ms(1):.1f} ms "
      f"({costs.step_ms(1) / costs.step_ms(0):.3f}), 2 drafts {costs.step_ms(2):.1f} ms")
for name, result in results.items():
    per_forward = min(result["times"]) / result["forwards"] * 1e3
    print(f"  {name}: {per_forward:.1f} ms per target forward (fastest round; prefill included)")
