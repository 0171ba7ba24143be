"""Session j diagnostic (issue 24): what the default and fixed chains do at batch 4 on the 48 held-out requests (bf16,
greedy, 48 new tokens): steps by their width (most drafts of a row), tokens per row-step, accepted drafts by
position. Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/chaos/trace_wide.py BATCH [head|indep]"""
import collections
import sys

import torch

from hf_specdec import loop
from hf_specdec.bench.prompts import batches, encode
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.stats import SpeculativeStats

torch.set_num_threads(1)
batch_size = int(sys.argv[1])
which = sys.argv[2] if len(sys.argv) > 2 else "head"
target, tok = load_smollm2(torch.bfloat16)
drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3" if which == "head" else "drafters/smollm2-135m-instruct")
groups = batches(encode(tok, HELDOUT_REQUESTS), batch_size, tok.pad_token_id or 0)
widths = collections.Counter()
original = SpeculativeStats.record_step


def record_step(self, active, num_drafted, num_accepted, num_new):
    widths[int(num_drafted.max())] += 1
    per_row[0] += int(active.sum())
    drafted[0] += int(num_drafted.sum())
    accepted[0] += int(num_accepted.sum())
    return original(self, active, num_drafted, num_accepted, num_new)


SpeculativeStats.record_step = record_step
for name, gamma in (("chain 1", 1), ("chain 2", 2), ("default", None)):
    widths.clear()
    per_row, drafted, accepted = [0], [0], [0]
    stats = SpeculativeStats()
    for batch in groups:  # the first call of a setting calibrates; the counts are of a second pass
        target.generate(**batch, drafter=drafter, gamma=gamma, max_new_tokens=48, do_sample=False)
    widths.clear()
    per_row, drafted, accepted = [0], [0], [0]
    for batch in groups:
        target.generate(**batch, drafter=drafter, gamma=gamma, max_new_tokens=48, do_sample=False, stats=stats)
    plain = stats.target_forwards - sum(widths.values())
    print(f"{name}: target forwards {stats.target_forwards} (plain steps {plain}, by width {dict(sorted(widths.items()))}); "
          f"drafting row-steps {per_row[0]}, drafts {drafted[0]}, accepted {accepted[0]} "
          f"({accepted[0] / max(1, drafted[0]):.3f} per draft)", flush=True)
