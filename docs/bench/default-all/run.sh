#!/usr/bin/env bash
# The default policy's guarantees (issue 10), judged on one run at the commit that last changed this file
# (2026-11-24, paired ratios, shuffled order, at least 16 timed calls per method in every side-by-side group:
# batch 4 has 2 batches, so 8 repeats there, 3 at batch 1; plain generate() timed twice per batch, the goal rows
# paired with the mean of its two calls, the A/A row with the first): the `default` section only (plain
# generate(), the default policy with the shipped and an unrelated drafter, the fixed-gamma sweep, side by side),
# batch 1 and 4, for the three target set-ups a user meets here. Greedy keeps EOS (the same tokens for every
# method in float32); sampled ignores EOS so every method decodes the same 64 tokens per row. Two queues, one
# per core (taskset), each mixing float32 and bfloat16 settings so both take about as long, one torch thread
# each, nothing else running: load average 2.0. Run from the repository root.
set -euo pipefail
B=(python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --threads 1 --repeats 3
   --min-pairs 16 --batch-sizes 1,4 --sections default)
D=docs/bench/default-all
(
  taskset -c 0 "${B[@]}" --dtype bfloat16 --gammas 1,2,3 --modes sampled --ignore-eos --out $D/bf16-sampled-ignore-eos
  taskset -c 0 "${B[@]}" --dtype float32 --pack-linears --gammas 1,2 --modes greedy --out $D/fp32-packed-greedy
  taskset -c 0 "${B[@]}" --dtype float32 --gammas 1,2 --modes greedy --out $D/fp32-greedy
) &
(
  taskset -c 1 "${B[@]}" --dtype bfloat16 --gammas 1,2,3 --modes greedy --out $D/bf16-greedy
  taskset -c 1 "${B[@]}" --dtype float32 --pack-linears --gammas 1,2 --modes sampled --ignore-eos \
      --out $D/fp32-packed-sampled-ignore-eos
  taskset -c 1 "${B[@]}" --dtype float32 --gammas 1,2 --modes sampled --ignore-eos --out $D/fp32-sampled-ignore-eos
) &
wait
