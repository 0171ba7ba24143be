"""Session j A/B (issue 24): after d0c81be (the batch bar between lengths, the thin-first-run rule), should a batch price
its draft length for its slowest row (the active row with the lowest estimate) instead of the rows' summed tokens? In
turns with plain generate() and a chain of 1 in one process, on the 48 held-out requests of issue 25 (or the bench's
16 chat prompts: "bench"). Both variants keep every other rule of the default.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/chaos/ab_slowest.py BATCH ROUNDS [heldout|bench] [head|indep] [float32]"""
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

args = sys.argv[1:] + [None] * 4
batch_size, rounds = int(args[0]), int(args[1])
prompts = CHAT_PROMPTS if args[2] == "bench" else HELDOUT_REQUESTS
which, dtype = args[3] or "head", torch.float32 if args[4] == "float32" else torch.bfloat16
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3" if which == "head" else "drafters/smollm2-135m-instruct")


class Slowest(P.CostAwareDraftPolicy):
    """Prices the length for the active row with the lowest estimate."""


shipped = P.best_draft_length


def lengths(self, active, probing, _shipped=P.CostAwareSchedule._lengths):
    if not isinstance(self.policy, Slowest):
        return _shipped(self, active, probing)
    P.best_draft_length = lambda a, *rest: shipped(a.min()[None], *rest)  # the slowest row alone
    try:
        return _shipped(self, active, probing)
    finally:
        P.best_draft_length = shipped


P.CostAwareSchedule._lengths = lengths
methods = {"plain": {}, "chain 1": dict(drafter=drafter, gamma=1), "default": dict(drafter=drafter),
           "slowest alpha": dict(drafter=drafter, gamma=Slowest())}
groups = batches(encode(tok, prompts), batch_size, tok.pad_token_id or 0)
results = in_turns(target, methods, groups, rounds)
print(f"batch {batch_size}, {len(prompts)} prompts ({'bench' if prompts is CHAT_PROMPTS else 'held-out requests'}), "
      f"{rounds} rounds, {str(dtype)[6:]} greedy, {which}, 48 new tokens")
report(results)
