"""Session h diagnostic (issue 24, batch 8): why the default ran 0.96x plain at batch 8 when its calibration let it draft.
bf16 target, head version 4, greedy, 1 thread, the bench's 8 chat prompts as one batch of 8, 64 new tokens. Times, in
turns (3 rounds, the fastest of each): plain generate(), fixed gamma 1 and 2, the default, and the default with its
calibration's drafting steps priced 7 % lower (as a noisy calibration did in the bench), whose steps are also traced
by kind (drafts per row, and whether the step before drafted). Run: taskset -c 1 .venv/bin/python docs/bench/issue24/b8/mix_b8.py"""
import dataclasses
import statistics
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import step_costs
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
(batch,) = batches(encode(tok, CHAT_PROMPTS[:8]), 8, tok.pad_token_id or 0)
costs = step_costs(target, head, 8, torch.device("cpu"), P.CostAwareDraftPolicy().widths(), False,
                   target.config.vocab_size, target.generation_config)
loop = dict(costs.loop_ms)
cheap = dataclasses.replace(costs, loop_ms={k: ms * (0.93 if k else 1.0) for k, ms in loop.items()})
print("calibration loop steps", {k: round(ms, 1) for k, ms in loop.items()}, "priced 7 % lower:",
      {k: round(ms, 1) for k, ms in dict(cheap.loop_ms).items()})
log = []
original = P.CostAwareSchedule.update


def update(self, active, num_drafted, num_accepted):
    log.append((time.perf_counter(), int(num_drafted.max()), int(num_accepted.sum()), int(active.sum())))
    original(self, active, num_drafted, num_accepted)


P.CostAwareSchedule.update = update
methods = {"plain": {}, "gamma 1": dict(drafter=head, gamma=1), "gamma 2": dict(drafter=head, gamma=2),
           "default": dict(drafter=head), "default, cheap": dict(drafter=head, gamma=P.CostAwareDraftPolicy(costs=cheap))}
times = {name: [] for name in methods}
new_tokens = {}
for name, kwargs in methods.items():  # warm-up
    target.generate(**batch, max_new_tokens=64, do_sample=False, **kwargs)
for _ in range(3):
    for name, kwargs in methods.items():
        log.clear()
        start = time.perf_counter()
        out = target.generate(**batch, max_new_tokens=64, do_sample=False, **kwargs)
        times[name].append(time.perf_counter() - start)
        new_tokens[name] = int((out[:, batch["input_ids"].shape[1]:] != (tok.pad_token_id or 0)).sum())
        if name == "default, cheap":
            traced = list(log)
for name in methods:
    print(f"{name}: {min(times[name]) * 1e3:.0f} ms, {times['plain'][0] and min(times['plain']) / min(times[name]):.3f}x plain")
print("default, cheap: drafts per step", "".join(str(k) for _, k, _, _ in traced))
groups: dict = {}
for (t0, k0, _, _), (t1, k1, acc, rows) in zip(traced, traced[1:]):
    groups.setdefault((k1, "after drafting" if k0 else "after plain", rows), []).append((t1 - t0) * 1e3)
for (k, after, rows), ms in sorted(groups.items()):
    print(f"  {k} drafts, {after}, {rows} rows: {len(ms)} steps, median {statistics.median(ms):.1f} ms")
