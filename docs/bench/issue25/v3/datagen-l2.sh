#!/bin/bash
# issue 25 data at scale (session e, 18:45 UTC): one 1-thread llama.cpp process on core 0 (core 1 trains), seed 4,
# new file so the files the training run reads (magpie-l0/l1) stay fixed; rerun to resume.
cd /work/main
exec taskset -c 0 .venv/bin/hf-specdec distill-data --engine llama-cpp --target smollm2 --items 12000 --seed 4 \
    --out work/distill/magpie-l2.jsonl --batch-size 64 --chunk 256 --max-new-tokens 256 --threads 1 --quiet \
    > work/distill/magpie-l2.log 2>&1
