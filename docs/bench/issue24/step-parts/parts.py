"""Session s (issue 24): where a loop step's time goes, per part (each wrapped in a timer; nested parts counted once), with a
fixed draft length (0 = plain steps), SmolLM2 and the shipped drafter (head or indep) on the bench's 8 chat prompts, 48 new
tokens; "min" adds min_new_tokens=48 (EOS masked all along: generate()'s min-length processors run every step).
Run: PYTHONPATH=. nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/step-parts/parts.py DTYPE BATCH {head,indep} K {min,nomin}
"""
import sys, time, functools, statistics, collections
import torch
import hf_specdec  # noqa
from hf_specdec import loop, cache, verify, stats, processing
from hf_specdec.drafters import feature, model as dmodel
from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.calibration import _ClockedPolicy
dtype = getattr(torch, sys.argv[1]); bs = int(sys.argv[2]); which = sys.argv[3]; gamma = int(sys.argv[4]); mnt = sys.argv[5] == "min"
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=dtype)
groups = batches(encode(tok, CHAT_PROMPTS[:8]), bs, tok.pad_token_id or 0)
T = collections.defaultdict(float); N = collections.defaultdict(int)
stack = []
def wrap(owner, name, label):
    f = getattr(owner, name)
    @functools.wraps(f)
    def g(*a, **k):
        s = time.perf_counter(); stack.append(0.0)
        try: return f(*a, **k)
        finally:
            d = time.perf_counter() - s; child = stack.pop()
            T[label] += d - child; N[label] += 1
            if stack: stack[-1] += d
    setattr(owner, name, g)
wrap(type(target), "forward", "target model fwd")
wrap(feature.BoundHead, "forward", "head fwd")
wrap(cache.CachedModel, "forward", "CachedModel.forward (own)")
wrap(cache.CachedModel, "rollback", "rollback")
wrap(loop, "process_scores", "process_scores")
wrap(loop, "verify_greedy", "verify_greedy")
wrap(loop, "commit", "commit")
wrap(loop, "_write", "_write")
wrap(stats.SpeculativeStats, "record_step", "record_step")
wrap(feature.FeatureDraftSession, "propose", "session.propose (own)")
wrap(feature.FeatureDraftSession, "observe", "session.observe (own)")
wrap(feature.FeatureDraftSession, "_take_observed", "_take_observed")
wrap(dmodel.ModelDraftSession, "propose", "ModelDraftSession.propose (own)")
pol = _ClockedPolicy(num_drafts=gamma)
kw = {"drafter": drafter, "gamma": pol}
extra = {"min_new_tokens": 48} if mnt else {}
target.generate(**groups[0], max_new_tokens=8, **kw)
T.clear(); N.clear()
wall = 0; steps = 0
for g in groups:
    s = time.perf_counter()
    out = target.generate(**g, max_new_tokens=48, **extra, **kw)
    wall += time.perf_counter() - s
nsteps = N["verify_greedy"]
print(f"{sys.argv[1:]} wall/step {wall*1e3/nsteps:.2f} ms over {nsteps} steps")
acc = 0
for k, v in sorted(T.items(), key=lambda kv: -kv[1]):
    acc += v
    print(f"  {k:34s} {v*1e3/nsteps:7.3f} ms/step  ({N[k]} calls)")
print(f"  {'unaccounted loop':34s} {(wall-acc)*1e3/nsteps:7.3f}")
