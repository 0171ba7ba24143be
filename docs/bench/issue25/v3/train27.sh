#!/bin/bash
# issue 25, session e (18:30 UTC): head v3 from the 8k-vocabulary head (work/distill/head-cont) over all data so far
# (session d's llama.cpp Magpie files l0/l1, session b's magpie-s1-a, the shared corpora), 1 thread on core 1 while
# work/datagen-l2.sh makes more on core 0. New files' states computed in bfloat16 (--feature-dtype auto on this
# Zen 5), measurements in float32. Rerun to resume (same command: the schedule follows the 100-minute clock).
# Afterwards: hf-specdec distill-narrow --head work/distill/head-v3 --like drafters/smollm2-135m-instruct-eagle3 --out work/distill/head-v3-4k
cd /work/main
exec taskset -c 1 .venv/bin/hf-specdec distill --kind feature --target smollm2 --out work/distill/head-v3 \
    --init-from work/distill/head-cont --data work/distill/magpie-l0.jsonl --no-generate \
    --extra-data work/distill/magpie-l1.jsonl --extra-data work/distill/magpie-s1-a.jsonl \
    --extra-data work/distill/shared_corpus.jsonl --extra-data work/distill/shared_magpie.jsonl \
    --eval-set heldout --num-eval-prompts 48 --max-new-tokens 96 \
    --ttt-steps 3 --steps 40000 --batch-size 8 --lr 3e-4 --max-minutes 100 \
    --eval-every 200 --checkpoint-every 100 --resume --threads 1
