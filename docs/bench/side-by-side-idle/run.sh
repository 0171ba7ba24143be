#!/usr/bin/env bash
# Issue 10's guarantees re-measured side by side at b2e7265 (calibration keeps the fastest round per width; cheaper
# plain steps), on
# the otherwise idle 2-core machine, 2026-11-23: two queues at once, one per core (taskset), 1 torch thread
# each, 4 repeats; the interleaving makes both methods of each ratio share whatever load the other queue
# adds. Run from the repository root.
set -euo pipefail
B=(python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --repeats 4 --threads 1 --batch-sizes 1,4)
O=docs/bench/side-by-side-idle
(
  taskset -c 0 "${B[@]}" --dtype float32 --pack-linears --gammas 1,2 --sections default --out $O/fp32-packed-t1-default
  taskset -c 0 "${B[@]}" --dtype float32 --pack-linears --sections feature --out $O/fp32-packed-t1-feature
) &
(
  taskset -c 1 "${B[@]}" --dtype float32 --gammas 1,2 --sections default --out $O/fp32-t1-default
  taskset -c 1 "${B[@]}" --dtype bfloat16 --gammas 1,2 --sections default --out $O/bf16-t1-default
) &
wait
# 2. Sampled with EOS ignored (every row generates 64 tokens), started on core 0 once its queue was done, beside
# the bf16 run: sampled texts differ between methods by design, and at batch 4 a batch lasts as long as its
# longest row, so with EOS each method's batches do different amounts of work.
taskset -c 0 "${B[@]}" --dtype float32 --pack-linears --modes sampled --gammas 1,2 --sections default --ignore-eos \
    --out $O/fp32-packed-t1-default-sampled-ignore-eos
# 3. The same with PyTorch's default kernels, on core 1 once the bf16 run was done (beside step 2, then beside the
# test suites).
taskset -c 1 "${B[@]}" --dtype float32 --modes sampled --gammas 1,2 --sections default --ignore-eos \
    --out $O/fp32-t1-default-sampled-ignore-eos
