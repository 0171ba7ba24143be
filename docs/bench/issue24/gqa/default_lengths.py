"""Session l (issue 24): what the default drafts with the head against a chain of 1, on the 48 held-out requests in
batches of B (greedy, 48 new tokens): the drafted-length histogram over row-steps, acceptance per draft, target
forwards, and the calibrated costs the default decided with.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/gqa/default_lengths.py DTYPE BATCH
"""
import sys

import torch

from hf_specdec import calibration
from hf_specdec.bench.prompts import batches, encode
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.stats import SpeculativeStats

dtype, batch_size = getattr(torch, sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
groups = batches(encode(tok, HELDOUT_REQUESTS), batch_size, tok.pad_token_id or 0)
for name, kwargs in (("default", dict(drafter=head)), ("chain 1", dict(drafter=head, gamma=1))):
    stats = SpeculativeStats()
    for batch in groups:
        target.generate(**batch, max_new_tokens=48, do_sample=False, stats=stats, **kwargs)
    accepted, drafted = int(stats.accepted.sum()), int(stats.drafted.sum())
    print(f"{name}: row-steps by drafts {stats.drafted_histogram.sum(0).tolist()}, accepted {accepted} of {drafted} "
          f"drafts ({accepted / drafted:.3f}), target forwards {stats.target_forwards}")
for key, (_, _, value) in calibration._registry.items():
    if isinstance(value, calibration.StepCosts):
        print("costs:", value)
