#!/usr/bin/env bash
# The README's "Latest results" (2026-11-23): these four runs, one after the other, on the idle 2-core
# AVX2 machine (each report states its load average). Run from the repository root.
set -euo pipefail
B=(python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress)
# 1. float32 with oneDNN-packed linears (plain generate() too), 1 thread: the full comparison.
"${B[@]}" --dtype float32 --threads 1 --pack-linears --gammas 1,2,3,4 --batch-sizes 1,4,8 \
    --sections plain,gamma,hf,batch,bound,default,feature,lookup --out docs/bench/fp32-packed-t1
# 2. bfloat16 target (no bf16 compute on this CPU), 1 thread.
"${B[@]}" --dtype bfloat16 --threads 1 --gammas 1,2,3 --batch-sizes 1,4 \
    --sections plain,gamma,default,feature --out docs/bench/bf16-t1
# 3. float32, PyTorch's default kernels (what a user gets without pack_linears), 1 thread.
"${B[@]}" --dtype float32 --threads 1 --gammas 1,2 --batch-sizes 1,4 \
    --sections plain,gamma,default --out docs/bench/fp32-t1
# 4. data generation for distillation on 2 cores (float32 packed, 2 threads).
"${B[@]}" --dtype float32 --threads 2 --pack-linears --modes greedy --sections datagen \
    --out docs/bench/datagen-t2
