#!/usr/bin/env bash
# The full comparison on a 2-core CPU (docs/results.md): every section of the bench with the two shipped drafters,
# 8 held-out chat prompts (8 grounded ones for prompt lookup), 64 new tokens, 1 torch thread per queue, two queues at
# once, one per core, in three settings of the target (float32 with pack_linears, float32 with PyTorch's default
# kernels, bfloat16), then data generation on both cores (~100 min). The `default` and `feature` sections time their
# methods side by side with plain generate(); every other row is the median of 2 solo repeats. Rows are appended to
# benchmarks/data/full_comparison.jsonl. Run from the repository root: bash benchmarks/full_comparison.sh
set -euo pipefail
B=(python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --threads 1)
D=${D:-$(mktemp -d)}
(
  taskset -c 0 "${B[@]}" --repeats 2 --dtype float32 --pack-linears --gammas 1,2,3,4 --batch-sizes 1,4,8 \
      --sections plain,gamma,hf,batch,bound,default,feature,lookup --out $D/fp32-packed
  taskset -c 0 "${B[@]}" --repeats 3 --dtype float32 --pack-linears --modes sampled --gammas 1,2 --batch-sizes 1,4 \
      --sections default --ignore-eos --out $D/fp32-packed-sampled-ignore-eos
) &
(
  taskset -c 1 "${B[@]}" --repeats 2 --dtype bfloat16 --gammas 1,2,3 --batch-sizes 1,4 \
      --sections plain,gamma,default,feature --out $D/bf16
  taskset -c 1 "${B[@]}" --repeats 2 --dtype float32 --gammas 1,2 --batch-sizes 1,4 \
      --sections plain,gamma,default --out $D/fp32
  taskset -c 1 "${B[@]}" --repeats 3 --dtype float32 --modes sampled --gammas 1,2 --batch-sizes 1,4 \
      --sections default --ignore-eos --out $D/fp32-sampled-ignore-eos
) &
wait
python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --threads 2 --dtype float32 \
    --pack-linears --modes greedy --sections datagen --out $D/datagen
python benchmarks/bench_data.py full_comparison $D/*/
