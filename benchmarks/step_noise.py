"""How a cached forward's time moves on this machine: SmolLM2-135M-Instruct's forward of 1-9 new tokens after a
random prompt of each length, repeated in rounds; each cell is the median of 5 forwards (after one to warm). A
machine shared with other work shows slow stretches that hit whatever runs then, whatever its width.

Run from the repo root with one core and one thread:
    nice -n -15 taskset -c 1 python benchmarks/step_noise.py --out benchmarks/data/step_noise_367b111_zen5.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402

WIDTHS = (1, 2, 3, 4, 5, 9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, _, _ = bench.load(args.dtype, "independent")
    ids = torch.randint(100, 40000, (1, 160), generator=torch.Generator().manual_seed(0))
    cells = []
    with torch.no_grad():
        for round_ in range(args.rounds):
            for length in range(40, 160, 20):
                cache = DynamicCache()
                target(input_ids=ids[:, :length], past_key_values=cache, use_cache=True)
                row = {"round": round_, "prompt": length}
                for width in WIDTHS:
                    times = []
                    for _ in range(6):
                        start = time.perf_counter()
                        target(input_ids=ids[:, length:length + width], past_key_values=cache, use_cache=True)
                        times.append((time.perf_counter() - start) * 1e3)
                        cache.crop(-width)
                    row[f"w{width}"] = round(statistics.median(times[1:]), 2)
                print(json.dumps(row), flush=True)
                cells.append(row)
    record = {"date": time.strftime("%Y-%m-%d"), "commit": bench.commit(), "machine": bench.machine(),
              "command": " ".join(["python", *sys.argv]), "dtype": args.dtype, "ms": cells}
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
