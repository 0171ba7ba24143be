"""Session p (issue 24): plain generate(), the default with the unrelated drafter and the same drafter with plain steps
only (`_ClockedPolicy(0)`), bf16 batch 4 greedy on the bench's 8 chat prompts: 6 rounds of both batches each, in a fixed
order after a warm-up (calibration) round, min and median per round; then one cProfile of a default and of a
plain-steps round (top functions by own time).
Run: taskset -c 0 .venv/bin/python docs/bench/issue24/useless-b4/profile_p.py
"""
import cProfile
import io
import pstats
import statistics
import time

import torch
from pair import load

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import _ClockedPolicy


def main() -> None:
    torch.set_num_threads(1)
    target, tokenizer, _, unrelated = load(torch.bfloat16)
    groups = batches(encode(tokenizer, CHAT_PROMPTS[:8]), 4, tokenizer.pad_token_id or 0)
    methods = {"plain": {}, "default": dict(drafter=unrelated),
               "plain steps only": dict(drafter=unrelated, gamma=_ClockedPolicy(num_drafts=0))}

    def run(kwargs) -> float:
        start = time.perf_counter()
        for batch in groups:
            target.generate(**batch, max_new_tokens=48, **kwargs)
        return time.perf_counter() - start

    for kwargs in methods.values():
        run(kwargs)  # warm-up and calibration
    times = {name: [] for name in methods}
    for _ in range(6):
        for name, kwargs in methods.items():
            times[name].append(run(kwargs))
    for name, seconds in times.items():
        print(f"{name}: min {min(seconds):.3f} s, median {statistics.median(seconds):.3f} s per round")
    for name in ("default", "plain steps only"):
        profile = cProfile.Profile()
        profile.enable()
        run(methods[name])
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(4)
        print(f"== {name}\n" + out.getvalue().strip())


if __name__ == "__main__":
    main()
