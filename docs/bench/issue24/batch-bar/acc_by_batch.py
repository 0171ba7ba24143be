"""Issue 24, session o: the head's gamma-1 acceptance on the held-out requests at each batch size (no timing)."""
import sys

import torch

from hf_specdec.bench.prompts import batches, encode
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.stats import SpeculativeStats
torch.set_num_threads(1)
dtype = getattr(torch, sys.argv[1])
target, tok = load_smollm2(dtype)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
enc = encode(tok, HELDOUT_REQUESTS)
for b in [int(x) for x in sys.argv[2].split(",")]:
    acc = tried = 0
    for batch in batches(enc, b, tok.pad_token_id or 0):
        st = SpeculativeStats()
        target.generate(**batch, max_new_tokens=48, drafter=head, gamma=1, stats=st)
        a = int(st.accepted.sum()); d = int(st.drafted.sum())
        acc += a; tried += d
    print(f"batch {b}: gamma 1 acceptance {acc}/{tried} = {acc/tried:.3f}", flush=True)
