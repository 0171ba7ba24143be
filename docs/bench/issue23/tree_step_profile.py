"""Per-step time breakdown (class-level timing wraps; PKG=hf_specdec_base times the copied base version) of tree vs chain steps. usage: prof.py DTYPE BATCH MODE DRAFTER SPEC...
SPEC: gN (chain gamma N) or K/D/N (tree)."""
import sys, time, functools, collections, torch
import os, importlib
P = os.environ.get("PKG", "hf_specdec")
hf_specdec = importlib.import_module(P)
loop, cache, processing, verify, tr, tree_loop = (importlib.import_module(f"{P}.{m}") for m in ("loop", "cache", "processing", "verify", "tree", "tree_loop"))
feature, dmodel = importlib.import_module(f"{P}.drafters.feature"), importlib.import_module(f"{P}.drafters.model")
resolve_drafter = importlib.import_module(f"{P}.drafters").resolve_drafter
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[sys.argv[1]]
size, mode, which = int(sys.argv[2]), sys.argv[3], sys.argv[4]
specs = sys.argv[5:]
model, tok = load_smollm2(dtype)
drafter = resolve_drafter(which)
ids = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True) for p in (CHAT_PROMPTS * 2)[:size]]
ids = [i if isinstance(i, list) else i["input_ids"] for i in ids]
(inputs,) = batches(ids, size, tok.pad_token_id)
kw = dict(max_new_tokens=64, do_sample=mode == "sampled")
if mode == "sampled": kw.update(temperature=0.7, top_k=0)
acc = collections.defaultdict(float)
def wrap(owner, name, label):
    orig = getattr(owner, name)
    @functools.wraps(orig)
    def timed(*a, **k):
        t = time.perf_counter()
        try: return orig(*a, **k)
        finally: acc[label] += time.perf_counter() - t
    setattr(owner, name, timed)
wrap(type(model), "forward", "target model fwd")
wrap(feature.BoundHead, "forward", "head model fwd")
if hasattr(drafter, "model"): wrap(type(drafter.model), "forward", "drafter model fwd")
wrap(cache.CachedModel, "forward", "CM.forward")
wrap(cache.CachedModel, "forward_tree", "CM.forward_tree")
wrap(cache.CachedModel, "_position_masks", "  CM._position_masks")
wrap(tr, "visible_keys", "  tree.visible_keys")
wrap(tr, "ancestors", "  tree.ancestors")
wrap(cache.CachedModel, "rollback", "CM.rollback")
wrap(cache.CachedModel, "compact", "  CM.compact")
wrap(cache.CachedModel, "keep_paths", "CM.keep_paths")
if hasattr(cache.CachedModel, '_close_up'): wrap(cache.CachedModel, '_close_up', '  CM._close_up')
for S in (feature.FeatureDraftSession, dmodel.ModelDraftSession):
    wrap(S, "propose", f"propose")
    wrap(S, "propose_tree", f"propose_tree")
    wrap(S, "observe", f"observe")
wrap(feature, "build_tree", "  build_tree (incl expand)")
wrap(dmodel, "build_tree", "  build_tree (incl expand)")
for name in ("node_scores", "path_tokens", "_path_features", "verify_tree_greedy", "verify_tree_stochastic", "commit"):
    wrap(tree_loop, name, "tl." + name)
for name in ("process_scores", "verify_greedy", "verify_stochastic", "commit"):
    wrap(loop, name, "loop." + name)
wrap(processing, "process_scores", "processing.process_scores(all)")
def parse(s):
    if s == "plain": return None
    if s.startswith("g"): return int(s[1:])
    k, d, n = map(int, s.split("/")); return hf_specdec.TreeDraftPolicy(top_k=k, max_depth=d, max_nodes=n)
for s in specs:
    g = parse(s)
    run = lambda st: hf_specdec.speculative_generate(model, drafter, gamma=g, stats=st, **inputs, **kw)
    if g is None: run = lambda st: model.generate(**inputs, **kw)
    run(hf_specdec.SpeculativeStats())
    acc.clear(); st = hf_specdec.SpeculativeStats()
    torch.manual_seed(0)
    t = time.perf_counter(); out = run(st); total = time.perf_counter() - t
    n = st.target_forwards or (out.shape[1] - inputs["input_ids"].shape[1])
    ntok = out.shape[1] - inputs["input_ids"].shape[1]
    print(f"== {sys.argv[1]} b{size} {mode} {which.split('/')[-1]} {s}: total {total*1e3:.0f} ms, {n} target fwds, {ntok/n:.2f} tok/fwd, per step {total/n*1e3:.2f} ms")
    for k, v in acc.items(): print(f"   {k:34s} {v/n*1e3:7.2f} ms/step")
