"""Issue 24's diagnostic A/Bs: methods timed in turns against plain generate() in one process (one calibration for
all), the order shuffled each round, times summed, and each method's target forwards and identical rows counted, so
that a difference in speed can be told apart from a difference in the text (bf16 near-ties flip between settings).

    from turns import in_turns, report
    results = in_turns(target, {"plain": {}, "chain 2": dict(drafter=head, gamma=2)}, groups, rounds=2)
    report(results)
"""
from __future__ import annotations

import random
import time

import torch

from hf_specdec.stats import SpeculativeStats


def in_turns(target, methods: dict[str, dict], groups: list[dict], rounds: int, max_new_tokens: int = 48,
             do_sample: bool = False, seed: int = 0) -> dict[str, dict]:
    """{name: {"times": [seconds per round], "forwards": target forwards over the groups, "identical": rows equal to
    plain's, "rows": rows}} for each method (kwargs for generate(); "plain" must be one of them, with no drafter).
    A first round (warm-up and calibration) is not timed; forwards and identical rows come from it."""
    sample = dict(do_sample=do_sample, **({"temperature": 0.7} if do_sample else {}))
    results = {name: {"times": [], "forwards": 0, "identical": 0, "rows": 0} for name in methods}
    outputs = {}
    for name, kwargs in methods.items():
        for i, batch in enumerate(groups):
            torch.manual_seed(seed + i)
            stats = SpeculativeStats() if "drafter" in kwargs else None
            out = target.generate(**batch, max_new_tokens=max_new_tokens, **sample, **kwargs,
                                  **({"stats": stats} if stats is not None else {}))
            outputs[name, i] = out
            results[name]["forwards"] += stats.target_forwards if stats is not None else max_new_tokens
    for name in methods:
        for i in range(len(groups)):
            mine, plain = outputs[name, i], outputs["plain", i]
            width = min(mine.shape[1], plain.shape[1])
            results[name]["identical"] += int((mine[:, :width] == plain[:, :width]).all(dim=1).sum())
            results[name]["rows"] += mine.shape[0]
    rng = random.Random(seed)
    for _ in range(rounds):
        order = list(methods)
        rng.shuffle(order)
        for name in order:
            total = 0.0
            for i, batch in enumerate(groups):
                torch.manual_seed(seed + i)
                start = time.perf_counter()
                target.generate(**batch, max_new_tokens=max_new_tokens, **sample, **methods[name])
                total += time.perf_counter() - start
            results[name]["times"].append(total)
    return results


def report(results: dict[str, dict]) -> None:
    plain = results["plain"]["times"]
    for name, result in results.items():
        ratios = sorted(p / t for p, t in zip(plain, result["times"]))
        print(f"  {name}: {sum(plain) / sum(result['times']):.3f}x plain (per round {ratios[0]:.3f}-{ratios[-1]:.3f}), "
              f"target forwards {result['forwards']}, rows identical to plain {result['identical']}/{result['rows']}",
              flush=True)
