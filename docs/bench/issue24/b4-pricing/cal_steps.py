"""Session g diagnostic (issue 24 lead): what the default's calibration prices a loop step with k drafts at, relative to a plain
step, at batch 1, 4 and 8 (bf16 target, head version 4, greedy, 1 thread), and the speed its model expects at alpha 0.45 / 0.5.
Compare with the bench: at batch 4 a fixed chain of 2 ran 1.231x plain and the default (mostly 1 draft) 1.091x
(docs/bench/issue23/head-v4/bfloat16-greedy). Run: taskset -c 1 .venv/bin/python docs/bench/issue24/b4-pricing/cal_steps.py"""
import torch
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.loading import load_drafter
from hf_specdec.calibration import step_costs
from hf_specdec.policy import CostAwareDraftPolicy
torch.set_num_threads(1)
target, tok = load_smollm2(torch.bfloat16)
head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
pol = CostAwareDraftPolicy()
for bs in (1, 4, 8):
    c = step_costs(target, head, bs, torch.device("cpu"), pol.widths(), False, target.config.vocab_size, target.generation_config)
    s = [c.step_ms(k) for k in range(5)]
    print(bs, "loop", c.loop_ms, "v", [round(c.verify_ms(w)/c.verify_ms(1),3) for w in range(1,6)], "step/plain", [round(x/s[0],3) for x in s])
    for a in (0.45, 0.5):
        print("   alpha", a, "speed vs plain by k", [round((sum(a**i for i in range(k+1)))/(s[k]/s[0]),3) for k in range(5)])
