#!/usr/bin/env bash
# Issue 24's goals (the default never slower than plain generate(); the head in batches), judged on one run
# of this file: the `default` section (plain generate() and an A/A control, fixed gamma 1, the default with the
# shipped independent drafter and with an unrelated one) and the `feature` section (the shipped EAGLE-3 head:
# fixed gammas 1-4 and the default at batch 1, the default at batch 4 and 8), side by side, paired ratios,
# batch 1, 4 and 8, in bfloat16 (what `make demo` picks on a CPU that computes bf16) and float32 (default
# kernels). Greedy keeps EOS; sampled (temperature 0.7) ignores it so every method decodes the same tokens.
# One queue on one core at raised priority (nice -15, taskset -c 1), one torch thread. Run from the repo root.
# DTYPES and D choose what runs and where the reports go (defaults: both dtypes, this directory); THREADS and CPUS
# the torch threads and the cores (defaults: 1 and "1"; e.g. THREADS=2 CPUS=0,1 for both cores of a 2-core machine).
set -euo pipefail
D=${D:-docs/bench/issue24}
B=(nice -n -15 taskset -c ${CPUS:-1} python -m hf_specdec.bench --num-prompts 8 --max-new-tokens 48 --no-progress --threads ${THREADS:-1}
   --repeats 1 --min-pairs 8 --batch-sizes 1,4,8 --gammas 1 --sections default,feature)
for dtype in ${DTYPES:-bfloat16 float32}; do
  "${B[@]}" --dtype $dtype --modes greedy --out $D/$dtype-greedy
  "${B[@]}" --dtype $dtype --modes sampled --ignore-eos --out $D/$dtype-sampled-ignore-eos
done
