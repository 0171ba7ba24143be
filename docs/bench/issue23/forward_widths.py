# Cost of one target forward over q new tokens vs one token (cache of 100), interleaved; usage: forward_widths.py bf16|fp32 BATCH
import sys, time, torch, statistics
from transformers import DynamicCache
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
ctx = 100
dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[sys.argv[1]]
b = int(sys.argv[2])
model, tok = load_smollm2(dtype)
ids = torch.randint(0, 49152, (b, ctx + 40), generator=torch.Generator().manual_seed(0))
cache = DynamicCache(config=model.config)
with torch.no_grad():
    model(input_ids=ids[:, :ctx], attention_mask=torch.ones(b, ctx, dtype=torch.long), past_key_values=cache, use_cache=True, logits_to_keep=1)
def once(q, mode):
    with torch.no_grad():
        full = torch.ones(b, ctx + q, dtype=torch.long)
        kwargs = dict(input_ids=ids[:, ctx:ctx + q], attention_mask=full, position_ids=torch.arange(ctx, ctx + q)[None].expand(b, -1), past_key_values=cache, use_cache=True, logits_to_keep=q if mode != "keep1" else 1)
        if mode == "4d":
            keys = torch.arange(ctx + q); qpos = torch.arange(ctx, ctx + q)
            vis = full[:, None, :].bool() & (keys[None, None, :] <= qpos[None, :, None])
            kwargs["attention_mask"] = torch.zeros(vis.shape, dtype=dtype).masked_fill_(~vis, torch.finfo(dtype).min)[:, None]
        t = time.perf_counter(); model(**kwargs); dt = time.perf_counter() - t
        cache.crop(-q)
        return dt
res = {}
for rep in range(12):
    for q in (1, 2, 5, 9, 17, 25, 33):
        for mode in ("ones", "4d", "keep1"):
            res.setdefault((q, mode), []).append(once(q, mode))
base = statistics.median(res[(1, "ones")])
print(sys.argv[1], f"b{b} q1 median {base*1e3:.1f} ms; ratios (median over reps of t/t_q1 same rep):")
for q in (1, 2, 5, 9, 17, 25, 33):
    print(f"  q{q}", "  ".join(f"{m} {statistics.median([a/c for a, c in zip(res[(q, m)], res[(1, 'ones')])]):.2f}" for m in ("ones", "4d", "keep1")), f" (abs ones {statistics.median(res[(q,'ones')])*1e3:.1f})")
