#!/bin/bash
# issue 25: distill-data --engine llama-cpp on 2 quiet cores (session c): one process x 2 threads vs two 1-thread processes.
cd "$(dirname "$0")/../../.."  # the repository root
O=${O:-work/dg}  # where the outputs go
mkdir -p $O
common=(--target smollm2 --items 256 --chunk 256 --seed 900 --batch-size 64 --engine llama-cpp --quiet)
log() { echo "$* $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $O/log; }
rm -f $O/*.jsonl $O/*.meta.json
log t2-start
/usr/bin/time -o $O/t2.time -f "wall %e user %U sys %S" nice -n -15 taskset -c 0,1 .venv/bin/hf-specdec distill-data "${common[@]}" --threads 2 --out $O/t2.jsonl > $O/t2.json 2> $O/t2.err
log t2-end
for c in 0 1; do
  /usr/bin/time -o $O/p$c.time -f "wall %e user %U sys %S" nice -n -15 taskset -c $c .venv/bin/hf-specdec distill-data "${common[@]}" --threads 1 --out $O/p$c.jsonl > $O/p$c.json 2> $O/p$c.err &
done
log p2-start
wait
log p2-end
echo done >> $O/log
