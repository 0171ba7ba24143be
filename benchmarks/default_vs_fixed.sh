#!/usr/bin/env bash
# The default draft length against plain generate() and against the best fixed gamma (docs/results.md): the bench's
# `default` section (plain generate(), the default with the shipped and an unrelated drafter, the fixed-gamma sweep,
# side by side, paired ratios, shuffled order, at least 16 timed calls per method in every group), batch 1 and 4, for
# float32 with pack_linears, float32 with PyTorch's default kernels and bfloat16, greedy (with EOS) and sampled (EOS
# ignored). Two queues, one per core, one torch thread each (~75 min). Rows are appended to
# benchmarks/data/default_vs_fixed.jsonl. Run from the repository root: bash benchmarks/default_vs_fixed.sh
set -euo pipefail
B=(python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --threads 1 --repeats 3
   --min-pairs 16 --batch-sizes 1,4 --sections default)
D=${D:-$(mktemp -d)}
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
python benchmarks/bench_data.py default_vs_fixed $D/*/
