"""Session i diagnostic (issue 24, batch 4, head): why the default runs below a fixed chain of 1 even when it drafts
1-2 a step. Times every step (between two schedule updates) of fixed chains 1 and 2 and of the default, grouped by
drafts this step and whether the step before drafted; counts plain steps. bf16, head v4, greedy, 48 new tokens.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/depth/trace_steps.py BATCH START:STOP"""
import statistics
import sys
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

batch_size = int(sys.argv[1])
start, stop = map(int, sys.argv[2].split(":"))
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
log = []
for cls in (P.DraftSchedule, P.CostAwareSchedule):
    original = cls.update

    def update(self, active, num_drafted, num_accepted, _original=original):
        log.append((time.perf_counter(), int(num_drafted.max()), int(active.sum())))
        _original(self, active, num_drafted, num_accepted)

    cls.update = update
groups = batches(encode(tok, CHAT_PROMPTS[start:stop]), batch_size, tok.pad_token_id or 0)
for name, kwargs in (("plain", {}), ("chain 1", dict(gamma=1)), ("chain 2", dict(gamma=2)), ("default", {})):
    steps: dict = {}
    wall = 0.0
    for rep in range(2):
        for batch in groups:
            log.clear()
            t0 = time.perf_counter()
            if name == "plain":
                target.generate(**batch, max_new_tokens=48, do_sample=False)
            else:
                target.generate(**batch, max_new_tokens=48, do_sample=False, drafter=head, **kwargs)
            if rep:
                wall += time.perf_counter() - t0
                for (t_0, k0, _), (t_1, k1, rows) in zip(log, log[1:]):
                    steps.setdefault((k1, "after drafting" if k0 else "after plain"), []).append((t_1 - t_0) * 1e3)
    n = sum(len(v) for v in steps.values())
    print(f"{name}: {wall * 1e3:.0f} ms, {n} timed steps")
    for (k, after), ms in sorted(steps.items()):
        print(f"  {k} drafts, {after}: {len(ms)} steps, median {statistics.median(ms):.1f} ms, mean {statistics.mean(ms):.1f}")
