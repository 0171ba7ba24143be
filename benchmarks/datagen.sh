#!/usr/bin/env bash
# Data generation for distillation on 2 quiet cores (docs/results.md): `hf-specdec distill-data --engine llama-cpp`,
# 256 Magpie items of seed 900, as one process with 2 threads, then as two 1-thread processes at once; each process's
# wall time goes to $O/*.time and its counts to $O/*.json (response tokens / wall time = the rate). Run from the
# repository root: bash benchmarks/datagen.sh
set -euo pipefail
O=${O:-work/datagen}
mkdir -p "$O"
common=(--target smollm2 --items 256 --chunk 256 --seed 900 --batch-size 64 --engine llama-cpp --quiet)
rm -f "$O"/*.jsonl "$O"/*.meta.json
/usr/bin/time -o "$O/t2.time" -f "wall %e user %U sys %S" taskset -c 0,1 \
    hf-specdec distill-data "${common[@]}" --threads 2 --out "$O/t2.jsonl" > "$O/t2.json"
for c in 0 1; do
  /usr/bin/time -o "$O/p$c.time" -f "wall %e user %U sys %S" taskset -c $c \
      hf-specdec distill-data "${common[@]}" --threads 1 --out "$O/p$c.jsonl" > "$O/p$c.json" &
done
wait
