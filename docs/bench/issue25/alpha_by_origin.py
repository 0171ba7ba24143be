"""Where a feature head's misses come from (issue 25): its agreement with the target on greedy responses of three
origins, teacher-forced, the target in float32, states recomputed in memory (`evaluate_feature_head`):

- seen:     greedy Magpie records it was trained on (the first N of --seen);
- unseen:   greedy Magpie records of the same recipe from a seed it never saw (--unseen, e.g. magpie-l2.jsonl);
- heldout:  the responses to the 48 hand-written requests in distill-eval's responses file (--heldout).

Responses are cut to their first --max-new-tokens tokens so the three are alike in length.
seen >> unseen: more data of the same kind lifts alpha. seen ~ unseen >> heldout: the data's kind (diversity) is
the lever. All alike: capacity or training, not data.

    python docs/bench/issue25/alpha_by_origin.py HEAD_DIR [HEAD_DIR ...] --seen work/distill/magpie-l0.jsonl \
        --unseen work/distill/magpie-l2.jsonl --heldout work/distill/heldout-responses.jsonl [--train-data FILE ...]
"""
import argparse
import json

import torch

from hf_specdec.distill.data import Record, read_records
from hf_specdec.distill.feature_head import evaluate_feature_head
from hf_specdec.distill.features import features_in_memory
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.eagle import load_feature_head
from hf_specdec.smollm2 import load_smollm2


def greedy(path: str, n: int, cap: int, prompts=None, exclude=frozenset()) -> list[Record]:
    records = [r for r in read_records(path) if r.greedy and r.response_len > 2 and (prompts is None or r.prompt in prompts)
               and tuple(r.ids[: r.prompt_len]) not in exclude]
    return [Record(r.ids[: r.prompt_len + cap], r.prompt_len, True) for r in records[:n]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("heads", nargs="+")
    parser.add_argument("--seen", required=True)
    parser.add_argument("--unseen", required=True)
    parser.add_argument("--heldout", required=True)
    parser.add_argument("--train-data", action="append", default=[],
                        help="a training file: unseen records whose prompt (token ids) is also in it are skipped")
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, _ = load_smollm2(torch.float32)
    heads = {path: load_feature_head(path) for path in args.heads}
    layers = sorted({layer for head in heads.values() for layer in head.feature_layers_for(30)} | {30})
    trained = frozenset(tuple(r.ids[: r.prompt_len]) for path in args.train_data for r in read_records(path))
    for origin, path, prompts in (("seen", args.seen, None), ("unseen", args.unseen, None),
                                  ("heldout", args.heldout, set(HELDOUT_REQUESTS))):
        records = greedy(path, args.n, args.max_new_tokens, prompts, trained if origin == "unseen" else frozenset())
        store = features_in_memory(target, records, layers)
        for name, head in heads.items():
            agreement = evaluate_feature_head(head, target, records, store, depth=4)
            print(json.dumps({"head": name, "origin": origin, "records": len(records), "positions": agreement.positions,
                              "alpha_gamma1": round(agreement.alpha_gamma1, 4),
                              "per_depth": [round(x, 4) for x in agreement.per_depth],
                              "top4": round(agreement.coverage[4], 4)}), flush=True)


if __name__ == "__main__":
    main()
