"""Session s (issue 24): aten ops and host syncs per step (TorchDispatchMode), split into the target model's own ops and
everything else by the innermost hf_specdec / transformers.generation frame: plain generate() ("gen") against our loop with
K drafts a step; SmolLM2 bf16, the bench's first chat prompt(s), min_new_tokens = max_new_tokens = 24.
Run: PYTHONPATH=. taskset -c 1 .venv/bin/python docs/bench/issue24/step-parts/opcount.py {head,indep} BATCH gen 0 1
"""
import sys, collections, traceback
import torch
from torch.utils._python_dispatch import TorchDispatchMode
import hf_specdec  # noqa
from hf_specdec.calibration import _ClockedPolicy
from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
which, bs = sys.argv[1], int(sys.argv[2])
drafter = load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=torch.bfloat16)
g = batches(encode(tok, CHAT_PROMPTS[:8]), bs, tok.pad_token_id or 0)[0]
SYNC = ("aten._local_scalar_dense.default", "aten.is_nonzero.default", "aten.item.default", "aten.equal.default")
class Count(TorchDispatchMode):
    def __init__(self): super().__init__(); self.site = collections.Counter(); self.n = 0; self.sync = collections.Counter(); self.model = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        st = [f for f in traceback.extract_stack()[:-1] if "/hf_specdec/" in f.filename or "transformers/generation" in f.filename or "masking_utils" in f.filename]
        inmodel = any("modeling_" in f.filename for f in traceback.extract_stack())
        key = (st[-1].filename.split("/")[-1], st[-1].lineno, st[-1].name) if st else ("?",)
        if inmodel and not any("/hf_specdec/drafters/feature.py" in f.filename for f in traceback.extract_stack()) :
            self.model += 1
        else:
            self.site[key] += 1
        if str(func) in SYNC: self.sync[key] += 1
        self.n += 1
        return func(*args, **(kwargs or {}))
for name in sys.argv[3:]:
    kw = {"drafter": drafter, "gamma": _ClockedPolicy(num_drafts=int(name))} if name != "gen" else {}
    target.generate(**g, max_new_tokens=4, **kw)
    c = Count()
    stats = hf_specdec.SpeculativeStats()
    if name != "gen": kw["stats"] = stats
    with c:
        target.generate(**g, max_new_tokens=24, min_new_tokens=24, **kw)
    steps = stats.target_forwards if name != "gen" else 24
    print(f"== {name}: {steps} steps; per step: all ops {c.n/steps:.1f}, target-model ops {c.model/steps:.1f}, other {sum(c.site.values())/steps:.1f}, syncs {sum(c.sync.values())/steps:.2f}")
    by_fn = collections.Counter()
    for k, v in c.site.items(): by_fn[k[0] + ":" + (k[2] if len(k) > 2 else "")] += v
    print("   by function:", [(k, round(v / steps, 1)) for k, v in by_fn.most_common(25)])
    print("   syncs:", [(k, round(v / steps, 2)) for k, v in c.sync.most_common(15)])
