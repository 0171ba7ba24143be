"""Session j A/B (issue 24): the default against fixed chains and prior_alpha 0.4 on many prompts, to average out the
text changes that bf16 near-ties make between settings. Prompts: the 48 held-out chat requests of issue 25
(`hf_specdec.distill.heldout_requests`, never trained on, not the bench's), or the bench's 16 chat prompts ("bench").
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/chaos/ab_wide.py BATCH ROUNDS [heldout|bench] [head|indep] [sampled]"""
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

batch_size, rounds = int(sys.argv[1]), int(sys.argv[2])
prompts = CHAT_PROMPTS if len(sys.argv) > 3 and sys.argv[3] == "bench" else HELDOUT_REQUESTS
which = sys.argv[4] if len(sys.argv) > 4 else "head"
sampled = len(sys.argv) > 5 and sys.argv[5] == "sampled"
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3" if which == "head" else "drafters/smollm2-135m-instruct")
methods = {"plain": {}, "chain 1": dict(drafter=drafter, gamma=1), "chain 2": dict(drafter=drafter, gamma=2),
           "chain 3": dict(drafter=drafter, gamma=3), "default": dict(drafter=drafter),
           "prior_alpha 0.4": dict(drafter=drafter, gamma=CostAwareDraftPolicy(prior_alpha=0.4))}
groups = batches(encode(tok, prompts), batch_size, tok.pad_token_id or 0)
results = in_turns(target, methods, groups, rounds, do_sample=sampled)
print(f"batch {batch_size}, {len(prompts)} prompts ({'bench' if prompts is CHAT_PROMPTS else 'held-out requests'}), "
      f"{rounds} rounds, bf16 {'sampled' if sampled else 'greedy'}, {which}, 48 new tokens")
report(results)
