"""What the default's own work costs per call (planning each step, hearing its outcome, timing it), apart from what it
decides: the default with step costs pinned so that it drafts the same chain every step, against that chain as a fixed
`gamma=`, and plain generate(), on held-out chat prompts, in a shuffled order per prompt and round. Both drafting
methods make the same target forwards (printed), so their time ratio is the machinery's cost. `--tree`: the same with
tree 4/3/8 (costs pinned so that it beats a chain of 1, the only chain offered) against it as a fixed `TreeDraftPolicy`.

Run from the repo root with one core and one thread:
    nice -n -15 taskset -c 1 python benchmarks/default_machinery.py --out benchmarks/data/default_machinery_367b111_zen5.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402

import hf_specdec  # noqa: E402
from hf_specdec import CostAwareDraftPolicy, TreeDraftPolicy  # noqa: E402
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402
from hf_specdec.costs import StepCosts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", default="head", choices=("head", "independent"))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--gamma", type=int, default=2)
    parser.add_argument("--tree", action="store_true", help="tree 4/3/8 instead of a chain of --gamma")
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, tokenizer, drafter = bench.load(args.dtype, args.drafter)
    groups = batches(encode(tokenizer, list(CHAT_PROMPTS[: args.num_prompts])), 1, tokenizer.pad_token_id)
    # Every width up to the chain's (the tree's 9 tokens) at one price, a draft level nearly free: the chain (the tree:
    # wider ones are unpriced) delivers the most per ms.
    widest, gamma = (9, 1) if args.tree else (args.gamma + 1, args.gamma)
    pinned = CostAwareDraftPolicy(costs=StepCosts(verify_ms={w: 30.0 for w in range(1, widest + 1)}, draft_ms=0.1),
                                  max_gamma=gamma)
    fixed = TreeDraftPolicy(top_k=4, max_depth=3, max_nodes=8) if args.tree else args.gamma
    methods = {"fixed": fixed, "default, pinned": pinned, "plain": None}
    kwargs = dict(max_new_tokens=args.new_tokens, do_sample=False)
    seconds, forwards, order = {name: [] for name in methods}, {name: 0 for name in methods}, random.Random(0)
    for _ in range(args.rounds):
        for inputs in groups:
            for name in order.sample(list(methods), len(methods)):
                stats = hf_specdec.SpeculativeStats()
                drafting = {} if methods[name] is None else dict(drafter=drafter, gamma=methods[name], stats=stats)
                start = time.perf_counter()
                target.generate(**inputs, **drafting, **kwargs)
                seconds[name].append(time.perf_counter() - start)
                forwards[name] += int(stats.steps.sum()) if drafting else 0
    ratios = [d / f for d, f in zip(seconds["default, pinned"], seconds["fixed"])]
    record = {"date": time.strftime("%Y-%m-%d"), "commit": bench.commit(), "machine": bench.machine(),
              "command": " ".join(["python", *sys.argv]), "drafter": args.drafter, "dtype": args.dtype,
              "gamma": "tree 4/3/8" if args.tree else args.gamma,
              "total_s": {name: round(sum(v), 3) for name, v in seconds.items()}, "target_forwards": forwards,
              "pinned_over_fixed_median": round(statistics.median(ratios), 4),
              "calls": {name: [round(s, 4) for s in v] for name, v in seconds.items()}}
    print(json.dumps({key: value for key, value in record.items() if key != "calls"}))
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
