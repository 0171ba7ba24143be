"""The default draft length (no `gamma=`) against plain generate(): 36 settings, three drafters (the shipped
EAGLE-3 head, the shipped independent drafter, an unrelated drafter with random weights) x bf16 / fp32 x greedy /
sampled x batch 1 / 4 / 8, each timed side by side with plain generate() (paired ratios, 8 held-out chat prompts,
48 new tokens; sampled: temperature 0.7 with EOS ignored so every method decodes the same tokens), plus an A/A
control (plain generate() against itself). One torch thread on one core (~70 min).

    python benchmarks/default_policy.py                 # run, append to data/default_policy.jsonl, print the table
    python benchmarks/default_policy.py --show RUN      # a recorded run's table (RUN as listed by --runs)
    python benchmarks/default_policy.py --runs          # one line per recorded run

The table's goal: the default >= 0.97x plain in every setting. A miss whose whole 90 % interval lies below the bar is
told apart from one within noise.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench_data import append, load, rows_of, run_bench

TABLE = "default_policy"
BAR = 0.97
DRAFTERS = {  # label: (section, method)
    "shipped EAGLE-3 head": ("feature", "feature head, default"),
    "shipped independent drafter": ("default", "hf_specdec, default"),
    "unrelated drafter (random weights)": ("default", "hf_specdec, default, unrelated drafter"),
}
CONTROL = "A/A control (plain again)"
SETTINGS = [("bfloat16", "greedy"), ("bfloat16", "sampled"), ("float32", "greedy"), ("float32", "sampled")]
BENCH = ["--num-prompts", "8", "--max-new-tokens", "48", "--repeats", "1", "--min-pairs", "8",
         "--batch-sizes", "1,4,8", "--gammas", "1", "--sections", "default,feature"]


def settings_of(rows: list[dict]) -> dict:
    """{(label, dtype, mode, batch): row} of one run."""
    found = {}
    for row in rows:
        key = (row["dtype"], row["mode"], row["batch_size"])
        for label, (section, method) in DRAFTERS.items():
            if row["section"] == section and row["method"] == method and row.get("gamma") == "default":
                found[(label, *key)] = row
        if row["section"] == "default" and row["method"].startswith("plain generate(), timed again"):
            found[(CONTROL, *key)] = row
    return found


def verdict(settings: dict) -> tuple[int, int, float, list]:
    """(settings >= the bar, settings judged, the lowest ratio, misses with the whole interval below the bar)."""
    judged = {key: row for key, row in settings.items() if key[0] != CONTROL}
    met = sum(row["speedup"] >= BAR for row in judged.values())
    below = [key for key, row in judged.items()
             if row["speedup"] < BAR and row.get("speedup_interval") and row["speedup_interval"][1] < BAR]
    return met, len(judged), min(row["speedup"] for row in judged.values()), below


def runs(rows: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["run"], []).append(row)
    return grouped


def print_runs(grouped: dict[str, list[dict]]) -> None:
    print("| date | commit | machine | threads | default >= 0.97x plain | its lowest | head, bf16, batch 4, greedy |")
    print("|---|---|---|---|---|---|---|")
    for name, rows in sorted(grouped.items(), key=lambda item: item[1][0]["started"], reverse=True):
        settings = settings_of(rows)
        met, judged, lowest, _ = verdict(settings)
        head = settings.get(("shipped EAGLE-3 head", "bfloat16", "greedy", 4))
        first = rows[0]
        head = f"{head['speedup']:.3f}x" if head else "n/a"
        print(f"| {first['date']} | {first['commit']} | {first['machine']} | {first['threads']} | {met} of {judged} | "
              f"{lowest:.3f}x | {head} |")


def print_table(rows: list[dict]) -> None:
    settings = settings_of(rows)
    first = rows[0]
    print(f"{first['date']}, {first['commit']}, {first['machine']}, {first['threads']} torch thread(s)\n")
    ran = [setting for setting in SETTINGS if (CONTROL, *setting, 1) in settings]
    print("| x plain generate() (90 % interval) | " + " | ".join(f"{d} {m}, batch 1 / 4 / 8" for d, m in ran) + " |")
    print("|---|" + "---|" * len(ran))

    def cell(key) -> str:
        row = settings.get(key)
        if row is None:
            return "n/a"
        interval = row.get("speedup_interval")
        return f"{row['speedup']:.3f}" + (f" ({interval[0]:.3f}–{interval[1]:.3f})" if interval else "")

    for label in [*DRAFTERS, CONTROL]:
        print(f"| {label} | " + " | ".join(" / ".join(cell((label, *s, b)) for b in (1, 4, 8)) for s in ran) + " |")
    met, judged, lowest, below = verdict(settings)
    print(f"\n{met} of {judged} >= {BAR}x (lowest {lowest:.3f}x); missed with the whole interval below the bar: {below}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--show", metavar="RUN", help="print a recorded run's table instead of running")
    parser.add_argument("--runs", action="store_true", help="list the recorded runs, newest first")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--cpus", default="1", help="the cores to run on, for taskset (default: core 1)")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    args = parser.parse_args()
    grouped = runs(load(TABLE))
    if args.runs:
        return print_runs(grouped)
    if args.show:
        return print_table(grouped[args.show])
    fresh = []
    with tempfile.TemporaryDirectory() as out:
        for dtype in args.dtypes.split(","):
            for mode in ("greedy", "sampled"):
                extra = ["--ignore-eos"] if mode == "sampled" else []
                report = run_bench([*BENCH, "--threads", str(args.threads), "--dtype", dtype, "--modes", mode, *extra],
                                   Path(out) / f"{dtype}-{mode}", cpus=args.cpus)
                fresh += rows_of(report)
    append(TABLE, fresh)
    print_table(fresh)


if __name__ == "__main__":
    main()
