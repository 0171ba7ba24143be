"""Where does slack 7 lose against slack 3? Times the target's forward, rollback (incl. compaction) and
counts compactions and masked columns per forward. 2 drafts a step, max_gamma 6, bf16 b4 head.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/chaos/split_time.py ROUNDS (session j, at 6aee187)."""
import dataclasses, random, sys, time, collections
import torch
from hf_specdec import policy as P
from hf_specdec.cache import CachedModel
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")

@dataclasses.dataclass(frozen=True, kw_only=True)
class Fixed(P.DraftPolicy):
    k: int = 2
    def initial_lengths(self, batch_size, device):
        return torch.full((batch_size,), self.k, dtype=torch.long, device=device)

acc = collections.defaultdict(float)
state = {"cap": 99}
fwd, rb, cp = CachedModel.forward, CachedModel.rollback, CachedModel.compact
def is_target(self): return self.model is target
def forward(self, *a, **k):
    if not is_target(self): return fwd(self, *a, **k)
    t = time.perf_counter(); out = fwd(self, *a, **k); acc[state["name"], "fwd"] += time.perf_counter() - t
    acc[state["name"], "n"] += 1
    acc[state["name"], "masked"] += int((~self.valid).sum()) / self.valid.shape[0]
    acc[state["name"], "width"] += self.valid.shape[1]
    return out
def rollback(self, keep, slack):
    if not is_target(self): return rb(self, keep, slack)
    t = time.perf_counter(); rb(self, keep, min(slack, state["cap"])); acc[state["name"], "rb"] += time.perf_counter() - t
def compact(self):
    if is_target(self): acc[state["name"], "compactions"] += 1
    t = time.perf_counter(); cp(self)
    if is_target(self): acc[state["name"], "compact_s"] += time.perf_counter() - t
CachedModel.forward, CachedModel.rollback, CachedModel.compact = forward, rollback, compact

methods = {"slack7": 99, "slack3": 3, "slack1": 1}
groups = batches(encode(tok, CHAT_PROMPTS[8:16]), 4, tok.pad_token_id or 0)
for name, cap in methods.items():
    state.update(name="warm", cap=cap)
    for b in groups: target.generate(**b, max_new_tokens=48, do_sample=False, drafter=head, gamma=Fixed(max_gamma=6))
acc.clear()
rng = random.Random(0)
for r in range(int(sys.argv[1])):
    order = list(methods); rng.shuffle(order)
    for name in order:
        state.update(name=name, cap=methods[name])
        t = time.perf_counter()
        for b in groups: target.generate(**b, max_new_tokens=48, do_sample=False, drafter=head, gamma=Fixed(max_gamma=6))
        acc[name, "total"] += time.perf_counter() - t
for name in methods:
    n = acc[name, "n"]
    print(f"{name}: total {acc[name,'total']:.2f}s, forwards {n:.0f}, fwd {1000*acc[name,'fwd']/n:.2f} ms, "
          f"rollback {1000*acc[name,'rb']/n:.2f} ms (compactions {acc[name,'compactions']:.0f}, "
          f"{1000*acc[name,'compact_s']/max(1,acc[name,'compactions']):.2f} ms each), "
          f"mean width {acc[name,'width']/n:.1f}, masked/row {acc[name,'masked']/n:.1f}")
