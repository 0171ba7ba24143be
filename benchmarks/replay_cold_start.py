"""The default when a setting's first drafting steps run slow (kernels loading on a GPU, a busy spell on a CPU), replayed.

`replay_default.py` drives the default's schedule over recorded greedy outcomes at fixed step costs; here with the step
costs' ageing (`hf_specdec.costs.AGE`) as shipped and switched off, on two kinds of recording:

- `gpu`: synthetic chain outcomes at the acceptance of the 8B-shaped GPU pair (docs/results.md, "The default on a GPU"),
  0.73 at depth 1 falling to 0.62 at depth 6 (seeded), priced at step costs read off that run's fixed-shape calls:
  plain 23.4 ms, verifying 2-7 tokens 24-25.5 ms, drafting 11 ms plus 4.2 ms a level; heard with 5 % log-normal
  noise, and each process's first 0, 3 or 10 drafting steps 50 or 3 times slow (`replay_default.Noise`'s `cold`).
- the CPU recordings of RECORDINGS (benchmarks/data), each process answering their prompts `--laps` times over, heard
  as `replay_default.py --noise 0.05 0.03 1.4`.

    python benchmarks/replay_cold_start.py --out benchmarks/data/replay_cold_start.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay_default  # noqa: E402

import hf_specdec.costs as costs  # noqa: E402

GPU_COSTS = ([["verify", "chain", w, ms] for w, ms in zip(range(1, 8), (23.4, 24.0, 24.0, 24.5, 24.5, 25.0, 25.5))]
             + [["draft", "chain", depth, 11.0 + 4.2 * depth] for depth in range(1, 7)])
GPU_ACCEPTANCE = (0.73, 0.70, 0.68, 0.66, 0.64, 0.62)  # a draft's, once the ones before it were accepted, by depth
RECORDINGS = ("replay_head_bf16_zen4.json", "replay_head_bf16.json", "replay_head_bf16_xeon_amx.json",
              "replay_whisper_large_64.json")


def gpu_recording(prompts: int = 8, tokens: int = 128, seed: int = 0) -> dict:
    """Chain outcomes (accepted drafts of a chain of 6, the drafter's probability of each) and the GPU's costs."""
    rng, out = random.Random(seed), []
    for _ in range(prompts):
        chain = []
        for _ in range(tokens):
            accepted = 0
            while accepted < len(GPU_ACCEPTANCE) and rng.random() < GPU_ACCEPTANCE[accepted]:
                accepted += 1
            chain.append([accepted, [round(rng.uniform(0.45, 1.0) if depth < accepted else rng.uniform(0.0, 0.7), 4)
                                     for depth in range(len(GPU_ACCEPTANCE))]])
        out.append({"tokens": tokens, "prefill_ms": 40.0, "prior": [0.72, 16.0], "shapes": {"chain": chain}})
    return {"costs": GPU_COSTS, "prompts": out}


def replay(data: dict, age: int, processes: int, noise: tuple) -> dict:
    """`replay_default.replay` with the step costs' samples counting for `age` steps."""
    shipped, costs.AGE = costs.AGE, age
    try:
        result = replay_default.replay(data, processes=processes, noise=noise)
    finally:
        costs.AGE = shipped
    return {key: round(result[key], 4) for key in ("default", "best_ratio", "default_vs_best", "paired_geomean")} | {
        "best": result["best"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--laps", type=int, default=4, help="times each process answers a CPU recording's prompts")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ages = {"ageing": costs.AGE, "no ageing": 10**9}
    rows = []
    gpu = gpu_recording()
    for slow_steps, slow in ((0, 1.0), (3, 50.0), (3, 3.0), (10, 3.0)):
        for name, age in ages.items():
            rows.append({"recording": "gpu", "slow_steps": slow_steps, "slow": slow, "costs": name,
                         **replay(gpu, age, args.processes, (0.05, 0.0, 1.0, slow_steps, slow))})
            print(json.dumps(rows[-1]), flush=True)
    data_dir = Path(__file__).resolve().parent / "data"
    for recording in RECORDINGS:
        data = json.loads((data_dir / recording).read_text())
        data["prompts"] = data["prompts"] * args.laps
        for name, age in ages.items():
            rows.append({"recording": recording, "slow_steps": 0, "slow": 1.0, "costs": name,
                         **replay(data, age, args.processes, (0.05, 0.03, 1.4))})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "age": costs.AGE, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
