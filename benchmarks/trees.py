"""Draft trees against chains with the shipped EAGLE-3 head: at batch 1, every fixed chain (1-4 drafts), three fixed
trees (top-k / depth / nodes 4/3/8, 4/4/16, 8/6/32), the default (which may run trees) and the default held to chains,
each timed side by side with plain generate() (paired ratios, 8 held-out chat prompts, 64 new tokens), in bf16 greedy
and sampled (temperature 0.7, EOS ignored) and fp32 greedy; bf16 greedy also at batch 4 with batch 1's best chain
and tree. One torch thread on one core (~15 min).

    python benchmarks/trees.py                  # run, append to data/trees.jsonl, print the table
    python benchmarks/trees.py --show RUN       # a recorded run's table (RUN as listed by --runs)
    python benchmarks/trees.py --runs           # one line per recorded run
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench_data import append, load, rows_of, run_bench
from default_policy import runs

TABLE = "trees"
COLUMNS = [("bfloat16", "greedy"), ("bfloat16", "sampled"), ("float32", "greedy")]
BENCH = ["--num-prompts", "8", "--max-new-tokens", "64", "--repeats", "1", "--min-pairs", "8", "--sections", "trees"]
RUNS = [("bfloat16", "greedy", "1,4"), ("bfloat16", "sampled", "1"), ("float32", "greedy", "1")]


def cells(rows: list[dict], batch: int = 1) -> dict:
    """{(dtype, mode): {method: row}} at one batch size; "best chain" is the fastest fixed chain."""
    found: dict = {}
    for row in rows:
        if row["section"] == "trees" and row["batch_size"] == batch:
            found.setdefault((row["dtype"], row["mode"]), {})[row["method"]] = row
    for methods in found.values():
        chains = [row for name, row in methods.items() if name.startswith("chain")]
        if chains:
            methods["best chain"] = max(chains, key=lambda row: row["speedup"])
    return found


def print_table(rows: list[dict]) -> None:
    first = rows[0]
    print(f"{first['date']}, {first['commit']}, {first['machine']}, {first['threads']} torch thread(s)\n")
    found = cells(rows)
    columns = [column for column in COLUMNS if column in found]
    print("| batch 1, x plain generate() (tokens per target forward) | " + " | ".join(f"{d} {m}" for d, m in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for method in ("best chain", "tree 4/3/8", "tree 4/4/16", "tree 8/6/32", "default", "default, chains only"):
        line = []
        for column in columns:
            row = found[column].get(method)
            if row is None:
                line.append("n/a")
                continue
            extra = f", {row['gamma']}" if method == "best chain" else ""
            line.append(f"{row['speedup']:.3f}x ({row.get('tokens_per_step') or 0:.2f}{extra})")
        print(f"| {method} | " + " | ".join(line) + " |")
    batch4 = cells(rows, 4).get(("bfloat16", "greedy"), {})
    if batch4:
        print("\nbfloat16 greedy, batch 4: " + ", ".join(f"{name} {row['speedup']:.3f}x" for name, row in batch4.items()
                                                      if name != "best chain"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--show", metavar="RUN", help="print a recorded run's table instead of running")
    parser.add_argument("--runs", action="store_true", help="list the recorded runs, newest first")
    parser.add_argument("--cpus", default="1", help="the cores to run on, for taskset (default: core 1)")
    args = parser.parse_args()
    grouped = runs(load(TABLE))
    if args.runs:
        for name, rows in sorted(grouped.items(), key=lambda item: item[1][0]["started"], reverse=True):
            print(f"{name}: {rows[0]['machine']}")
        return
    if args.show:
        return print_table(grouped[args.show])
    fresh = []
    with tempfile.TemporaryDirectory() as out:
        for dtype, mode, batches in RUNS:
            extra = ["--ignore-eos"] if mode == "sampled" else []
            report = run_bench([*BENCH, "--threads", "1", "--dtype", dtype, "--modes", mode, "--batch-sizes", batches,
                                *extra], Path(out) / f"{dtype}-{mode}", cpus=args.cpus)
            fresh += rows_of(report)
    append(TABLE, fresh)
    print_table(fresh)


if __name__ == "__main__":
    main()
