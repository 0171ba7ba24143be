"""Session j A/B (issue 24): the default with and without the thin-first-run rule (`CostAwareSchedule._thin_first_run`:
a first run of drafting steps that accepted something does not end before its rows have tried as many drafts as their
priors are worth), in turns with plain generate() and fixed chains in one process, on many prompts (bf16 near-ties
change the text between settings; see README.md here). Prompts: the 48 held-out requests of issue 25 (default) or the
bench's 16 chat prompts ("bench"); the unrelated drafter is the bench's (the independent drafter's architecture,
random weights, seed 0).
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/chaos/ab_first_run.py BATCH ROUNDS [heldout|bench]
[head|indep|unrelated] [greedy|sampled] [float32]"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from turns import in_turns, report  # noqa: E402

from hf_specdec import policy as P  # noqa: E402
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.loading import load_drafter  # noqa: E402
from hf_specdec.smollm2 import load_smollm2  # noqa: E402

args = sys.argv[1:] + [None] * 6
batch_size, rounds = int(args[0]), int(args[1])
prompts = CHAT_PROMPTS if args[2] == "bench" else HELDOUT_REQUESTS
which, sampled, dtype = args[3] or "head", args[4] == "sampled", torch.float32 if args[5] == "float32" else torch.bfloat16
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3" if which == "head" else "drafters/smollm2-135m-instruct")
if which == "unrelated":  # as the bench makes it: the independent drafter's architecture, fresh random weights
    torch.manual_seed(0)
    drafter = type(drafter)(drafter.config).to(next(drafter.parameters()).dtype).eval()
    drafter.generation_config = load_drafter("drafters/smollm2-135m-instruct").generation_config


class Before(P.CostAwareDraftPolicy):
    """The default as shipped before the rule (no thin-first-run extension)."""


thin = P.CostAwareSchedule._thin_first_run
P.CostAwareSchedule._thin_first_run = lambda self: not isinstance(self.policy, Before) and thin(self)
methods = {"plain": {}, "chain 1": dict(drafter=drafter, gamma=1), "chain 2": dict(drafter=drafter, gamma=2),
           "default": dict(drafter=drafter), "default before": dict(drafter=drafter, gamma=Before())}
groups = batches(encode(tok, prompts), batch_size, tok.pad_token_id or 0)
results = in_turns(target, methods, groups, rounds, do_sample=sampled)
print(f"batch {batch_size}, {len(prompts)} prompts ({'bench' if prompts is CHAT_PROMPTS else 'held-out requests'}), "
      f"{rounds} rounds, {str(dtype)[6:]} {'sampled' if sampled else 'greedy'}, {which}, 48 new tokens")
report(results)
