"""Session u (issue 24): host reads (values read back from the device: on a GPU each waits for it) and non-model aten
ops per plain step, plain generate() against our loop with a drafter the default lets go before the first step (every
step a plain one). Tiny seeded Llama (tests/tiny_models.py), batch 3 ragged prompts, an EOS no row meets; the per-step
figure is the difference of a 40- and a 16-token call over 24 steps. Counted on the CPU: what a read costs on a GPU is
not measured here.
Run: PYTHONPATH=.:tests taskset -c 0 .venv/bin/python docs/bench/issue24/host-reads/reads.py
"""
import collections
import sys
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tiny_models
from hf_specdec.calibration import StepCosts
from hf_specdec.policy import CostAwareDraftPolicy

NEVER = CostAwareDraftPolicy(costs=StepCosts(draft_ms=1e6, target_ms={1: 1.0, 2: 2.0}))
READS = {"aten._local_scalar_dense.default", "aten.is_nonzero.default", "aten.item.default", "aten.equal.default",
         "aten.nonzero.default", "aten.masked_select.default", "aten._unique2.default"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.reads, self.ops, self.sites = 0, 0, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        stack = traceback.extract_stack()[:-1]
        if not any("modeling_" in f.filename for f in stack):  # the model's own ops are the same in both
            self.ops += 1
        if str(func) in READS:
            self.reads += 1
            ours = [f for f in stack if "/hf_specdec/" in f.filename or "transformers/" in f.filename]
            self.sites[f"{ours[-1].filename.split('/')[-1]}:{ours[-1].name}" if ours else "?"] += 1
        return func(*args, **(kwargs or {}))


tolist = torch.Tensor.tolist
current = [None]


def counted_tolist(tensor):
    if current[0] is not None:
        current[0].reads += 1
        current[0].sites["tolist"] += 1
    return tolist(tensor)


torch.Tensor.tolist = counted_tolist
torch.set_num_threads(1)
target, drafter = tiny_models.llama(seed=0), tiny_models.llama(seed=1, layers=1, hidden=32)
input_ids, mask = tiny_models.prompts(3, seed=21)
for sampling in ({"do_sample": False}, {"do_sample": True, "temperature": 0.7, "top_k": 20}):
    for name, extra in (("generate()", {}), ("ours", {"drafter": drafter, "gamma": NEVER})):
        kwargs = dict(eos_token_id=tiny_models.VOCAB + 7, **sampling, **extra)
        target.generate(input_ids, attention_mask=mask, max_new_tokens=4, **kwargs)
        counts = {}
        for new in (16, 40):
            current[0] = counts[new] = Count()
            with counts[new]:
                target.generate(input_ids, attention_mask=mask, max_new_tokens=new, **kwargs)
            current[0] = None
        reads = (counts[40].reads - counts[16].reads) / 24
        ops = (counts[40].ops - counts[16].ops) / 24
        sites = {k: round((v - counts[16].sites[k]) / 24, 2) for k, v in counts[40].sites.items() if v != counts[16].sites[k]}
        print(f"{'sampled' if sampling['do_sample'] else 'greedy '} {name:10s} per plain step: host reads {reads:.2f}, "
              f"non-model ops {ops:.1f}; reads by site {sites}")
