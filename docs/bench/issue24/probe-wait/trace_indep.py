"""Session i diagnostic (issue 24): the default's decisions with the shipped independent drafter at bf16 batch 4 greedy
(the bench's 8 chat prompts, 48 new tokens): per step the drafts per row, the accepted per row, the rows' alpha, the
probe interval. Run: taskset -c 1 .venv/bin/python docs/bench/issue24/probe-wait/trace_indep.py [batch] [drafter] [START:STOP]
(bench prompts 0:8 by default). Run at 8a3dfbe, before a26d45b."""
import sys

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import stored_costs
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

torch.set_num_threads(1)
batch_size = int(sys.argv[1]) if len(sys.argv) > 1 else 4
path = sys.argv[2] if len(sys.argv) > 2 else "drafters/smollm2-135m-instruct"
target, tok = load_smollm2(torch.bfloat16)
drafter = load_drafter(path)
lines = []
original = P.CostAwareSchedule.update


def update(self, active, num_drafted, num_accepted):
    k = int(num_drafted.max())
    original(self, active, num_drafted, num_accepted)
    if k or self.lengths.max() > 0:
        alpha = " ".join(f"{a:.2f}" for a in self.alpha().tolist())
        lines.append(f"  k={k} acc={num_accepted.tolist()} -> alpha [{alpha}] next {int(self.lengths.max())} "
                     f"interval {self.probe_interval} break-even {self.break_even:.3f}")


P.CostAwareSchedule.update = update
total = drafting = 0
for batch in batches(encode(tok, CHAT_PROMPTS[int(sys.argv[3].split(":")[0]):int(sys.argv[3].split(":")[1])] if len(sys.argv) > 3 else CHAT_PROMPTS[:8]), batch_size, tok.pad_token_id or 0):
    target.generate(**batch, drafter=drafter, max_new_tokens=48, do_sample=False)
    lines.clear()
    seq = []
    orig2 = P.CostAwareSchedule.update

    def rec(self, active, num_drafted, num_accepted):
        seq.append(int(num_drafted.max()))
        orig2(self, active, num_drafted, num_accepted)

    P.CostAwareSchedule.update = rec
    target.generate(**batch, drafter=drafter, max_new_tokens=48, do_sample=False)
    P.CostAwareSchedule.update = orig2
    print("drafts per step:", "".join(map(str, seq)), f"({sum(k > 0 for k in seq)}/{len(seq)} drafting)")
    print("\n".join(lines))
    total += len(seq)
    drafting += sum(k > 0 for k in seq)
costs = stored_costs(target, drafter, batch_size, torch.device("cpu"), P.CostAwareDraftPolicy().widths())
print(f"batch {batch_size}: costs {costs}")
print(f"drafting steps {drafting}/{total}")
