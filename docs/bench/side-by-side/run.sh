#!/usr/bin/env bash
# Issue 10's guarantees, re-measured side by side (the README's "Latest results" of 2026-11-23; results now live in docs/results.md): the default and
# feature sections time every method interleaved with plain generate(), 3 repeats, median. Two queues ran
# at once, one per core (taskset), 1 torch thread each: the load average was 2 on the 2-core machine, and
# the interleaving makes both methods of a ratio share it. Run from the repository root.
set -euo pipefail
B=(python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 64 --no-progress --repeats 3 --threads 1)
O=docs/bench/side-by-side
(
  taskset -c 0 "${B[@]}" --dtype float32 --pack-linears --gammas 1,2 --batch-sizes 1,4 --sections default \
      --out $O/fp32-packed-t1-default
  taskset -c 0 "${B[@]}" --dtype float32 --pack-linears --batch-sizes 1,4 --sections feature \
      --out $O/fp32-packed-t1-feature
) &
(
  taskset -c 1 "${B[@]}" --dtype bfloat16 --gammas 1,2 --batch-sizes 1,4 --sections default \
      --out $O/bf16-t1-default
  taskset -c 1 "${B[@]}" --dtype float32 --gammas 1,2 --batch-sizes 1,4 --sections default \
      --out $O/fp32-t1-default
) &
# 3. Sampled, EOS ignored (every row generates 64 tokens), started 28 min after the two queues, beside them:
# sampled texts differ between methods by design, and at batch 4 a batch lasts as long as its longest row,
# so with EOS each method's batches do different amounts of work.
(
  sleep 1680
  "${B[@]}" --dtype float32 --pack-linears --modes sampled --gammas 1,2 --batch-sizes 1,4 --sections default \
      --ignore-eos --out $O/fp32-packed-t1-default-sampled-ignore-eos
) &
wait
