# Attention kernels at the shapes of a tree step (SmolLM2-135M: 9 query heads, 3 KV heads, head dim 64), 1 thread.
import time, torch, statistics
import torch.nn.functional as F
torch.set_num_threads(1)
def bench(fn, reps=50):
    for _ in range(5): fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6
for dtype in (torch.bfloat16, torch.float32):
    for q, kv in ((1, 200), (5, 200), (17, 200), (33, 200), (17, 600)):
        Q = torch.randn(1, 9, q, 64, dtype=dtype); K = torch.randn(1, 3, kv, 64, dtype=dtype); V = torch.randn(1, 3, kv, 64, dtype=dtype)
        vis = torch.rand(1, 1, q, kv) > 0.3
        add = torch.zeros(1, 1, q, kv, dtype=dtype).masked_fill_(~vis, torch.finfo(dtype).min)
        Kr, Vr = K.repeat_interleave(3, 1), V.repeat_interleave(3, 1)
        r = {
            "nomask_gqa": bench(lambda: F.scaled_dot_product_attention(Q, K, V, enable_gqa=True)),
            "add_gqa": bench(lambda: F.scaled_dot_product_attention(Q, K, V, attn_mask=add, enable_gqa=True)),
            "bool_gqa": bench(lambda: F.scaled_dot_product_attention(Q, K, V, attn_mask=vis, enable_gqa=True)),
            "add_rep": bench(lambda: F.scaled_dot_product_attention(Q, Kr, Vr, attn_mask=add)),
            "manual": bench(lambda: (torch.softmax((Q @ Kr.transpose(-1, -2)) * 0.125 + add, -1) @ Vr)),
        }
        print(str(dtype)[6:], q, kv, "  ".join(f"{k} {v:.0f}us" for k, v in r.items()), flush=True)
