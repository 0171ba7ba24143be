"""Session s (issue 24): ms per step (first forward left out) of plain generate() and our loop with a fixed draft length
(g0 = plain steps, g1, g2), split into the target's forwards, the head's forwards and the gaps between target forwards;
min_new_tokens=48 of 48 (generate()'s min-length processors run every step); medians over the bench's 8 chat prompts x ROUNDS.
Run: PYTHONPATH=. nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/step-parts/steps.py DTYPE BATCH {head,indep} ROUNDS
"""
import sys, time, functools, statistics
import torch
import hf_specdec  # noqa
from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
dtype = getattr(torch, sys.argv[1]); bs = int(sys.argv[2]); which = sys.argv[3]; rounds = int(sys.argv[4])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=dtype)
groups = batches(encode(tok, CHAT_PROMPTS[:8]), bs, tok.pad_token_id or 0)
marks = []
forward = type(target).forward
@functools.wraps(forward)
def timed(self, *a, **k):
    s = time.perf_counter(); o = forward(self, *a, **k); marks.append((s, time.perf_counter())); return o
type(target).forward = timed
hmarks = []
from hf_specdec.drafters.feature import BoundHead
from hf_specdec.drafters import model as dm
hforward = BoundHead.forward
@functools.wraps(hforward)
def htimed(self, *a, **k):
    s = time.perf_counter(); o = hforward(self, *a, **k); hmarks.append(time.perf_counter() - s); return o
BoundHead.forward = htimed
methods = {"plain": {}, "g0": {"drafter": drafter, "gamma": __import__("hf_specdec.calibration").calibration._ClockedPolicy(num_drafts=0)}, "g1": {"drafter": drafter, "gamma": 1}, "g2": {"drafter": drafter, "gamma": 2}}
res = {m: {"step": [], "fwd": [], "gap": [], "n": [], "tpf": [], "head": []} for m in methods}
for kw in methods.values():
    try: target.generate(**groups[0], max_new_tokens=8, **kw)
    except Exception as e: print(e)
for r in range(rounds):
    for i, g in enumerate(groups):
        order = list(methods) if (r + i) % 2 == 0 else list(methods)[::-1]
        for m in order:
            marks.clear(); hmarks.clear()
            out = target.generate(**g, max_new_tokens=48, min_new_tokens=48, **methods[m])
            ms = marks[1:]
            n = len(ms)
            res[m]["step"].append((ms[-1][1] - ms[0][0]) * 1e3 / n)
            res[m]["fwd"].append(sum(b - a for a, b in ms) * 1e3 / n)
            res[m]["gap"].append(sum(b[0] - a[1] for a, b in zip(ms, ms[1:])) * 1e3 / n)
            res[m]["n"].append(n); res[m]["head"].append(sum(hmarks) * 1e3 / n)
for m, d in res.items():
    print(m, {k: round(statistics.median(v), 2) for k, v in d.items() if v})
