"""Can the head's layout fit what it is shown? (issue 25) A head trained on 48 records only, many passes, at the
v4 run's settings (AdamW 3e-4, cosine, batch 8, 3 unrolled steps, `--tv-weight 1`), measured every --every steps on
those 48 records (fit) and on 48 it never saw (generalisation), teacher-forced, float32 target and states.

Fit rising far above 0.53 (what the heads reach on their own training files) while generalisation stays: the
layout can hold more than it learns from one pass, and the training recipe (steps, passes, learning rate) limits.
Fit stuck near 0.53: the one-layer layout is the limit (capacity).

    python docs/bench/issue25/fit_check.py work/distill/head-v3 --fit work/distill/magpie-l2.jsonl \
        --control work/distill/magpie-l3.jsonl --steps 300
"""
import argparse
import json
import time

import torch

from alpha_by_origin import greedy  # this folder's: the first n greedy records, cut to cap new tokens
from hf_specdec.distill.feature_head import evaluate_feature_head, train_feature_head
from hf_specdec.distill.features import features_in_memory
from hf_specdec.eagle import load_feature_head
from hf_specdec.smollm2 import load_smollm2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("head")
    parser.add_argument("--fit", required=True, help="records to train on (the first --n greedy ones)")
    parser.add_argument("--control", required=True, help="records never trained on (the first --n greedy ones)")
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, _ = load_smollm2(torch.float32)
    head = load_feature_head(args.head)
    fit, control = greedy(args.fit, args.n, args.max_new_tokens), greedy(args.control, args.n, args.max_new_tokens)
    layers = sorted({*head.feature_layers_for(30), 30})
    fit_store, control_store = features_in_memory(target, fit, layers), features_in_memory(target, control, layers)
    started = time.monotonic()

    def measure(step: int, losses, tokens_seen: int, minutes: float) -> None:
        row = {"step": step, "passes": round(step * 8 / len(fit), 1), "loss": round(sum(losses[-args.every:]) / args.every, 3),
               "minutes": round((time.monotonic() - started) / 60, 1)}
        for name, records, store in (("fit", fit, fit_store), ("control", control, control_store)):
            agreement = evaluate_feature_head(head, target, records, store, depth=1)
            row[name] = {"alpha_gamma1": round(agreement.alpha_gamma1, 4), "top4": round(agreement.coverage[4], 4)}
        print(json.dumps(row), flush=True)

    measure(0, [0.0] * args.every, 0, 0.0)
    head.train()
    train_feature_head(head, target, fit, fit_store, steps=args.steps, lr=args.lr, tv_weight=1.0, progress=False,
                       log_every=args.every, on_log=measure)


if __name__ == "__main__":
    main()
