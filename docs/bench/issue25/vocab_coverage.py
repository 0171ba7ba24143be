"""Share of held-out response tokens a draft vocabulary covers (issue 25): the shipped head's vocabulary, and the
N most frequent response tokens of the training corpora. A token outside the vocabulary is a certain rejection.

    python docs/bench/issue25/vocab_coverage.py --heldout work/distill/eval.jsonl \
        --train work/distill/magpie-s1-a.jsonl work/distill/shared_corpus.jsonl work/distill/shared_magpie.jsonl
"""

import argparse
import collections
import json

from hf_specdec.eagle import load_feature_head


def responses(path):
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if "ids" in record:
                yield record["ids"][record["prompt_len"]:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--heldout", required=True, help="JSONL of the target's answers to held-out requests")
    parser.add_argument("--train", nargs="+", required=True, help="training corpora (JSONL)")
    parser.add_argument("--head", default="drafters/smollm2-135m-instruct-eagle3")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    args = parser.parse_args()
    heldout = [token for path in [args.heldout] for response in responses(path) for token in response]
    counts = collections.Counter(token for path in args.train for response in responses(path) for token in response)
    covered = lambda vocab: sum(token in vocab for token in heldout) / len(heldout)  # noqa: E731
    print(f"held-out response tokens: {len(heldout)}")
    print(f"{args.head}: {covered(set(load_feature_head(args.head).draft_ids().tolist())):.4f}")
    for size in args.sizes:
        print(f"{size} most frequent training tokens: {covered({token for token, _ in counts.most_common(size)}):.4f}")


if __name__ == "__main__":
    main()
