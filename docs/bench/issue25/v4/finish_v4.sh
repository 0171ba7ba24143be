#!/bin/bash
# issue 25, session g: after train-v4.sh ends. Narrow head v4 to the shipped head's 4,096 tokens and measure v4 and v3
# on the same requests: distill-eval with every training file of v4 (l2 and l3 included, so the Magpie requests that
# leak into any of them are dropped for both heads alike), agreement by origin (seen: magpie-l2, trained on by v4 only;
# unseen: magpie-u6, seed 6, never trained on, its template prompts that a training file also holds skipped) and by
# the target's confidence. magpie-u6 (2 minutes, one core, before this script):
#   hf-specdec distill-data --engine llama-cpp --target smollm2 --items 128 --seed 6 --out work/distill/magpie-u6.jsonl \
#       --batch-size 64 --chunk 128 --max-new-tokens 256 --threads 1 --quiet
# NEW and OLD name the heads compared (defaults head-v4 and head-v3; the next leg: NEW=head-v5 OLD=head-v4).
set -e
cd /work/main
NEW=${NEW:-head-v4}
OLD=${OLD:-head-v3}
H=.venv/bin/hf-specdec
TRAIN=""
for f in magpie-l0 magpie-l1 magpie-l2 magpie-l3 magpie-s1-a shared_corpus shared_magpie; do
  TRAIN="$TRAIN --train-data work/distill/$f.jsonl"
done
$H distill-narrow --head work/distill/$NEW --like drafters/smollm2-135m-instruct-eagle3 --out work/distill/$NEW-4k
for head in $NEW-4k $NEW $OLD-4k $OLD; do
  $H distill-eval --target smollm2 --head work/distill/$head $TRAIN \
      --magpie-requests work/distill/heldout-magpie.jsonl --drop-leaking-magpie --max-new-tokens 96 --threads 2 \
      --responses work/distill/heldout-responses.jsonl --out work/distill/$head-heldout-v4set.json --quiet
done
.venv/bin/python docs/bench/issue25/alpha_by_origin.py work/distill/$NEW work/distill/$NEW-4k work/distill/$OLD \
    --seen work/distill/magpie-l2.jsonl --unseen work/distill/magpie-u6.jsonl \
    --heldout work/distill/heldout-responses.jsonl $TRAIN --threads 2 > work/alpha_by_origin_$NEW.txt
.venv/bin/python docs/bench/issue25/alpha_by_confidence.py work/distill/$NEW work/distill/$OLD \
    --records work/distill/heldout-responses.jsonl --hand-written --threads 2 > work/alpha_by_confidence_$NEW.txt \
    && .venv/bin/python docs/bench/issue25/alpha_by_confidence.py work/distill/$NEW work/distill/$OLD \
    --records work/distill/magpie-l2.jsonl --threads 2 >> work/alpha_by_confidence_$NEW.txt
