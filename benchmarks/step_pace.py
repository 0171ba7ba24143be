"""Whether a slow stretch of the machine moves every step shape alike, and whether a step costs more after a step of
another shape: SmolLM2-135M-Instruct (bf16) with the shipped head on held-out chat prompts, greedy, batch 1, in rounds
of three passes: fixed tree 4/3/8, fixed chains of 2, and steps alternating between the two. Per round and pass: the
median verification of each shape; over the alternating passes: how the two shapes' neighbouring steps move together
(the correlation of their log times, step by step and as 10-step means): whether a step cost could be read relative
to the machine's present pace (tried and not kept: docs/results.md, "Step costs read at the machine's pace").

Run from the repo root with one core and one thread, the other core idle:
    nice -n -15 taskset -c 0 python benchmarks/step_pace.py --out benchmarks/data/step_pace_zen4.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402
from replay_default import _Chain, _Tree  # noqa: E402  (fixed shapes whose steps the loop times)
from step_costs_in_process import head_parser, head_setting, listen  # noqa: E402

from hf_specdec import DraftPolicy, TreeDraftPolicy  # noqa: E402
from hf_specdec.policy import Schedule  # noqa: E402

TREE = dict(top_k=4, max_depth=3, max_nodes=8)


class _Alternating(Schedule):
    """Chains of 2 on even steps, tree 4/3/8 on odd ones (the prefill counts as a step); the loop times each."""

    timed = True

    def __init__(self, policy, batch_size, device):
        self.policy, self.lengths = policy, torch.full((batch_size,), 2, dtype=torch.long, device=device)
        self._tree, self.steps = TreeDraftPolicy(**TREE), 0
        self.max_depth, self.max_width, self.max_rank = TREE["max_depth"], TREE["max_nodes"] + 1, TREE["top_k"]

    tree = property(lambda self: self._tree if self.steps % 2 else None)

    def update(self, *told, **named) -> None:
        self.steps += 1


@dataclass(frozen=True, kw_only=True)
class _Alternate(DraftPolicy):
    def start(self, batch_size, device, **call):
        return _Alternating(self, batch_size, device)


def neighbours(steps: list[tuple]) -> dict:
    """Over (kind, width, verify ms, when) steps in order: pairs of a tree's and a chain's neighbouring verifications
    (under 0.3 s apart), the correlation of their log times, of their 10-pair means, and the log ratio's spread."""
    pairs, widths = [], {("tree", 9), ("chain", 3)}
    for one, two in zip(steps, steps[1:]):
        if {one[:2], two[:2]} == widths and two[3] - one[3] < 0.3:
            tree, chain = (one, two) if one[0] == "tree" else (two, one)
            pairs.append((math.log(tree[2]), math.log(chain[2])))
    trees, chains = [p[0] for p in pairs], [p[1] for p in pairs]
    mean = lambda xs: [statistics.fmean(xs[k: k + 10]) for k in range(0, len(xs) - 9, 10)]  # noqa: E731
    return {"pairs": len(pairs), "correlation": round(statistics.correlation(trees, chains), 3),
            "correlation_10_step_means": round(statistics.correlation(mean(trees), mean(chains)), 3),
            "sd_log_tree": round(statistics.pstdev(trees), 3), "sd_log_chain": round(statistics.pstdev(chains), 3),
            "sd_log_ratio": round(statistics.pstdev([t - c for t, c in pairs]), 3),
            "sd_10_step_means_log_tree": round(statistics.pstdev(mean(trees)), 3)}


def main() -> None:
    parser = head_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    target, drafter, groups = head_setting(args.num_prompts)
    heard = listen()
    passes = {"tree 4/3/8": _Tree(**TREE), "chain 2": _Chain(max_gamma=2), "alternating": _Alternate(max_gamma=2)}
    target.generate(**groups[0], max_new_tokens=args.new_tokens, do_sample=False, drafter=drafter)  # warm-up
    rounds, alternating = [], []
    for round_ in range(args.rounds):
        for name, gamma in passes.items():
            steps = []
            for inputs in groups:
                heard.clear()
                target.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False, drafter=drafter, gamma=gamma)
                steps += [(kind, width, verify_ms, when) for kind, _, width, _, verify_ms, when in heard]
            alternating += steps if name == "alternating" else []
            medians = {f"verify {kind} {width}": round(statistics.median(ms for k, w, ms, _ in steps
                                                                         if (k, w) == (kind, width)), 1)
                       for kind, width in sorted({step[:2] for step in steps})
                       if sum(step[:2] == (kind, width) for step in steps) >= 3}
            rounds.append({"round": round_, "pass": name, "median_ms": medians})
            print(json.dumps(rounds[-1]), flush=True)
    together = neighbours(alternating)
    print(json.dumps(together))
    if args.out:
        args.out.write_text(json.dumps({**bench.provenance(), "passes": rounds, "alternating": together}, indent=1) + "\n")


if __name__ == "__main__":
    main()
