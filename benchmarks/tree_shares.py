"""What a draft tree's steps deliver against what the default's model of them promises: SmolLM2-135M-Instruct (bf16)
with the shipped head on held-out chat prompts, greedy, batch 1. For each fixed tree (4/3/8, 4/4/16), its tokens a
target forward and the shares of the accepted child by depth and rank (`tree.tree_outcomes`, pooled over the calls);
then the default's `expected_tokens` for both trees fed those measured shares (depth acceptances and the ranks pooled
over depths) and fed the prior ranks: where the model and the measured tokens a forward part, the model misprices.

Run from the repo root with one core and one thread (counts, not times: another process may share the machine):
    taskset -c 0 python benchmarks/tree_shares.py --out benchmarks/data/tree_shares_xeon_amx.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402
from step_costs_in_process import head_parser, head_setting  # noqa: E402

import hf_specdec.steps  # noqa: E402
from hf_specdec import SpeculativeStats  # noqa: E402
from hf_specdec.costs import StepCosts  # noqa: E402
from hf_specdec.policy import CostAwareDraftPolicy, Shape, TreeDraftPolicy, expected_tokens  # noqa: E402

TREES = ((4, 3, 8), (4, 4, 16))
DEPTH, RANKS = max(depth for _, depth, _ in TREES), max(top_k for top_k, _, _ in TREES)


def prior_ranks() -> list[float]:
    """The default's tree ranks before any tree step: a fresh schedule's `ranks()`."""
    pinned = StepCosts(verify_ms={1: 1.0})  # (no record: the schedule starts from its prior)
    return CostAwareDraftPolicy().start(1, torch.device("cpu"), costs=pinned, trees=True).ranks()[: RANKS - 1]


def counting() -> dict:
    """{"trials", "hits"}: [depth, rank] sums over every tree verification in this process from now on."""
    sums = {"trials": torch.zeros(DEPTH, RANKS).double(), "hits": torch.zeros(DEPTH, RANKS).double()}
    outcomes = hf_specdec.steps.tree_outcomes

    def heard(*args, **kwargs):
        trials, hits = outcomes(*args, **kwargs)  # [batch, depth, rank] each
        for key, counts in (("trials", trials), ("hits", hits)):  # (the path's columns past the tree's depth: 0)
            depth, ranks = min(counts.shape[1], DEPTH), counts.shape[2]
            sums[key][:depth, :ranks] += counts[:, :depth].sum(dim=0)
        return trials, hits

    hf_specdec.steps.tree_outcomes = heard
    return sums


def main() -> None:
    args = head_parser(__doc__).parse_args()
    target, drafter, groups = head_setting(args.num_prompts)
    sums, result = counting(), []
    target.generate(**groups[0], max_new_tokens=8, do_sample=False, drafter=drafter)  # warm-up
    for top_k, depth, nodes in TREES:
        for counts in sums.values():
            counts.zero_()
        stats = SpeculativeStats()
        for inputs in groups:
            target.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False, drafter=drafter, stats=stats,
                            gamma=TreeDraftPolicy(top_k=top_k, max_depth=depth, max_nodes=nodes))
        trials, hits = sums["trials"][:depth], sums["hits"][:depth]
        shares = hits / trials.clamp(min=1)  # [depth, rank]
        alphas = [shares[:, 0].tolist() + [shares[-1, 0].item()] * (DEPTH - depth)]
        pooled = (hits[:, 1:].sum(dim=0) / trials[:, 1:].sum(dim=0).clamp(min=1)).tolist()
        model = {name: {f"{k}/{d}/{n}": round(expected_tokens(alphas, ranks, Shape(k, d, n))[0], 2)
                        for k, d, n in TREES}
                 for name, ranks in (("measured ranks", pooled), ("prior ranks", prior_ranks()))}
        result.append({"tree": f"{top_k}/{depth}/{nodes}",
                       "tokens_per_forward": round(int(stats.emitted.sum()) / stats.target_forwards, 2),
                       "shares": [[round(x, 3) for x in row] for row in shares.tolist()],
                       "trials": trials.long().tolist(), "pooled_ranks": [round(x, 3) for x in pooled],
                       "model_tokens_per_forward": model})
        print(json.dumps(result[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps({**bench.provenance(), "trees": result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
