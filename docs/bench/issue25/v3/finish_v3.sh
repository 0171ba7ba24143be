#!/bin/bash
# issue 25, session e: after work/train27.sh ends. Narrow head v3 to version 2's 4,096 tokens, measure both with
# distill-eval (the card's command, training files of v3, answers kept in heldout-responses.jsonl) and by origin.
set -e
cd /work/main
H=.venv/bin/hf-specdec
$H distill-narrow --head work/distill/head-v3 --like drafters/smollm2-135m-instruct-eagle3 --out work/distill/head-v3-4k
for head in head-v3-4k head-v3; do
  $H distill-eval --target smollm2 --head work/distill/$head --train-data work/distill/magpie-l0.jsonl \
      --train-data work/distill/magpie-l1.jsonl --train-data work/distill/magpie-s1-a.jsonl \
      --train-data work/distill/shared_corpus.jsonl --train-data work/distill/shared_magpie.jsonl \
      --magpie-requests work/distill/heldout-magpie.jsonl --drop-leaking-magpie --max-new-tokens 96 --threads 2 \
      --responses work/distill/heldout-responses.jsonl --out work/distill/$head-heldout.json --quiet
done
.venv/bin/python docs/bench/issue25/alpha_by_origin.py work/distill/head-v3 work/distill/head-v3-4k \
    drafters/smollm2-135m-instruct-eagle3 --seen work/distill/magpie-l0.jsonl --unseen work/distill/magpie-l2.jsonl \
    --heldout work/distill/heldout-responses.jsonl --threads 2 > work/alpha_by_origin_v3.txt
