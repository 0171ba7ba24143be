"""Forward time with a 2D mask (no padding: transformers passes none), with holes, and with a 4D mask built here, at
1 and 2 tokens, batch 1 and 4, bf16 and float32 (SmolLM2-135M-Instruct, 1 thread, 100 tokens of context, median of 8).
Run: nice -n -15 taskset -c 1 python benchmarks/masks_bf16.py (the figures in docs/how-it-works.md)."""
import statistics
import time

import torch
from transformers import DynamicCache
from hf_specdec.smollm2 import load_smollm2


def main() -> None:
    torch.set_num_threads(1)
    ctx = 100
    for dtype in (torch.bfloat16, torch.float32):
        model, tok = load_smollm2(dtype)
        for b in (1, 4):
            ids = torch.randint(0, 49152, (b, ctx + 2), generator=torch.Generator().manual_seed(0))
            def run(q, mode, reps=10):
                times = []
                for r in range(reps):
                    cache = DynamicCache(config=model.config)
                    with torch.no_grad():
                        model(input_ids=ids[:, :ctx], attention_mask=torch.ones(b, ctx, dtype=torch.long), past_key_values=cache, use_cache=True, logits_to_keep=1)
                        full = torch.ones(b, ctx + q, dtype=torch.long)
                        if mode == "holes": full[:, 5] = 0
                        kwargs = dict(input_ids=ids[:, ctx:ctx + q], attention_mask=full, position_ids=torch.arange(ctx, ctx + q)[None].expand(b, -1), past_key_values=cache, use_cache=True, logits_to_keep=q)
                        if mode == "4d":
                            keys = torch.arange(ctx + q); qpos = torch.arange(ctx, ctx + q)
                            vis = full[:, None, :].bool() & (keys[None, None, :] <= qpos[None, :, None])
                            kwargs["attention_mask"] = torch.zeros(vis.shape, dtype=dtype).masked_fill_(~vis, torch.finfo(dtype).min)[:, None]
                        t = time.perf_counter(); model(**kwargs); times.append(time.perf_counter() - t)
                return statistics.median(times[2:]) * 1e3
            print(str(dtype)[6:], f"b{b}", "  ".join(f"q{q} {m}: {run(q, m):.1f}" for q in (1, 2) for m in ("ones", "holes", "4d")), flush=True)


if __name__ == "__main__":
    main()
