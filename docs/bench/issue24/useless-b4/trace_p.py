"""Session p (issue 24), clock-free: the unrelated drafter's decisions at bf16 batch 4/8 greedy on the bench's 8 chat prompts, costs pinned
to zen4-p's calibration; steps by draft length per call."""
import copy, sys
import torch
from transformers import AutoModelForCausalLM
from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import StepCosts
from hf_specdec.drafters.base import forget_acceptance
from hf_specdec.smollm2 import load_smollm2
torch.set_num_threads(1)
dtype = torch.bfloat16
target, tok = load_smollm2(dtype)
drafter = AutoModelForCausalLM.from_pretrained("drafters/smollm2-135m-instruct", dtype=dtype).eval()
config = copy.deepcopy(drafter.config); forget_acceptance(config); torch.manual_seed(0)
unrelated = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
COSTS = {4: (4.1, 57.0, 61.5, 56.2, 68.7, 78.5), 8: (5.5, 66.8, 81.0, 71.3, 88.2, 103.2)}
STEPS = []
orig = P.CostAwareSchedule.update
def upd(self, active, nd, na):
    STEPS.append(int(nd[active].max()) if active.any() else 0)
    return orig(self, active, nd, na)
P.CostAwareSchedule.update = upd
for b in (4, 8):
    d, one, two, plain, drafting, twice = COSTS[b]
    costs = StepCosts(draft_ms=d, target_ms={1: one, 2: two, 3: 2 * two - one}, loop_ms={0: plain, 1: drafting, 2: twice}, catch_up_ms=0.009 * plain)
    pol = P.CostAwareDraftPolicy(costs=costs, trees=False)
    extra = total = 0.0
    for i, batch in enumerate(batches(encode(tok, CHAT_PROMPTS[:8]), b, tok.pad_token_id or 0)):
        STEPS.clear()
        target.generate(**batch, max_new_tokens=48, drafter=unrelated, gamma=pol)
        steps = STEPS[1:]
        where = [j for j, k in enumerate(steps) if k]
        extra += sum(costs.step_ms(k) - costs.step_ms(0) for k in steps); total += len(steps) * costs.step_ms(0)
        print(f"batch {b} call {i}: {len(steps)} steps, drafting at steps {where}")
    print(f"batch {b}: drafting steps' extra price {extra / total:.2%} of the plain steps")
