#!/bin/bash
# issue 25, session f (started ~23:10 UTC after work/distill/magpie-l3.jsonl was complete): the next head from
# version 3's 8,192-token parent over all 5.5M response tokens made so far (l2, seed 4, and l3, seed 5, new), with
# the rejection-rate term (--tv-weight 1, session e's A/B: +0.003 alpha in 200 steps), states of new files in bf16
# (--feature-dtype auto on this Zen 5). The first ~30 minutes extract l2 and l3's states. Rerun this same command
# to resume (the schedule follows the clock). Session f's run with a 240-minute clock was stopped at step 136 (its
# checkpoint at step 100); session g started it over (23:56 UTC) with the 100 minutes one session leaves for
# training, so the schedule anneals within the session that measures the head.
# Afterwards: finish_v4.sh (narrowing and the evaluations), bench_v4.sh and bench_v3_v4.sh (speed).
# OUT, INIT and SEED run the same recipe as another leg (docs/bench/issue25/v5/train-v5.sh); the defaults are v4's.
cd /work/main
exec .venv/bin/hf-specdec distill --kind feature --target smollm2 --out ${OUT:-work/distill/head-v4} \
    --init-from ${INIT:-work/distill/head-v3} --data work/distill/magpie-l0.jsonl --no-generate \
    --extra-data work/distill/magpie-l1.jsonl --extra-data work/distill/magpie-l2.jsonl \
    --extra-data work/distill/magpie-l3.jsonl --extra-data work/distill/magpie-s1-a.jsonl \
    --extra-data work/distill/shared_corpus.jsonl --extra-data work/distill/shared_magpie.jsonl \
    --eval-set heldout --num-eval-prompts 48 --max-new-tokens 96 --tv-weight 1 \
    --ttt-steps 3 --steps 40000 --batch-size 8 --lr 3e-4 --max-minutes 100 \
    --eval-every 200 --checkpoint-every 100 --resume --threads 2 --seed ${SEED:-0}
