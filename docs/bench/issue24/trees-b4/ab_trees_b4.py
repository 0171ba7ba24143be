"""Session k (issue 24): could small trees beat the chain of 1 with the head at bf16 batch 4, where the default sits at
1.094x plain on the 48 held-out requests (goal 1.1x)? In turns with plain generate() in one process: a chain of 1, the
default, and fixed trees (top_k / max_depth / max_nodes) given on the command line.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/trees-b4/ab_trees_b4.py DTYPE BATCH ROUNDS K/D/N...
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from turns import in_turns, report  # noqa: E402

from hf_specdec import TreeDraftPolicy  # noqa: E402
from hf_specdec.bench.prompts import batches, encode  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.loading import load_drafter  # noqa: E402
from hf_specdec.smollm2 import load_smollm2  # noqa: E402

dtype, batch_size, rounds, *shapes = sys.argv[1:]
torch.set_num_threads(1)
target, tok = load_smollm2(getattr(torch, dtype))
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
methods = {"plain": {}, "chain 1": dict(drafter=head, gamma=1), "default": dict(drafter=head)}
for shape in shapes:
    k, d, n = (int(x) for x in shape.split("/"))
    methods[f"tree {shape}"] = dict(drafter=head, gamma=TreeDraftPolicy(top_k=k, max_depth=d, max_nodes=n))
groups = batches(encode(tok, HELDOUT_REQUESTS), int(batch_size), tok.pad_token_id or 0)
results = in_turns(target, methods, groups, int(rounds))
print(f"batch {batch_size}, {len(HELDOUT_REQUESTS)} held-out requests, {rounds} rounds, {dtype} greedy, head, 48 new tokens")
report(results)
