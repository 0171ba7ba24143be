"""Session j diagnostic (issue 24): target forwards per call (batch 4, bf16 greedy, 48 new tokens, the 48 held-out
requests in 12 batches) for a chain of 1, a chain of 2 and the default, head version 4.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/chaos/per_group.py (at 6aee187)."""
import sys, torch
from hf_specdec.bench.prompts import batches, encode
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.stats import SpeculativeStats
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
groups = batches(encode(tok, HELDOUT_REQUESTS), 4, tok.pad_token_id or 0)
target.generate(**groups[0], drafter=head, max_new_tokens=48, do_sample=False)
for name, g in (("chain1", 1), ("chain2", 2), ("default", None)):
    row = []
    for b in groups:
        st = SpeculativeStats()
        target.generate(**b, drafter=head, gamma=g, max_new_tokens=48, do_sample=False, stats=st)
        row.append(st.target_forwards)
    print(f"{name:8s}", " ".join(f"{f:3d}" for f in row), "sum", sum(row), flush=True)
