"""Issue 24, session r: does the default's drafting once rows of a batch have finished pay? In the bench the head at
fp32 batch 8 greedy starts plain (break-even 0.57 over its prior 0.509 at the batch-8 bar, 15 %) and no probe fits a
48-token call, but once 4 or fewer rows are left the bar is 8 % (a lone row's 2 %) and it drafts: 1.108 tokens a forward
in runs q and r, which read 1.005x and 0.968x plain with the same decisions. In turns with plain generate(), on the 48
held-out requests (6 batches of 8) and the bench's 8 chat prompts, 48 new tokens, greedy: the default as it is, and the
default whose bar stays the one of the call's batch size when rows finish ("bar held").
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/tail-rows/ab_tail.py DTYPE BATCH ROUNDS
"""
import statistics
import sys
import time
from dataclasses import dataclass

import torch

import hf_specdec  # noqa: F401  (installs drafter=)
from hf_specdec import policy as P
from hf_specdec.bench.models import DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.cpu import describe
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2


@dataclass(frozen=True, kw_only=True)
class BarHeld(P.CostAwareDraftPolicy):
    """The default, with the batch bar of `batch` rows however many of them are still active."""

    batch: int = 8

    def draft_gain(self, rows: int) -> float:
        return super().draft_gain(self.batch)


def main() -> None:
    dtype, batch_size, rounds = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    target, tokenizer = load_smollm2(dtype)
    head = load_drafter(DEFAULT_FEATURE_DRAFTER)
    pad = tokenizer.pad_token_id or 0
    groups = batches(encode(tokenizer, HELDOUT_REQUESTS), batch_size, pad) + batches(
        encode(tokenizer, CHAT_PROMPTS[:8]), batch_size, pad)
    methods = {
        "plain generate()": {},
        "default": dict(drafter=head),
        "default, bar held": dict(drafter=head, gamma=BarHeld(batch=batch_size)),
    }
    print("#", describe(), sys.argv[1:], flush=True)
    for kwargs in methods.values():  # warm-up and calibration
        target.generate(**groups[0], max_new_tokens=8, **kwargs)
    seconds = {name: [0.0] * rounds for name in methods}
    steps = {name: [0, 0] for name in methods}  # (row-steps that drafted, all row-steps), round 0
    for r in range(rounds):
        for i, batch in enumerate(groups):
            names = list(methods) if (r + i) % 2 == 0 else list(methods)[::-1]
            for name in names:
                stats = hf_specdec.SpeculativeStats() if name != "plain generate()" else None
                extra = {"stats": stats} if stats is not None else {}
                start = time.perf_counter()
                target.generate(**batch, max_new_tokens=48, **methods[name], **extra)
                seconds[name][r] += time.perf_counter() - start
                if r == 0 and stats is not None:
                    lengths = stats.draft_lengths
                    steps[name][0] += int(lengths[1:].sum())
                    steps[name][1] += int(lengths.sum())
    plain = seconds["plain generate()"]
    for name in methods:
        ratios = [p / s for p, s in zip(plain, seconds[name])]
        print(f"{name}: {statistics.median(ratios):.3f}x plain (rounds {min(ratios):.3f}-{max(ratios):.3f}); "
              f"row-steps drafting {steps[name][0]} of {steps[name][1]} (round 0)", flush=True)


if __name__ == "__main__":
    main()
