"""Issue 24, session o: per-step times of real calls (the 48 held-out requests) with 0 and 1 drafts per row (the head),
by how many rows accepted, against what the calibration prices (a 1-draft step with rejected drafts only)."""
import statistics
import sys
import time
from dataclasses import dataclass
import torch
from hf_specdec import calibration as C
from hf_specdec.bench.prompts import batches, encode
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.cpu import describe

class Sched(C._ClockedSchedule):
    def __init__(self, *a):
        super().__init__(*a); self.acc = []
    def update(self, active, num_drafted, num_accepted):
        self.times.append(time.perf_counter())
        self.acc.append((int(active.sum()), int((num_accepted * active).sum()), int(((num_accepted > 0) & active).sum())))

@dataclass(frozen=True, kw_only=True)
class Pol(C._ClockedPolicy):
    def start(self, target, drafter, batch_size, device, *args, **kwargs):
        s = Sched(self.num_drafts, batch_size, device); self.schedules.append(s); return s

torch.set_num_threads(1)
dtype = getattr(torch, sys.argv[1]); b = int(sys.argv[2])
target, tok = load_smollm2(dtype)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
groups = batches(encode(tok, HELDOUT_REQUESTS), b, tok.pad_token_id or 0)
print("#", describe(), sys.argv[1:], flush=True)
rows = {0: [], 1: []}
plain_total = 0.0; plain_steps = 0
for rnd in range(2):
    for g in groups:
        t = time.perf_counter(); out = target.generate(**g, max_new_tokens=48); dt = time.perf_counter() - t
        if rnd: plain_total += dt; plain_steps += 48
        for k in (0, 1):
            pol = Pol(max_gamma=1, num_drafts=k)
            target.generate(**g, max_new_tokens=48, drafter=head, gamma=pol)
            s = pol.schedules[0]
            if rnd:
                for (t0, t1), a in zip(zip(s.times, s.times[1:]), s.acc[1:]):
                    rows[k].append(((t1 - t0) * 1e3, a))
print(f"plain generate(): {plain_total / plain_steps * 1e3:.1f} ms per step incl. prefill")
for k in (0, 1):
    ts = [t for t, _ in rows[k]]
    print(f"{k} drafts: median {statistics.median(ts):.1f} ms, mean {statistics.mean(ts):.1f}, n {len(ts)}")
    if k:
        by = {}
        for t, (act, acc, nacc) in rows[k]:
            by.setdefault((act == b, nacc), []).append(t)
        for key in sorted(by):
            print(f"   full batch {key[0]}, rows accepting {key[1]}: median {statistics.median(by[key]):.1f} n {len(by[key])}")
costs = C.measure(target, head, b, torch.device("cpu"), (1, 2, 3))
print("calibrated:", {k: round(v, 1) for k, v in costs.loop_ms}, "target", {k: round(v, 1) for k, v in costs.target_ms}, "draft", round(costs.draft_ms, 2), "catch-up", round(costs.catch_up_ms, 3))
