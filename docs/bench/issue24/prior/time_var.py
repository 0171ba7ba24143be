"""Session f: the default's prior weight at batch > 1: plain vs default vs CostAwareDraftPolicy(prior_weight=16),
16 chat prompts, 48 tokens, bf16 target, 1 thread, interleaved, 3 rounds. argv: drafter(head|indep|unrelated) batch mode."""
import sys, time, copy, torch
import hf_specdec
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareDraftPolicy
from hf_specdec.bench.prompts import CHAT_PROMPTS, encode, batches
torch.set_num_threads(1)
kind, bs, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
target, tok = load_smollm2(torch.bfloat16)
if kind == "head":
    drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3")
else:
    drafter = load_drafter("drafters/smollm2-135m-instruct", dtype=torch.float32)
    if kind == "unrelated":
        torch.manual_seed(0)
        m = type(drafter)(drafter.config).to(torch.float32).eval(); m.generation_config = copy.deepcopy(drafter.generation_config); drafter = m
bat = batches(encode(tok, CHAT_PROMPTS), bs, tok.pad_token_id or 0)
sample = mode == "sampled"
kw = dict(max_new_tokens=48, do_sample=sample, **({"temperature": 0.7} if sample else {}))
VARIANTS = {"default": None, "pw16": CostAwareDraftPolicy(prior_weight=16.0)}
def run(g):
    t = time.perf_counter()
    for i, b in enumerate(bat):
        torch.manual_seed(i)
        extra = {} if g == "plain" else dict(drafter=drafter) if VARIANTS[g] is None else dict(drafter=drafter, gamma=VARIANTS[g])
        target.generate(**b, **kw, **extra)
    return time.perf_counter() - t
ms = ("plain", "default", "pw16")
for g in ms: run(g)
res = {g: [] for g in ms}
for r in range(3):
    for g in ms: res[g].append(run(g))
for g in ms:
    print(kind, bs, mode, g, " ".join(f"{t:.2f}" for t in res[g]), f"x plain (sum) {sum(res['plain'])/sum(res[g]):.3f}", flush=True)
