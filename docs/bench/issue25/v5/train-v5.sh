#!/bin/bash
# issue 25 lever 1 (session g, started 02:28 UTC 2026-11-25, ~25 minutes before the session ended): another 100-minute
# leg over the same 5.31M tokens from version 4's 8,192-token parent (v4's learning curve was still rising). Rerun this
# same command to resume from work/distill/head-v5-checkpoint.pt; then `NEW=head-v5 OLD=head-v4 docs/bench/issue25/v4/finish_v4.sh`
# to compare on the same 201 requests. SEED=1: another epoch order than v4's (seed 0), so its first steps do not
# repeat the half pass v4 saw, step for step.
cd /work/main
OUT=work/distill/head-v5 INIT=work/distill/head-v4 SEED=1 exec bash docs/bench/issue25/v4/train-v4.sh
