#!/usr/bin/env bash
# issue 25, session g: head version 4 against version 3 back to back (the bench's feature section, bf16 greedy, the
# settings of bench_v4.sh), after bench_v4.sh's batch-4 and batch-8 rows came out below version 3's session-f run:
# batch 4 and 8 twice each, alternating heads, then batch 1 once each. Version 3's files are taken from git
# (0a653b4..d242b81 shipped them) into work/head-v3-shipped. Reports in docs/bench/issue24/head-v4/vs-v3/.
set -euo pipefail
mkdir -p work/head-v3-shipped
for f in config.json model.safetensors distill_metrics.json; do
  git show d242b81:drafters/smollm2-135m-instruct-eagle3/$f > work/head-v3-shipped/$f
done
D=docs/bench/issue24/head-v4/vs-v3
B=(nice -n -15 taskset -c 1 python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 48 --no-progress --threads 1
   --repeats 1 --min-pairs 8 --gammas 1 --sections feature --dtype bfloat16 --modes greedy)
for r in 1 2; do
  "${B[@]}" --batch-sizes 4,8 --feature-drafter drafters/smollm2-135m-instruct-eagle3 --out $D/b48-v4-$r
  "${B[@]}" --batch-sizes 4,8 --feature-drafter work/head-v3-shipped --out $D/b48-v3-$r
done
"${B[@]}" --batch-sizes 1 --feature-drafter work/head-v3-shipped --out $D/b1-v3
"${B[@]}" --batch-sizes 1 --feature-drafter drafters/smollm2-135m-instruct-eagle3 --out $D/b1-v4
