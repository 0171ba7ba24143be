#!/bin/bash
# issue 25 data at scale (session f, 21:20 UTC; moved to core 0 when l2 ended): one 1-thread llama.cpp process, seed 5,
# new file so the files the training run reads (magpie-l0/l1) stay fixed; rerun to resume.
cd /work/main
exec taskset -c 1 .venv/bin/hf-specdec distill-data --engine llama-cpp --target smollm2 --items 3000 --seed 5 \
    --out work/distill/magpie-l3.jsonl --batch-size 64 --chunk 256 --max-new-tokens 256 --threads 1 --quiet \
    > work/distill/magpie-l3.log 2>&1
