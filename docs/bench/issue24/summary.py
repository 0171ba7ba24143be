"""Issue 24's 36 settings from one run of run.sh: the default's ratio to plain generate() per drafter, dtype, mode
and batch size, with each paired median's 90 % interval (where the bench recorded one) and the A/A control of the
default section's group; then the count against the goal (>= 0.97x): met by the median, missed with the whole
interval below the bar (this run tells the miss apart from noise), or missed within noise.
Run: .venv/bin/python docs/bench/issue24/summary.py docs/bench/issue24/zen4-p
"""
import json
import sys
from pathlib import Path

BAR = 0.97
DRAFTERS = {  # label: (section, method)
    "shipped head, default": ("feature", "feature head, default"),
    "shipped independent drafter, default": ("default", "hf_specdec, default"),
    "unrelated drafter, default": ("default", "hf_specdec, default, unrelated drafter"),
}
RUNS = [(dtype, mode, f"{dtype}-{'greedy' if mode == 'greedy' else 'sampled-ignore-eos'}")
        for dtype in ("bfloat16", "float32") for mode in ("greedy", "sampled")]


def main() -> None:
    root = Path(sys.argv[1])
    found, control = {}, {}
    for dtype, mode, folder in RUNS:
        sections = json.loads((root / folder / "results.json").read_text())["sections"]
        for label, (section, method) in DRAFTERS.items():
            for row in sections[section]["rows"]:
                if row["method"] == method and row.get("gamma") == "default":
                    found[label, dtype, mode, row["batch_size"]] = (row["speedup"], row.get("speedup_interval"))
        for row in sections["default"]["rows"]:
            if row["method"].startswith("plain generate(), timed again"):
                control[dtype, mode, row["batch_size"]] = (row["speedup"], row.get("speedup_interval"))

    def cell(value) -> str:
        speedup, interval = value
        return f"{speedup:.3f}" + (f" ({interval[0]:.3f}–{interval[1]:.3f})" if interval else "")

    print("| x plain generate() (90 % interval) | " + " | ".join(f"{d} {m} batch 1 / 4 / 8" for d, m, _ in RUNS) + " |")
    print("|---|" + "---|" * len(RUNS))
    for label in [*DRAFTERS, "A/A control (plain again)"]:
        source = control if label.startswith("A/A") else {k[1:]: v for k, v in found.items() if k[0] == label}
        cells = [" / ".join(cell(source[dtype, mode, size]) for size in (1, 4, 8)) for dtype, mode, _ in RUNS]
        print(f"| {label} | " + " | ".join(cells) + " |")
    met = [k for k, (s, _) in found.items() if s >= BAR]
    below = [k for k, (s, i) in found.items() if s < BAR and i is not None and i[1] < BAR]
    noise = [k for k, (s, i) in found.items() if s < BAR and i is not None and i[1] >= BAR]
    unknown = [k for k, (s, i) in found.items() if s < BAR and i is None]
    print(f"\n{len(met)} of {len(found)} >= {BAR}x; missed with the whole interval below: {len(below)} {below}; "
          f"missed within noise: {len(noise)} {noise}"
          + (f"; missed, no interval recorded: {unknown}" if unknown else ""))


if __name__ == "__main__":
    main()
