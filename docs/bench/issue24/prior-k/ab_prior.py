"""Session k A/B (issue 24): the default's acceptance prior (prior_alpha 0.5, worth 4 drafts per row) never decays, so
for a drafter right a quarter of the time it keeps the estimate near (0.26 * 20 + 2) / (20 + 4) = 0.30 with decay 0.95:
at the break-even of fp32 batch 4 (0.30), so the default keeps drafting 1 (1.175 tokens per step, 0.959x plain at
4764686). Does a prior at the drafter's own held-out acceptance fix that? In turns with plain generate() in one process:
the default (prior 0.5), and the default with prior_alpha at each value given.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/prior-k/ab_prior.py DTYPE BATCH ROUNDS head|indep \
         [greedy|sampled] PRIOR...
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from turns import in_turns, report  # noqa: E402

from hf_specdec.bench.prompts import batches, encode  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.loading import load_drafter  # noqa: E402
from hf_specdec.policy import CostAwareDraftPolicy  # noqa: E402
from hf_specdec.smollm2 import load_smollm2  # noqa: E402

dtype, batch_size, rounds, which, mode, *priors = sys.argv[1:]
torch.set_num_threads(1)
target, tok = load_smollm2(getattr(torch, dtype))
drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3" if which == "head" else "drafters/smollm2-135m-instruct")
methods = {"plain": {}, "default": dict(drafter=drafter)}
for prior in priors:
    methods[f"prior {prior}"] = dict(drafter=drafter, gamma=CostAwareDraftPolicy(prior_alpha=float(prior)))
groups = batches(encode(tok, HELDOUT_REQUESTS), int(batch_size), tok.pad_token_id or 0)
results = in_turns(target, methods, groups, int(rounds), do_sample=mode == "sampled")
print(f"batch {batch_size}, {len(HELDOUT_REQUESTS)} held-out requests, {rounds} rounds, {dtype} {mode}, {which}, "
      f"48 new tokens")
report(results)
