"""Session p (issue 24): what the default decides with the unrelated and the independent drafter at bf16 batch 4
greedy on the bench's 8 chat prompts, with this process's own calibration: the schedule kind, the calibrated costs
(drafter step, 1- and 2-token forwards, loop steps with 0 / 1 / 2 drafts), the break-even, and what each call drafted.
Two processes calibrate differently on a noisy machine; run it twice to see how far the decisions move.
Run: taskset -c 0 .venv/bin/python docs/bench/issue24/useless-b4/decided_p.py
"""
import torch
from pair import load

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.stats import SpeculativeStats

SCHEDULES: list = []
_start = P.CostAwareDraftPolicy.start


def _kept(self, *args, **kwargs):
    SCHEDULES.append(_start(self, *args, **kwargs))
    return SCHEDULES[-1]


P.CostAwareDraftPolicy.start = _kept


def main() -> None:
    torch.set_num_threads(1)
    target, tokenizer, drafter, unrelated = load(torch.bfloat16)
    for name, chosen in (("unrelated", unrelated), ("independent", drafter)):
        for batch in batches(encode(tokenizer, CHAT_PROMPTS[:8]), 4, tokenizer.pad_token_id or 0):
            stats = SpeculativeStats()
            target.generate(**batch, max_new_tokens=48, drafter=chosen, stats=stats)
            schedule = SCHEDULES[-1]
            costs = schedule.costs
            loop = " / ".join(f"{costs.step_ms(k):.1f}" for k in range(3))
            print(f"{name}: {type(schedule).__name__}, costs {costs.draft_ms:.1f}, {costs.verify_ms(1):.1f} / "
                  f"{costs.verify_ms(2):.1f}; steps {loop}; break-even {schedule.break_even:.3f}, prior "
                  f"{schedule.policy.prior_alpha:.3f}; drafted {int(stats.drafted.sum())}, accepted "
                  f"{int(stats.accepted.sum())}, target forwards {stats.target_forwards}", flush=True)


if __name__ == "__main__":
    main()
