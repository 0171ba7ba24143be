"""Session p (issue 24), clock-free: the unrelated drafter's decisions (the bench's: the shipped drafter's architecture,
fresh random weights, no declared acceptance) at bf16 batch 4 and 8 greedy on the bench's 8 chat prompts, costs pinned
to zen4-p's calibration; which steps drafted, and what they add at the calibrated step prices.
Run: taskset -c 0 .venv/bin/python docs/bench/issue24/useless-b4/trace_p.py
"""
import torch
from pair import load

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import StepCosts

#: zen4-p's "costs ms" of the unrelated drafter's rows: drafter step, 1- and 2-token forwards, loop steps with 0 / 1 / 2.
COSTS = {4: (4.1, 57.0, 61.5, 56.2, 68.7, 78.5), 8: (5.5, 66.8, 81.0, 71.3, 88.2, 103.2)}
STEPS: list[int] = []  # each verification's draft length (the most any active row drafted)
_update = P.CostAwareSchedule.update


def _logged(self, active, num_drafted, num_accepted):
    STEPS.append(int(num_drafted[active].max()) if active.any() else 0)
    return _update(self, active, num_drafted, num_accepted)


P.CostAwareSchedule.update = _logged


def main() -> None:
    torch.set_num_threads(1)
    target, tokenizer, _, unrelated = load(torch.bfloat16)
    for batch_size, (draft, one, two, plain, drafting, twice) in COSTS.items():
        costs = StepCosts(draft_ms=draft, target_ms={1: one, 2: two, 3: 2 * two - one},
                          loop_ms={0: plain, 1: drafting, 2: twice}, catch_up_ms=0.009 * plain)
        policy = P.CostAwareDraftPolicy(costs=costs, trees=False)
        extra = total = 0.0
        for i, batch in enumerate(batches(encode(tokenizer, CHAT_PROMPTS[:8]), batch_size, tokenizer.pad_token_id or 0)):
            STEPS.clear()
            target.generate(**batch, max_new_tokens=48, drafter=unrelated, gamma=policy)
            steps = STEPS[1:]  # the first verification is the prefill
            extra += sum(costs.step_ms(k) - costs.step_ms(0) for k in steps)
            total += len(steps) * costs.step_ms(0)
            print(f"batch {batch_size} call {i}: {len(steps)} steps, drafting at steps {[j for j, k in enumerate(steps) if k]}")
        print(f"batch {batch_size}: drafting steps' extra price {extra / total:.2%} of the plain steps")


if __name__ == "__main__":
    main()
