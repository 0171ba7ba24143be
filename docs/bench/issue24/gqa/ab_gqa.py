"""Session l (issue 24): the loop's forwards with grouped-query packing (hf_specdec.attention) against the same
forwards with transformers' repeat_kv, in turns with plain generate() on the 48 held-out requests, with the head:
a chain of 1 and the default policy, each packed and not.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/gqa/ab_gqa.py DTYPE BATCH ROUNDS [REQUESTS]
"""
import sys

import torch

sys.path.insert(0, "docs/bench/issue24")
from turns import in_turns, report  # noqa: E402

from hf_specdec import attention  # noqa: E402
from hf_specdec.bench.prompts import batches, encode  # noqa: E402
from hf_specdec.cpu import describe  # noqa: E402
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS  # noqa: E402
from hf_specdec.drafters import feature  # noqa: E402
from hf_specdec.loading import load_drafter  # noqa: E402
from hf_specdec.smollm2 import load_smollm2  # noqa: E402

dtype, batch_size, rounds = getattr(torch, sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
requests = HELDOUT_REQUESTS[: int(sys.argv[4])] if len(sys.argv) > 4 else HELDOUT_REQUESTS
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
groups = batches(encode(tok, requests), batch_size, tok.pad_token_id or 0)
WIDEST = attention.MAX_PACKED_TOKENS


class Switch:
    """target.generate with packing on (packed=True) or off (every forward as transformers runs it)."""

    def generate(self, packed=True, **kwargs):
        attention.MAX_PACKED_TOKENS = feature.MAX_PACKED_TOKENS = WIDEST if packed else 0
        return target.generate(**kwargs)


methods = {"plain": {}, "chain 1": dict(drafter=head, gamma=1), "chain 1 unpacked": dict(drafter=head, gamma=1, packed=False),
           "default": dict(drafter=head), "default unpacked": dict(drafter=head, packed=False)}
print(f"# {describe()}; batch {batch_size}, {len(requests)} held-out requests, {rounds} rounds, {sys.argv[1]} greedy, "
      "head, 48 new tokens", flush=True)
report(in_turns(Switch(), methods, groups, rounds=rounds))
