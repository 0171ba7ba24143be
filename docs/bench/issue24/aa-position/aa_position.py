"""Issue 24, session r: does a method's place in the bench's call order move its ratio? The A/A control (plain
generate() timed again) pooled over runs q and q2 read 1.014-1.017x at every batch size. time_side_by_side shuffles the
methods' order per batch with random.Random(seed), so every run of the default section at batch 4 and 8 (5 methods:
plain, fixed gamma, the default, the default with the unrelated drafter, the A/A control; 8 calls) repeats the same
8 orders. This fits one effect per position (log ratio, position 0 the reference) to every call ratio of those groups:
a method's log ratio to the baseline (the mean of plain's two timings; the A/A's to plain's first) is its position's
effect less the baseline's, plus a per-row constant (the method's own speed in that run).
Run: .venv/bin/python docs/bench/issue24/aa-position/aa_position.py docs/bench/issue24/zen4-q docs/bench/issue24/zen4-q2
"""
import json
import math
import sys
from pathlib import Path

import numpy as np

from hf_specdec.bench.measure import call_orders

METHODS = {  # the default section's group at batch 4 and 8, in the order run_side_by_side times it
    "hf_specdec, fixed gamma": 1,
    "hf_specdec, default": 2,
    "hf_specdec, default, unrelated drafter": 3,
    "plain generate(), timed again (A/A control)": 4,
}
PLAIN, AGAIN, CALLS = 0, 4, 8


def main(folders: list[str]) -> None:
    positions = [{method: order.index(method) for method in range(5)} for order in call_orders(5, CALLS)]
    rows, targets, groups = [], [], []
    for folder in folders:
        for path in sorted(Path(folder).glob("*/results.json")):
            for section in json.loads(path.read_text())["sections"].values():
                for row in section.get("rows", []):
                    name = str(row.get("method"))
                    method = METHODS.get(name.removesuffix(" (fastest)"))
                    if method is None or row.get("batch_size") not in (4, 8) or len(row.get("speedup_pairs", [])) != CALLS:
                        continue
                    for call, ratio in enumerate(row["speedup_pairs"]):
                        at = positions[call]
                        x = np.zeros(5)
                        x[at[method]] += 1
                        if method == AGAIN:
                            x[at[PLAIN]] -= 1
                        else:
                            x[at[PLAIN]] -= 0.5
                            x[at[AGAIN]] -= 0.5
                        rows.append(x[1:])
                        targets.append(math.log(ratio))
                        groups.append((str(path), row["batch_size"], method))
    x, y = np.array(rows), np.array(targets)
    for group in set(groups):  # each row's own level (the method's speed in that run) out; the A/A has none
        if group[2] == AGAIN:
            continue
        index = [i for i, g in enumerate(groups) if g == group]
        x[index] -= x[index].mean(axis=0)
        y[index] -= y[index].mean()
    effects, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ effects
    errors = np.sqrt(np.diag(residual.var() * np.linalg.inv(x.T @ x)))
    print(f"# {len(y)} call ratios from {', '.join(folders)}; orders of the 8 calls: {call_orders(5, CALLS)}")
    for position, (effect, error) in enumerate(zip(effects, errors), start=1):
        print(f"position {position} vs position 0: {100 * effect:+.2f} % +- {100 * error:.2f} %")


if __name__ == "__main__":
    main(sys.argv[1:])
