#!/usr/bin/env bash
# Re-check of the four rows that missed in docs/bench/default-all (run with two queues, one per core):
# the same commands, one queue, alone on an otherwise idle machine (load average 1.0), 2026-11-23.
# Run from the repository root.
set -euo pipefail
B=(python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --threads 1 --repeats 3
   --batch-sizes 1,4 --sections default)
D=docs/bench/default-alone
taskset -c 0 "${B[@]}" --dtype float32 --pack-linears --gammas 1,2 --modes greedy --out $D/fp32-packed-greedy
taskset -c 0 "${B[@]}" --dtype float32 --pack-linears --gammas 1,2 --modes sampled --ignore-eos \
    --out $D/fp32-packed-sampled-ignore-eos
taskset -c 0 "${B[@]}" --dtype bfloat16 --gammas 1,2,3 --modes sampled --ignore-eos --out $D/bf16-sampled-ignore-eos
