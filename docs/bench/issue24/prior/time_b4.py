"""Session f: plain, fixed gamma 1 and 2, the default and CostAwareDraftPolicy(prior_weight=8 / 16) at batch B (argv[1]; bf16, head v3,
greedy unless argv[2] == "sampled", 48 tokens), 16 chat prompts, one warm-up round, then 3 interleaved rounds."""
import sys, time, torch
import hf_specdec
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.loading import load_drafter
from hf_specdec.bench.prompts import CHAT_PROMPTS, encode, batches
torch.set_num_threads(1)
bs = int(sys.argv[1]) if len(sys.argv) > 1 else 4
sample = len(sys.argv) > 2 and sys.argv[2] == "sampled"
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
bat = batches(encode(tok, CHAT_PROMPTS), bs, tok.pad_token_id or 0)
kw = dict(max_new_tokens=48, do_sample=sample, **({"temperature": 0.7} if sample else {}))
def run(g):
    t = time.perf_counter()
    for i, b in enumerate(bat):
        torch.manual_seed(i)
        extra = {} if g == "plain" else dict(drafter=head) if g == "default" else dict(drafter=head, gamma=VARIANTS.get(g, g))
        target.generate(**b, **kw, **extra)
    return time.perf_counter() - t
from hf_specdec.policy import CostAwareDraftPolicy
VARIANTS = {"pw8": CostAwareDraftPolicy(prior_weight=8.0), "pw16": CostAwareDraftPolicy(prior_weight=16.0)}
ms = ("plain", 1, 2, "default", "pw8", "pw16")
for g in ms: run(g)
res = {g: [] for g in ms}
for r in range(3):
    for g in ms: res[g].append(run(g))
for g in ms:
    print(bs, "sampled" if sample else "greedy", g, " ".join(f"{t:.2f}" for t in res[g]),
          f"x plain (sum) {sum(res['plain'])/sum(res[g]):.3f}", flush=True)
