"""Session j A/B (issue 24): how a batch should price its draft length, on many prompts (bf16 near-ties change the text
between settings, so 8 prompts cannot tell a few per cent apart; see README.md here). Variants of the default (with the
thin-first-run rule), in turns with plain generate() and a chain of 1 in one process:
  "summed": the shipped rule (every active row's expected tokens summed);
  "slowest alpha": the length priced for the active row with the lowest estimate alone (a batch runs until its slowest
                   row is done);
  "lagging row": priced for the active row with the fewest committed tokens (the one the call waits for).
Prompts: the 48 held-out requests of issue 25, or the bench's 16 chat prompts ("bench").
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/chaos/ab_pricing.py BATCH ROUNDS [heldout|bench] [head|indep]"""
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
which = args[3] or "head"
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3" if which == "head" else "drafters/smollm2-135m-instruct")


class Slowest(P.CostAwareDraftPolicy):
    """Prices the length for the active row with the lowest estimate."""


class Lagging(P.CostAwareDraftPolicy):
    """Prices the length for the active row with the fewest committed tokens."""


shipped = P.CostAwareSchedule._lengths


def lengths(self, active, probing):
    if not isinstance(self.policy, (Slowest, Lagging)) or int(active.sum()) < 2:
        return shipped(self, active, probing)
    rows = active.cpu()
    alpha = self.alpha()
    if isinstance(self.policy, Slowest):
        row = int(torch.where(rows, alpha, torch.inf).argmin())
    else:
        row = int(torch.where(rows, self._committed.double(), torch.inf).argmin())
    longest = min(self.policy.max_gamma, 1 + int(self.total_accepted[rows].max()))
    k = P.best_draft_length(alpha[row : row + 1], self.costs, longest, self.policy.min_gain,
                            self.policy.draft_gain(int(rows.sum())))
    if self.given_up():
        k = 0
    if k == 0 and probing:
        k = 1
    return torch.full(rows.shape, k, dtype=torch.long, device=self.device)


P.CostAwareSchedule._lengths = lengths
methods = {"plain": {}, "chain 1": dict(drafter=drafter, gamma=1), "summed": dict(drafter=drafter),
           "slowest alpha": dict(drafter=drafter, gamma=Slowest()), "lagging row": dict(drafter=drafter, gamma=Lagging())}
groups = batches(encode(tok, prompts), batch_size, tok.pad_token_id or 0)
results = in_turns(target, methods, groups, rounds)
print(f"batch {batch_size}, {len(prompts)} prompts ({'bench' if prompts is CHAT_PROMPTS else 'held-out requests'}), "
      f"{rounds} rounds, bf16 greedy, {which}, 48 new tokens")
report(results)
