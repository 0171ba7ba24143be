"""Session t (issue 24): the default letting its drafter go so that rows that are done leave the batch, where a forward
over the rows left costs less than 1 / the speed-up its drafts are expected to give, raised by the draft bar
(`CostAwareSchedule.speedup_to_beat`), against the same default that keeps its drafter and every row while the drafter
may still draft (session s's rule: speedup_to_beat None), and plain generate(), in turns (order
reversed every other round), on the bench's chat prompts in batches of BATCH, greedy, 48 new tokens, EOS kept, one
thread; paired ratios per call (median and range over ROUNDS x batches), tokens per target forward, and whether each
output equals plain generate()'s.
Run: PYTHONPATH=. nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/idle-drop/ab_idle.py DTYPE BATCH ROUNDS
"""
import statistics
import sys
import time

import torch

import hf_specdec  # noqa: F401  (installs drafter=)
from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareSchedule
from hf_specdec.smollm2 import load_smollm2

SPEEDUP_TO_BEAT = CostAwareSchedule.speedup_to_beat
dtype, batch_size, rounds = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafters = {"head": load_drafter(DEFAULT_FEATURE_DRAFTER, dtype=dtype), "indep": load_drafter(DEFAULT_DRAFTER, dtype=dtype)}
groups = batches(encode(tok, CHAT_PROMPTS[:8]), batch_size, tok.pad_token_id or 0)
common = dict(max_new_tokens=48, do_sample=False)
methods = {"plain": ({}, None)}
for name, drafter in drafters.items():
    methods[f"{name}, drafter goes"] = ({"drafter": drafter}, True)
    methods[f"{name}, drafter stays"] = ({"drafter": drafter}, False)


def call(name, group):
    kwargs, goes = methods[name]
    CostAwareSchedule.speedup_to_beat = SPEEDUP_TO_BEAT if goes in (None, True) else lambda self, active: None
    stats = hf_specdec.SpeculativeStats() if kwargs else None
    start = time.perf_counter()
    out = target.generate(**group, **common, **kwargs, **({"stats": stats} if stats is not None else {}))
    return time.perf_counter() - start, out, stats


for name in methods:  # warm-up: calibrations, and the plain forward costs by row count
    for group in groups:
        call(name, group)
times = {name: [] for name in methods}
same = {name: 0 for name in methods}
per_forward = {name: [] for name in methods}
for r in range(rounds):
    for i, group in enumerate(groups):
        order = list(methods) if (r + i) % 2 == 0 else list(methods)[::-1]
        outs = {}
        for name in order:
            seconds, outs[name], stats = call(name, group)
            times[name].append(seconds)
            if stats is not None:
                per_forward[name].append(stats.tokens_per_step)
        for name in methods:
            same[name] += int(torch.equal(outs[name], outs["plain"]))
CostAwareSchedule.speedup_to_beat = SPEEDUP_TO_BEAT
print(f"# {sys.argv[1]} batch {batch_size}, {rounds} rounds x {len(groups)} batches")
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    tpf = f", tokens/forward {statistics.mean(per_forward[name]):.3f}" if per_forward[name] else ""
    print(f"{name:20s} x plain {statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f}), "
          f"median call {statistics.median(times[name]) * 1e3:.0f} ms{tpf}, equal to plain {same[name]}/{len(ratios)}")
