#!/usr/bin/env bash
# issue 25, session g: head version 4 in speed, the feature section of docs/bench/issue24/run.sh (its settings:
# 8 held-out chat prompts, 48 tokens, one thread on core 1 at raised priority, fixed gammas 1-4 and the default at
# batch 1, the default at batch 4 and 8, side by side with plain generate()), in bf16 greedy and sampled, as
# head version 3's rows in docs/bench/issue24/head-v3/ were made. Run from the repo root with the venv on PATH.
set -euo pipefail
D=${D:-docs/bench/issue24/head-v4}
B=(nice -n -15 taskset -c 1 python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 48 --no-progress --threads 1
   --repeats 1 --min-pairs 8 --batch-sizes 1,4,8 --gammas 1 --sections feature --dtype bfloat16)
"${B[@]}" --modes greedy --out $D/bfloat16-greedy
"${B[@]}" --modes sampled --ignore-eos --out $D/bfloat16-sampled-ignore-eos
