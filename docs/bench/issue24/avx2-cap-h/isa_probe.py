"""Session h: what capping oneDNN / ATen / MKL at AVX2 does to SmolLM2-135M forwards on this Zen 5 (a stand-in for an AVX2-only CPU
such as Zen 3). One-token and wider cached forwards after 128 tokens, 1 thread, the fastest of 6. Run, uncapped and capped:
  taskset -c 1 .venv/bin/python docs/bench/issue24/avx2-cap-h/isa_probe.py
  ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 taskset -c 1 .venv/bin/python docs/bench/issue24/avx2-cap-h/isa_probe.py"""
import os, time, torch
torch.set_num_threads(1)
print("ONEDNN_MAX_CPU_ISA", os.environ.get("ONEDNN_MAX_CPU_ISA"), "ATEN", os.environ.get("ATEN_CPU_CAPABILITY"), torch.backends.cpu.get_cpu_capability())
from hf_specdec.smollm2 import load_smollm2
for dtype in (torch.bfloat16, torch.float32):
    m, _ = load_smollm2(dtype)
    ids = torch.randint(0, 1000, (1, 128))
    with torch.no_grad():
        out = m(ids, use_cache=True); pkv = out.past_key_values
        res = {}
        for w in (1, 2, 4, 8):
            x = torch.randint(0, 1000, (1, w))
            ts = []
            for r in range(6):
                t = time.perf_counter(); m(x, past_key_values=pkv, use_cache=True); ts.append(time.perf_counter() - t)
                pkv.crop(-w)
            res[w] = min(ts) * 1e3
    print(dtype, {w: round(v, 1) for w, v in res.items()}, "ratios", {w: round(v / res[1], 2) for w, v in res.items()})
