"""Session j A/B (issue 24): in a batch, should a longer draft have to beat the best shorter one by the batch bar (5 %,
as leaving plain steps does) instead of min_gain's 2 %? On 48 held-out requests the head's fixed chain of 1 beat the
default, which drafts 2 about half the time, by 4-5 % at bf16 batch 4. In turns with plain generate() in one process:
a chain of 1, the default, the default with min_gain 0.05 (at batch 4 the same as the batch bar between lengths), the
default capped at one draft (max_gamma 1).
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/chaos/ab_bar.py BATCH ROUNDS [heldout|bench] [head|indep]"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from turns import in_turns, report  # noqa: E402

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.loading import load_drafter  # noqa: E402
from hf_specdec.policy import CostAwareDraftPolicy  # noqa: E402
from hf_specdec.smollm2 import load_smollm2  # noqa: E402

args = sys.argv[1:] + [None] * 4
batch_size, rounds = int(args[0]), int(args[1])
prompts = CHAT_PROMPTS if args[2] == "bench" else HELDOUT_REQUESTS
which = args[3] or "head"
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3" if which == "head" else "drafters/smollm2-135m-instruct")
methods = {"plain": {}, "chain 1": dict(drafter=drafter, gamma=1), "default": dict(drafter=drafter),
           "min_gain 0.05": dict(drafter=drafter, gamma=CostAwareDraftPolicy(min_gain=0.05)),
           "max_gamma 1": dict(drafter=drafter, gamma=CostAwareDraftPolicy(max_gamma=1))}
groups = batches(encode(tok, prompts), batch_size, tok.pad_token_id or 0)
results = in_turns(target, methods, groups, rounds)
print(f"batch {batch_size}, {len(prompts)} prompts ({'bench' if prompts is CHAT_PROMPTS else 'held-out requests'}), "
      f"{rounds} rounds, bf16 greedy, {which}, 48 new tokens")
report(results)
