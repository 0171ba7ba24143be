"""Monte Carlo of the default's schedule (CostAwareSchedule) for choosing `give_up_after`: the plain rate over the
rate of a call of 48 new tokens, with each draft accepted independently with probability alpha, under step costs
measured by the bench (bf16, AMD EPYC Zen 5, avx512_bf16, no amx_bf16; the head's calibration at 36ea757 for batch 1,
the independent drafter's for batch 4). 400 calls per cell, seeds 0-399.

    python docs/bench/issue24/giveup_sim.py
"""

import random
import statistics

import torch

from hf_specdec.calibration import StepCosts
from hf_specdec.policy import CostAwareDraftPolicy

SETTINGS = {
    1: StepCosts(draft_ms=1.0, target_ms={1: 24.3, 2: 25.5, 7: 30.0}, loop_ms={0: 25.5, 1: 28.4}),
    4: StepCosts(draft_ms=1.8, target_ms={1: 31.5, 2: 36.4, 7: 50.0}, loop_ms={0: 33.7, 1: 41.0}),
}


def ms_per_token(policy, costs, alpha, batch, new_tokens, seed):
    rng = random.Random(seed)
    schedule = policy.start(None, None, batch, torch.device("cpu"))
    schedule.max_new_tokens = new_tokens
    made, elapsed = [0] * batch, 0.0
    while min(made) < new_tokens:
        lengths = schedule.lengths.clone()
        elapsed += costs.step_ms(int(lengths.max()))
        accepted = []
        for row in range(batch):
            count = 0
            while count < int(lengths[row]) and rng.random() < alpha:
                count += 1
            accepted.append(count)
            made[row] += count + 1
        schedule.update(torch.ones(batch, dtype=torch.bool), lengths, torch.tensor(accepted))
    return elapsed / (batch * new_tokens)


def main():
    for batch, costs in SETTINGS.items():
        for alpha in (0.0, 0.39, 0.45):
            cells = []
            for give_up_after in (3, 4, 5, 6, 8):
                policy = CostAwareDraftPolicy(costs=costs, give_up_after=give_up_after)
                ms = statistics.mean(ms_per_token(policy, costs, alpha, batch, 48, seed) for seed in range(400))
                cells.append(f"{give_up_after}: {costs.step_ms(0) / batch / ms:.3f}")
            print(f"batch {batch}, alpha {alpha}: x plain rate by give_up_after  " + "  ".join(cells))


if __name__ == "__main__":
    main()
