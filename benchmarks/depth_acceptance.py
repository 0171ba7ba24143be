"""How often a draft at each depth is accepted once the drafts before it were (the depth profile the default learns),
with a fixed chain on held-out chat prompts, SmolLM2-135M-Instruct as the target: pooled, and by prompt.

    python benchmarks/depth_acceptance.py --drafter head --gamma 6 --out benchmarks/data/depth_acceptance.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402

import hf_specdec  # noqa: E402
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402


def profile(stats, gamma: int) -> list[float | None]:
    """[depth] the share of steps that reached depth d (accepted d - 1 drafts) and accepted its draft too."""
    accepted = stats.accepted_histogram.sum(dim=0)[: gamma + 1].double()  # steps that accepted exactly k
    reached = accepted.flip(0).cumsum(0).flip(0)  # steps that accepted at least k
    return [round(float(reached[d] / reached[d - 1]), 3) if reached[d - 1] else None for d in range(1, gamma + 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", default="head", choices=("head", "independent", "unrelated"))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--gamma", type=int, default=6)
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, tokenizer, drafter = bench.load(args.dtype, args.drafter)
    stats, by_prompt = hf_specdec.SpeculativeStats(), []
    for inputs in batches(encode(tokenizer, list(CHAT_PROMPTS[: args.num_prompts])), 1, tokenizer.pad_token_id):
        own = hf_specdec.SpeculativeStats()
        target.generate(**inputs, drafter=drafter, gamma=args.gamma, stats=own, max_new_tokens=args.new_tokens,
                        do_sample=False)
        stats.merge(own)
        by_prompt.append(profile(own, args.gamma))
    record = {"date": time.strftime("%Y-%m-%d"), "commit": bench.commit(), "machine": bench.machine(),
              "command": " ".join(["python", *sys.argv]), "drafter": args.drafter, "dtype": args.dtype,
              "steps_by_accepted": stats.accepted_histogram.sum(dim=0)[: args.gamma + 1].tolist(),
              "accepted_given_the_depth_before": profile(stats, args.gamma), "by_prompt": by_prompt}
    print(json.dumps(record))
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
