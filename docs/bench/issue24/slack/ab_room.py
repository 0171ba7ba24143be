"""Session i A/B (issue 24, batch 4, head): does a call's room for max_gamma drafts (buffers and cache slack sized
max_gamma + 1, 7 for the default) cost steps that a fixed chain of 1 (room 2) does not pay? "1 of 6" drafts one token a
step like a chain of 1 but with max_gamma 6; "2 of 6" likewise against a chain of 2. In turns with plain generate(),
summed times. Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/slack/ab_room.py BATCH START:STOP ROUNDS [SLACK]
(SLACK: every cache rollback's slack capped at it)."""
import dataclasses
import random
import sys
import time

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

batch_size = int(sys.argv[1])
start, stop = map(int, sys.argv[2].split(":"))
rounds = int(sys.argv[3])
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fixed(P.DraftPolicy):
    """Drafts `k` a step, with room (buffers, cache slack) for max_gamma."""
    k: int = 1

    def initial_lengths(self, batch_size, device):
        return torch.full((batch_size,), self.k, dtype=torch.long, device=device)


methods = {"plain": {}, "chain 1": dict(drafter=head, gamma=1), "1 of 6": dict(drafter=head, gamma=Fixed(max_gamma=6, k=1)),
           "chain 2": dict(drafter=head, gamma=2), "2 of 6": dict(drafter=head, gamma=Fixed(max_gamma=6, k=2)),
           "default": dict(drafter=head)}
if len(sys.argv) > 4:  # every target rollback with the slack given (chain 1's is 2), whatever max_gamma
    from hf_specdec.cache import CachedModel
    forced = int(sys.argv[4])
    rollback = CachedModel.rollback
    CachedModel.rollback = lambda self, keep, slack: rollback(self, keep, min(slack, forced))
groups = batches(encode(tok, CHAT_PROMPTS[start:stop]), batch_size, tok.pad_token_id or 0)
for name, kwargs in methods.items():  # warm-up, and the calibration
    for batch in groups:
        target.generate(**batch, max_new_tokens=48, do_sample=False, **kwargs)
times = {name: [] for name in methods}
rng = random.Random(0)
for r in range(rounds):
    order = list(methods)
    rng.shuffle(order)
    for name in order:
        total = 0.0
        for batch in groups:
            t0 = time.perf_counter()
            target.generate(**batch, max_new_tokens=48, do_sample=False, **methods[name])
            total += time.perf_counter() - t0
        times[name].append(total)
print(f"batch {batch_size}, prompts {start}:{stop}, {rounds} rounds, bf16 greedy, head"
      + (f", rollback slack capped at {sys.argv[4]}" if len(sys.argv) > 4 else ""))
for name in methods:
    ratios = sorted(p / t for p, t in zip(times["plain"], times[name]))
    print(f"  {name}: {sum(times['plain']) / sum(times[name]):.3f}x plain (per round {ratios[0]:.3f}-{ratios[-1]:.3f})")
