"""Issue 24's 36 settings from runs of run.sh: the default's ratio to plain generate() per drafter, dtype, mode and
batch size, with each paired median's 90 % interval (where the bench recorded one) and the A/A control of the default
section's group; then the count against the goal (>= 0.97x): met by the median, missed with the whole interval below
the bar (the run tells the miss apart from noise), or missed within noise.

With several run folders (the same code, one machine), each setting pools the call ratios of its runs (`speedup_pairs`,
kept since fb97de3): the median and interval over all of them, with each run's own median beside it (runs from before
that: the median of the runs' medians, no interval).
Pooling runs matters on a noisy machine: each run calibrates once per setting and its 8 calls share the decisions
that calibration led to, so one run's interval shows the calls' noise, not the calibration's.
Run: .venv/bin/python docs/bench/issue24/summary.py docs/bench/issue24/zen4-q [docs/bench/issue24/zen4-r ...]
"""
import json
import statistics
import sys
from pathlib import Path

from hf_specdec.bench.measure import median_interval
from hf_specdec.bench.runner import INTERVAL_LEVEL

BAR = 0.97
DRAFTERS = {  # label: (section, method)
    "shipped head, default": ("feature", "feature head, default"),
    "shipped independent drafter, default": ("default", "hf_specdec, default"),
    "unrelated drafter, default": ("default", "hf_specdec, default, unrelated drafter"),
}
CONTROL = "A/A control (plain again)"
RUNS = [(dtype, mode, f"{dtype}-{'greedy' if mode == 'greedy' else 'sampled-ignore-eos'}")
        for dtype in ("bfloat16", "float32") for mode in ("greedy", "sampled")]


def read(root: Path) -> dict:
    """{(label, dtype, mode, batch): row} of one run folder."""
    found = {}
    for dtype, mode, folder in RUNS:
        if not (root / folder / "results.json").exists():  # a partial run: its settings are left out
            continue
        sections = json.loads((root / folder / "results.json").read_text())["sections"]
        for label, (section, method) in DRAFTERS.items():
            for row in sections[section]["rows"]:
                if row["method"] == method and row.get("gamma") == "default":
                    found[label, dtype, mode, row["batch_size"]] = row
        for row in sections["default"]["rows"]:
            if row["method"].startswith("plain generate(), timed again"):
                found[CONTROL, dtype, mode, row["batch_size"]] = row
    return found


def pooled(rows: list[dict]) -> tuple[float, list[float] | None, int]:
    """(median, interval, calls) of one setting over runs: one run's own numbers, else its runs' call ratios pooled
    (where a run kept none: the median of the runs' medians, without an interval)."""
    if len(rows) == 1:
        return rows[0]["speedup"], rows[0].get("speedup_interval"), len(rows[0].get("speedup_pairs", ()))
    if not all(row.get("speedup_pairs") for row in rows):
        return statistics.median(row["speedup"] for row in rows), None, 0
    pairs = [ratio for row in rows for ratio in row["speedup_pairs"]]
    interval = median_interval(pairs, INTERVAL_LEVEL)
    return statistics.median(pairs), interval and [interval[0], interval[1]], len(pairs)


def main() -> None:
    roots = [Path(arg) for arg in sys.argv[1:]]
    runs = [read(root) for root in roots]
    common = [key for key in runs[0] if all(key in run for run in runs)]  # partial runs: the settings all of them ran
    settings = {key: pooled([run[key] for run in runs]) for key in common}

    def cell(key) -> str:
        speedup, interval, _ = settings[key]
        text = f"{speedup:.3f}" + (f" ({interval[0]:.3f}–{interval[1]:.3f})" if interval else "")
        if len(runs) > 1:
            text += " [" + ", ".join(f"{run[key]['speedup']:.3f}" for run in runs) + "]"
        return text

    ran = [(dtype, mode, folder) for dtype, mode, folder in RUNS if (CONTROL, dtype, mode, 1) in settings]
    calls = sorted({n for _, _, n in settings.values()})
    print(f"# {len(runs)} run(s): {', '.join(str(root) for root in roots)}; calls per setting pooled: {calls}")
    print("| x plain generate() (90 % interval)" + (" [each run]" if len(runs) > 1 else "") + " | "
          + " | ".join(f"{d} {m} batch 1 / 4 / 8" for d, m, _ in ran) + " |")
    print("|---|" + "---|" * len(ran))
    for label in [*DRAFTERS, CONTROL]:
        cells = [" / ".join(cell((label, dtype, mode, size)) for size in (1, 4, 8)) for dtype, mode, _ in ran]
        print(f"| {label} | " + " | ".join(cells) + " |")
    judged = {key: value for key, value in settings.items() if key[0] != CONTROL}
    met = [key for key, (s, _, _) in judged.items() if s >= BAR]
    below = [key for key, (s, i, _) in judged.items() if s < BAR and i is not None and i[1] < BAR]
    noise = [key for key, (s, i, _) in judged.items() if s < BAR and i is not None and i[1] >= BAR]
    unknown = [key for key, (s, i, _) in judged.items() if s < BAR and i is None]
    print(f"\n{len(met)} of {len(judged)} >= {BAR}x; missed with the whole interval below: {len(below)} {below}; "
          f"missed within noise: {len(noise)} {noise}"
          + (f"; missed, no interval recorded: {unknown}" if unknown else ""))


if __name__ == "__main__":
    main()
