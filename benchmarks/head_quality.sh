#!/usr/bin/env bash
# The shipped EAGLE-3 head's acceptance on held-out chat (docs/results.md): `hf-specdec distill-eval` on the 48
# hand-written requests of hf_specdec/distill/heldout_requests.py plus the Magpie requests of
# work/distill/heldout-magpie.jsonl (stage 3 of docs/distill-at-scale.md), those that leak into a training file
# dropped, 96 new tokens: on-path acceptance at gamma = 1, per-depth acceptance, top-k coverage and tokens per step.
# HEAD chooses the head (default: the shipped one); TRAIN the training files the leak check reads. Run from the
# repository root: bash benchmarks/head_quality.sh
set -euo pipefail
HEAD=${HEAD:-drafters/smollm2-135m-instruct-eagle3}
TRAIN=${TRAIN:-$(ls work/distill/magpie-*.jsonl work/distill/shared_*.jsonl 2>/dev/null || true)}
args=()
for f in $TRAIN; do args+=(--train-data "$f"); done
hf-specdec distill-eval --target smollm2 --head "$HEAD" "${args[@]}" \
    --magpie-requests work/distill/heldout-magpie.jsonl --drop-leaking-magpie --max-new-tokens 96 --threads 2 \
    --responses work/distill/heldout-responses.jsonl --out work/distill/head-heldout.json --quiet
cat work/distill/head-heldout.json
