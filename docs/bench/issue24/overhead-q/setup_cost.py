"""Session q (issue 24): where the default's time goes when it does not draft, against plain generate(), per call of 48
new tokens on the bench's 8 chat prompts (in turns, alternating order): setup (call start to the first target forward),
the gaps between forwards, teardown (last forward to the call's end), the forwards themselves; medians over calls.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/overhead-q/setup_cost.py DTYPE BATCH ROUNDS {head,indep}
"""
import functools
import statistics
import sys
import time

import torch

import hf_specdec  # noqa: F401  (installs drafter=)
from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

dtype, batch_size, rounds, which = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=dtype)
marks: list[tuple[float, float]] = []  # (start, end) of each target forward of the call being timed
forward = type(target).forward


@functools.wraps(forward)  # keeps the signature the loop's checks read
def timed_forward(self, *args, **kwargs):
    start = time.perf_counter()
    out = forward(self, *args, **kwargs)
    marks.append((start, time.perf_counter()))
    return out


type(target).forward = timed_forward
groups = batches(encode(tok, CHAT_PROMPTS[:8]), batch_size, tok.pad_token_id or 0)
methods = {"plain": {}, f"{which}, default": {"drafter": drafter}}
parts = {name: {"setup": [], "gaps": [], "teardown": [], "total": [], "fwd": [], "n": []} for name in methods}
for kwargs in methods.values():
    target.generate(**groups[0], max_new_tokens=8, **kwargs)  # warm-up and calibration
for r in range(rounds):
    for i, batch in enumerate(groups):
        for name in list(methods) if (r + i) % 2 == 0 else list(methods)[::-1]:
            marks.clear()
            start = time.perf_counter()
            target.generate(**batch, max_new_tokens=48, **methods[name])
            end = time.perf_counter()
            part = parts[name]
            part["setup"].append((marks[0][0] - start) * 1e3)
            part["gaps"].append(sum(b[0] - a[1] for a, b in zip(marks, marks[1:])) * 1e3)
            part["teardown"].append((end - marks[-1][1]) * 1e3)
            part["total"].append((end - start) * 1e3)
            part["fwd"].append(sum(b - a for a, b in marks) * 1e3)
            part["n"].append(len(marks))
for name, part in parts.items():
    print(name, {key: round(statistics.median(values), 1) for key, values in part.items()}, flush=True)
