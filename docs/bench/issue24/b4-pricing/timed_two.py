"""Session h check of the batch-4 pricing fix (issue 24): the default's calibration now times whole loop steps with 2
drafts as well (calibration.LOOP_DRAFTS). Prints, at batch 1, 4 and 8 (bf16 target, head version 4, greedy, 1 thread),
the timed loop steps, the 2-draft step the old rule priced (plain step x v(3) / v(1) + 2 x per-draft overhead) against
the timed one, every length's price relative to a plain step, and the speed the model expects at alpha 0.45 / 0.5.
Run: taskset -c 1 .venv/bin/python docs/bench/issue24/b4-pricing/timed_two.py"""
import torch

from hf_specdec.calibration import step_costs
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareDraftPolicy
from hf_specdec.smollm2 import load_smollm2

torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
policy = CostAwareDraftPolicy()
for batch in (1, 4, 8):
    costs = step_costs(target, head, batch, torch.device("cpu"), policy.widths(), False, target.config.vocab_size,
                       target.generation_config)
    loop = dict(costs.loop_ms)
    steps = [costs.step_ms(k) for k in range(5)]
    print(batch, "loop", {k: round(ms, 2) for k, ms in loop.items()},
          "2-draft step / 1-draft step: old rule", round(costs._scaled_ms(2) / loop[1], 3), "timed", round(loop[2] / loop[1], 3),
          "| step/plain", [round(ms / steps[0], 3) for ms in steps])
    for alpha in (0.45, 0.5):
        print("   alpha", alpha, "speed vs plain by k",
              [round(sum(alpha**i for i in range(k + 1)) / (steps[k] / steps[0]), 3) for k in range(5)])
