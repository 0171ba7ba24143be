"""Session f diagnostic (run: taskset -c 1 .venv/bin/python docs/bench/issue24/prior/trace_b4.py 4): the default's per-step choices at batch 4 (bf16, head v3, greedy)."""
import sys, torch
import hf_specdec
from hf_specdec import policy as P
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.loading import load_drafter
from hf_specdec.bench.prompts import CHAT_PROMPTS, encode, batches
torch.set_num_threads(1)
bs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
log = []
orig = P.CostAwareSchedule.update
def update(self, active, num_drafted, num_accepted):
    k = int(self.lengths.max())
    orig(self, active, num_drafted, num_accepted)
    log.append((k, active.int().tolist(), num_drafted.tolist(), num_accepted.tolist(),
                [round(a, 2) for a in self.alpha().tolist()], int(self.lengths.max()), self.probe_interval, self.plain_steps))
P.CostAwareSchedule.update = update
ids = encode(tok, CHAT_PROMPTS)
for b in batches(ids, bs, tok.pad_token_id or 0):
    target.generate(**b, drafter=head, max_new_tokens=48, do_sample=False)
    log.clear()
    target.generate(**b, drafter=head, max_new_tokens=48, do_sample=False)
    print("break-even", None)
    for row in log: print(row)
    print("---")
