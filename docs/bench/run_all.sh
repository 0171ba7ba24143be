#!/usr/bin/env bash
# docs/results.md, "The full comparison" (2026-11-23, at the commit that added this file): a full run on the
# otherwise idle 2-core AVX2 machine, two queues at once, one per core (taskset), 1 torch thread each, so
# the load average is 2.0 (the two benchmark threads; each report states its own). The `default` and
# `feature` sections time their methods side by side with plain generate(); every other row is the
# median of 2 solo repeats. Then data generation on both cores. Run from the repository root.
set -euo pipefail
B=(python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --threads 1)
D=docs/bench
(
  # 1. float32 with oneDNN-packed linears (plain generate() too): the full comparison.
  taskset -c 0 "${B[@]}" --repeats 2 --dtype float32 --pack-linears --gammas 1,2,3,4 --batch-sizes 1,4,8 \
      --sections plain,gamma,hf,batch,bound,default,feature,lookup --out $D/fp32-packed-t1
  # 2. Its default rows sampled with EOS ignored (every row 64 tokens, the same work for every method).
  taskset -c 0 "${B[@]}" --repeats 3 --dtype float32 --pack-linears --modes sampled --gammas 1,2 --batch-sizes 1,4 \
      --sections default --ignore-eos --out $D/fp32-packed-t1-sampled-ignore-eos
) &
(
  # 3. bfloat16 target (no bf16 compute on this CPU).
  taskset -c 1 "${B[@]}" --repeats 2 --dtype bfloat16 --gammas 1,2,3 --batch-sizes 1,4 \
      --sections plain,gamma,default,feature --out $D/bf16-t1
  # 4. float32, PyTorch's default kernels (what a user gets without pack_linears).
  taskset -c 1 "${B[@]}" --repeats 2 --dtype float32 --gammas 1,2 --batch-sizes 1,4 \
      --sections plain,gamma,default --out $D/fp32-t1
  # 5. Its default rows sampled with EOS ignored.
  taskset -c 1 "${B[@]}" --repeats 3 --dtype float32 --modes sampled --gammas 1,2 --batch-sizes 1,4 \
      --sections default --ignore-eos --out $D/fp32-t1-sampled-ignore-eos
) &
wait
# 6. Data generation for distillation on both cores (float32 packed, 2 threads).
python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --threads 2 --dtype float32 \
    --pack-linears --modes greedy --sections datagen --out $D/datagen-t2
