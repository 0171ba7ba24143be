"""Session l (issue 24): where a useless drafter's time goes at batch B, in turns with plain generate() on the 48
held-out requests: the default with an unrelated drafter (the shipped drafter's architecture, fresh random weights,
no declared acceptance, as the bench builds it), the same drafter with plain steps only (calibration's
_ClockedPolicy(0): the loop's own overhead, no drafting at all), and the default with the shipped independent drafter.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/useless-b4/ab_useless.py DTYPE BATCH ROUNDS [chat]
(chat: the bench's 8 chat prompts instead of the held-out requests; session p.)
"""
import sys

import torch
from pair import load

sys.path.insert(0, "docs/bench/issue24")
from turns import in_turns, report  # noqa: E402

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402
from hf_specdec.calibration import _ClockedPolicy  # noqa: E402
from hf_specdec.cpu import describe  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402

dtype, batch_size, rounds = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
target, tok, drafter, unrelated = load(dtype)
chat = sys.argv[4:] == ["chat"]
requests = CHAT_PROMPTS[:8] if chat else HELDOUT_REQUESTS
groups = batches(encode(tok, requests), batch_size, tok.pad_token_id or 0)
methods = {"plain": {}, "unrelated, default": dict(drafter=unrelated),
           "unrelated, plain steps only": dict(drafter=unrelated, gamma=_ClockedPolicy(num_drafts=0)),
           "independent, default": dict(drafter=drafter)}
print(f"# {describe()}; batch {batch_size}, {len(requests)} {'chat prompts' if chat else 'held-out requests'}, "
      f"{rounds} rounds, {sys.argv[1]} "
      "greedy, 48 new tokens", flush=True)
report(in_turns(target, methods, groups, rounds=rounds))
