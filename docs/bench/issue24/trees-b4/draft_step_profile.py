"""Session k (issue 24): where the loop's time of a drafting step goes (the head at gamma 1, batch B): a cProfile of
one round over the first 8 held-out requests (48 tokens, EOS ignored) after a warm-up, hf_specdec's functions by
cumulative time (each includes the model forwards it calls: compare with draft_step.py's split).
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/trees-b4/draft_step_profile.py DTYPE B
"""
import cProfile
import io
import pstats
import sys

import torch

from hf_specdec.bench.prompts import batches, encode
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

dtype, batch_size = getattr(torch, sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
groups = batches(encode(tok, HELDOUT_REQUESTS[:8]), batch_size, tok.pad_token_id or 0)
kw = dict(max_new_tokens=48, do_sample=False, eos_token_id=None, min_new_tokens=48, drafter=head, gamma=1)
for batch in groups:
    target.generate(**batch, **kw)  # warm-up
profile = cProfile.Profile()
profile.enable()
for batch in groups:
    target.generate(**batch, **kw)
profile.disable()
out = io.StringIO()
pstats.Stats(profile, stream=out).sort_stats("cumtime").print_stats("hf_specdec", 40)
print(out.getvalue())
