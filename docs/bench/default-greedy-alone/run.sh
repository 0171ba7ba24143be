#!/usr/bin/env bash
# Re-check of the unrelated drafter at batch 4 greedy (0.89x in the full run), alone on one core, nothing
# else running, 4 repeats, at 3cd4486 (2026-11-23). Run from the repository root.
taskset -c 0 python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --repeats 4 --threads 1 \
    --batch-sizes 1,4 --dtype float32 --pack-linears --modes greedy --gammas 1,2 --sections default \
    --out docs/bench/default-greedy-alone
