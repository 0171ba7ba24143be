"""Session k A/B (issue 24): let the acceptance prior decay like the observations (start each row's decayed counts at
prior_alpha * prior_weight accepted and (1 - prior_alpha) * prior_weight rejected) instead of adding it to them for
the whole call. A prior that never decays keeps pulling each row's estimate towards 0.5 (with decay 0.95 about 20
observations' worth against its 4: a drafter right 0.26 of the time reads 0.30, one right 0.7 reads 0.67). In turns
with plain generate() in one process: the default, the default with a decaying prior, and (optionally) each with the
prior_alpha values given.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/prior-k/ab_decay.py DTYPE BATCH ROUNDS head|indep \
         greedy|sampled [PRIOR...]
"""
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from turns import in_turns, report  # noqa: E402

from hf_specdec.bench.prompts import batches, encode  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.loading import load_drafter  # noqa: E402
from hf_specdec.policy import CostAwareDraftPolicy, CostAwareSchedule  # noqa: E402


class DecayingPriorSchedule(CostAwareSchedule):
    def alpha(self):
        return self.accepted / (self.accepted + self.rejected)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecayingPrior(CostAwareDraftPolicy):
    def start(self, *args, **kwargs):
        schedule = super().start(*args, **kwargs)
        if type(schedule) is CostAwareSchedule:  # chains only (trees do not pay at these settings)
            schedule.__class__ = DecayingPriorSchedule
            schedule.accepted += self.prior_alpha * self.prior_weight
            schedule.rejected += (1 - self.prior_alpha) * self.prior_weight
            schedule.lengths = schedule._lengths(schedule._active, probing=False)
        return schedule


from hf_specdec.smollm2 import load_smollm2  # noqa: E402

dtype, batch_size, rounds, which, mode, *priors = sys.argv[1:]
torch.set_num_threads(1)
target, tok = load_smollm2(getattr(torch, dtype))
drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3" if which == "head" else "drafters/smollm2-135m-instruct")
methods = {"plain": {}, "default": dict(drafter=drafter), "decaying prior": dict(drafter=drafter, gamma=DecayingPrior())}
for prior in priors:
    methods[f"prior {prior}"] = dict(drafter=drafter, gamma=CostAwareDraftPolicy(prior_alpha=float(prior)))
    methods[f"decaying prior {prior}"] = dict(drafter=drafter, gamma=DecayingPrior(prior_alpha=float(prior)))
groups = batches(encode(tok, HELDOUT_REQUESTS), int(batch_size), tok.pad_token_id or 0)
results = in_turns(target, methods, groups, int(rounds), do_sample=mode == "sampled")
print(f"batch {batch_size}, {len(HELDOUT_REQUESTS)} held-out requests, {rounds} rounds, {dtype} {mode}, {which}, "
      f"48 new tokens")
report(results)
