"""Session k (issue 24): what a drafting step costs outside the models' forwards, with the head at batch B.
The target's and the head's `forward` are wrapped at class level; per call, (wall time - target forwards - head
forwards) / target forwards is the loop's own time per step. Methods: plain generate(), the head at gamma 1 (every step
drafts one token), the head with plain steps only (calibration's _ClockedPolicy(0)). 48 new tokens, EOS ignored,
the first 8 held-out requests in batches of B, 3 rounds after a warm-up, medians. Then a cProfile of one gamma-1 round,
the top functions by own time.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/trees-b4/draft_step.py DTYPE B
"""
import cProfile
import functools
import io
import pstats
import statistics
import sys
import time

import torch

from hf_specdec.bench.prompts import batches, encode
from hf_specdec.calibration import _ClockedPolicy
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.drafters.feature import BoundHead
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

dtype, batch_size = getattr(torch, sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
groups = batches(encode(tok, HELDOUT_REQUESTS[:8]), batch_size, tok.pad_token_id or 0)
spent = {"target": 0.0, "head": 0.0, "target_calls": 0}


def wrap(cls, name):
    forward = cls.forward

    @functools.wraps(forward)
    def timed(*a, **k):
        start = time.perf_counter()
        try:
            return forward(*a, **k)
        finally:
            spent[name] += time.perf_counter() - start
            if name == "target":
                spent["target_calls"] += 1
    cls.forward = timed


wrap(type(target), "target")
wrap(BoundHead, "head")
methods = {"plain": {}, "head gamma 1": dict(drafter=head, gamma=1),
           "head, plain steps": dict(drafter=head, gamma=_ClockedPolicy(num_drafts=0))}
kw = dict(max_new_tokens=48, do_sample=False, eos_token_id=None, min_new_tokens=48)


def run(kwargs):
    spent.update(target=0.0, head=0.0, target_calls=0)
    start = time.perf_counter()
    for batch in groups:
        target.generate(**batch, **kw, **kwargs)
    wall = time.perf_counter() - start
    steps = spent["target_calls"]
    return {"wall": wall, "target": spent["target"], "head": spent["head"], "steps": steps}


for kwargs in methods.values():
    run(kwargs)  # warm-up and calibration
rows = {name: [] for name in methods}
for _ in range(3):
    for name, kwargs in methods.items():
        rows[name].append(run(kwargs))
print(f"{sys.argv[1]} batch {batch_size}, 8 held-out requests, 48 tokens (EOS ignored), 3 rounds, medians, ms per step")
for name, runs in rows.items():
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    steps = med["steps"]
    print(f"  {name}: steps {steps:.0f}, wall {1000 * med['wall'] / steps:.2f}, target forward "
          f"{1000 * med['target'] / steps:.2f}, head forwards {1000 * med['head'] / steps:.2f}, rest (the loop) "
          f"{1000 * (med['wall'] - med['target'] - med['head']) / steps:.2f}")
profile = cProfile.Profile()
profile.enable()
run(methods["head gamma 1"])
profile.disable()
out = io.StringIO()
pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(25)
print(out.getvalue())
