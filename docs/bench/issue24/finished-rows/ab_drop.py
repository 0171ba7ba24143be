"""Session s (issue 24): the default with rows that are done leaving the batch (`loop._rows_to_keep`) against the same
default with every row kept (DROP_ROWS_BELOW = 0) and plain generate(), in turns (order reversed every other round), on
the bench's chat prompts in batches of BATCH, greedy, 48 new tokens, EOS kept, one thread; paired ratios per call
(median and range over ROUNDS x batches), and whether each output equals plain generate()'s.
Run: PYTHONPATH=. nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/finished-rows/ab_drop.py DTYPE BATCH ROUNDS
"""
import statistics
import sys
import time

import torch

import hf_specdec  # noqa: F401  (installs drafter=)
from hf_specdec import calibration, loop
from hf_specdec.bench.models import DEFAULT_DRAFTER, unrelated_drafter
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode

from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

dtype, batch_size, rounds = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafters = {"indep": load_drafter(DEFAULT_DRAFTER, dtype=dtype)}
drafters["unrelated"] = unrelated_drafter(drafters["indep"], 0)
groups = batches(encode(tok, CHAT_PROMPTS[:8]), batch_size, tok.pad_token_id or 0)
common = dict(max_new_tokens=48, do_sample=False)
methods = {"plain": ({}, None)}
for name, drafter in drafters.items():
    methods[f"{name}, rows drop"] = ({"drafter": drafter}, loop.DROP_ROWS_BELOW)
    methods[f"{name}, rows kept"] = ({"drafter": drafter}, 0.0)


def call(name, group):
    kwargs, bar = methods[name]
    loop.DROP_ROWS_BELOW = bar if bar is not None else loop.DROP_ROWS_BELOW
    start = time.perf_counter()
    out = target.generate(**group, **common, **kwargs)
    return time.perf_counter() - start, out


bar = loop.DROP_ROWS_BELOW
for name in methods:  # warm-up: calibrations, and the plain forward costs by row count
    for group in groups:
        call(name, group)
loop.DROP_ROWS_BELOW = bar
times = {name: [] for name in methods}
same = {name: 0 for name in methods}
for r in range(rounds):
    for i, group in enumerate(groups):
        order = list(methods) if (r + i) % 2 == 0 else list(methods)[::-1]
        outs = {}
        for name in order:
            seconds, outs[name] = call(name, group)
            times[name].append(seconds)
        for name in methods:
            same[name] += int(torch.equal(outs[name], outs["plain"]))
loop.DROP_ROWS_BELOW = bar
costs = {rows: round(calibration.plain_forward_ms(target, rows, torch.device("cpu"), False), 1)
         for rows in range(1, batch_size + 1)}
print(f"# {sys.argv[1]} batch {batch_size}, {rounds} rounds x {len(groups)} batches; plain forward ms by rows {costs}")
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    print(f"{name:20s} x plain {statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f}), "
          f"median call {statistics.median(times[name]) * 1e3:.0f} ms, equal to plain {same[name]}/{len(ratios)}")
