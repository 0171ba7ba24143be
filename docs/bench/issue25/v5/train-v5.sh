#!/bin/bash
# issue 25 lever 1 (session g, started 02:28 UTC 2026-11-25, ~25 minutes before the session ended): another 100-minute
# leg over the same 5.31M tokens from version 4's 8,192-token parent (v4's learning curve was still rising). Rerun this
# same command to resume from work/distill/head-v5-checkpoint.pt; then docs/bench/issue25/v4/finish_v4.sh with head-v5
# in place of head-v4 (and head-v4 in place of head-v3) to compare on the same 201 requests. --seed 1: another epoch
# order than v4's (seed 0), so its first steps do not repeat the half pass v4 saw, step for step.
cd /work/main
exec .venv/bin/hf-specdec distill --kind feature --target smollm2 --out work/distill/head-v5 \
    --init-from work/distill/head-v4 --data work/distill/magpie-l0.jsonl --no-generate \
    --extra-data work/distill/magpie-l1.jsonl --extra-data work/distill/magpie-l2.jsonl \
    --extra-data work/distill/magpie-l3.jsonl --extra-data work/distill/magpie-s1-a.jsonl \
    --extra-data work/distill/shared_corpus.jsonl --extra-data work/distill/shared_magpie.jsonl \
    --eval-set heldout --num-eval-prompts 48 --max-new-tokens 96 --tv-weight 1 \
    --ttt-steps 3 --steps 40000 --batch-size 8 --lr 3e-4 --max-minutes 100 \
    --eval-every 200 --checkpoint-every 100 --resume --threads 2 --seed 1
