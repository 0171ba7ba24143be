"""Session q (issue 24): where the default's time goes when it does not draft, against plain generate(), per call of 48
new tokens on the bench's 8 chat prompts (in turns, alternating order): setup (call start to the first target forward),
the gaps between forwards, teardown (last forward to the call's end), the forwards themselves; medians over calls.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/overhead-q/setup_cost.py DTYPE BATCH ROUNDS {head,indep}
"""
import statistics, sys, time
import torch
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2
import hf_specdec  # noqa
dtype = getattr(torch, sys.argv[1]); bs = int(sys.argv[2]); rounds = int(sys.argv[3]); which = sys.argv[4]
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
if which == "head":
    drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3")
else:
    from transformers import AutoModelForCausalLM
    drafter = AutoModelForCausalLM.from_pretrained("drafters/smollm2-135m-instruct", dtype=dtype).eval()
marks = []
cls = type(target); orig = cls.forward
import functools
@functools.wraps(orig)
def fwd(self, *a, **k):
    s = time.perf_counter(); out = orig(self, *a, **k); marks.append((s, time.perf_counter())); return out
cls.forward = fwd
bl = list(batches(encode(tok, CHAT_PROMPTS[:8]), bs, tok.pad_token_id or 0))
methods = {"plain": {}, f"{which}, default": {"drafter": drafter}}
stats = {m: {"setup": [], "gaps": [], "teardown": [], "total": [], "fwd": [], "n": []} for m in methods}
for b in bl[:1]:
    for m, kw in methods.items():
        target.generate(**b, max_new_tokens=8, **kw)
for r in range(rounds):
    for i, b in enumerate(bl):
        order = list(methods) if (r + i) % 2 == 0 else list(methods)[::-1]
        for m in order:
            marks.clear(); t0 = time.perf_counter()
            target.generate(**b, max_new_tokens=48, **methods[m])
            t1 = time.perf_counter()
            st = stats[m]
            st["setup"].append((marks[0][0] - t0) * 1e3); st["teardown"].append((t1 - marks[-1][1]) * 1e3)
            st["gaps"].append(sum(b2[0] - a2[1] for a2, b2 in zip(marks, marks[1:])) * 1e3)
            st["fwd"].append(sum(e - s for s, e in marks) * 1e3); st["total"].append((t1 - t0) * 1e3); st["n"].append(len(marks))
for m, st in stats.items():
    print(m, {k: round(statistics.median(v), 1) for k, v in st.items()}, flush=True)
