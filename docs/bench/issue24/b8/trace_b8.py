"""Session h diagnostic (issue 24, batch 8): what the default's steps cost by kind, next to what its calibration priced.
bf16 target, head version 4, greedy, 1 thread, the bench's 8 chat prompts at batch B (argv[1], default 8), 64 new
tokens, each batch decoded twice (the second is traced). A step's time is the time between two verifications; steps are grouped by
their drafts per row and by whether the step before drafted (a first drafting step after plain steps pays the head's
catch-up on the tokens it sat out). Run: taskset -c 1 .venv/bin/python docs/bench/issue24/b8/trace_b8.py 8"""
import statistics
import sys
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import stored_costs
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

torch.set_num_threads(1)
batch_size = int(sys.argv[1]) if len(sys.argv) > 1 else 8
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
log = []
original = P.CostAwareSchedule.update


def update(self, active, num_drafted, num_accepted):
    log.append((time.perf_counter(), int(num_drafted.max()), int(num_accepted.sum()), int(active.sum())))
    original(self, active, num_drafted, num_accepted)


P.CostAwareSchedule.update = update
groups: dict = {}
tokens = steps = 0
for batch in batches(encode(tok, CHAT_PROMPTS[:8]), batch_size, tok.pad_token_id or 0):
    target.generate(**batch, drafter=head, max_new_tokens=64, do_sample=False)
    log.clear()
    target.generate(**batch, drafter=head, max_new_tokens=64, do_sample=False)
    for (t0, k0, _, _), (t1, k1, acc, rows) in zip(log, log[1:]):
        groups.setdefault((k1, "after drafting" if k0 else "after plain"), []).append((t1 - t0) * 1e3)
        tokens += acc + rows
        steps += rows
    print("drafts per step:", "".join(str(k) for _, k, _, _ in log))
costs = stored_costs(target, head, batch_size, torch.device("cpu"), P.CostAwareDraftPolicy().widths())
print(f"batch {batch_size}: calibration loop steps {dict(costs.loop_ms)}; {tokens / steps:.3f} tokens a row a step")
for (k, after), times in sorted(groups.items()):
    print(f"  {k} drafts, {after}: {len(times)} steps, median {statistics.median(times):.1f} ms, "
          f"mean {statistics.mean(times):.1f} ms")
