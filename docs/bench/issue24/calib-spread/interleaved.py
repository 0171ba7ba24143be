"""Session n (issue 24): loop steps timed interleaved within one scratch call. A clocked schedule drafts 0, 1, 2, 2,
1, 0, ... tokens per row in turns, step after step, so a slow stretch of the machine hits every draft length alike
and one prefill serves them all; each length's step is the median of its steps (each call's first left out). Against
the shipped calibration (each length its own scratch call of LOOP_STEPS steps, LOOP_ROUNDS rounds, min of medians)
and 6 such rounds, repeated CALIBRATIONS times in one process; wall time of each in brackets.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/calib-spread/interleaved.py DTYPE BATCHES DRAFTER CALIBRATIONS STEPS CALLS
"""
import copy
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM

from hf_specdec.calibration import LOOP_CONTEXT, LOOP_STEPS, _ClockedPolicy, _ClockedSchedule
from hf_specdec.cpu import describe
from hf_specdec.dispatch import generate_with_drafter
from hf_specdec.drafters import resolve_drafter
from hf_specdec.drafters.base import forget_acceptance
from hf_specdec.loading import load_drafter
from hf_specdec.policy import DraftPolicy
from hf_specdec.smollm2 import load_smollm2

dtype_name, batch_sizes, which = sys.argv[1], sys.argv[2], sys.argv[3]
calibrations, steps_per_call, calls = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
dtype = getattr(torch, dtype_name)
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
if which == "head":
    drafter = load_drafter("drafters/smollm2-135m-instruct-eagle3")
else:
    config = copy.deepcopy(AutoModelForCausalLM.from_pretrained("drafters/smollm2-135m-instruct", dtype=dtype).config)
    forget_acceptance(config)
    torch.manual_seed(0)
    drafter = resolve_drafter(AutoModelForCausalLM.from_config(config, dtype=dtype).eval())
PATTERN = (0, 1, 2, 2, 1, 0)


class Cycling(_ClockedSchedule):
    def __init__(self, batch_size):
        super().__init__(PATTERN[0], batch_size, torch.device("cpu"))
        self.drafts = []

    def update(self, active, num_drafted, num_accepted) -> None:
        super().update(active, num_drafted, num_accepted)
        self.drafts.append(int(self.lengths.max()))
        self.lengths = torch.full_like(self.lengths, PATTERN[len(self.times) % len(PATTERN)])


class CyclingPolicy(DraftPolicy):
    def start(self, target, drafter, batch_size, device, *args, **kwargs):
        self.schedule = Cycling(batch_size)
        return self.schedule


def run(ids, policy, new_tokens, seed):
    config = copy.deepcopy(target.generation_config)
    config.update(max_new_tokens=new_tokens, do_sample=False, eos_token_id=None)
    generate_with_drafter(target, drafter, ids, attention_mask=torch.ones_like(ids), generation_config=config,
                          gamma=policy, generator=torch.Generator().manual_seed(seed))


print(f"# {describe()}; {dtype_name}, greedy, {which} drafter, {calibrations} calibrations; interleaved: {calls} calls "
      f"of {steps_per_call} steps", flush=True)
for batch in [int(b) for b in batch_sizes.split(",")]:
    ids = torch.randint(0, target.config.vocab_size, (batch, LOOP_CONTEXT), generator=torch.Generator().manual_seed(1))
    run(ids, _ClockedPolicy(max_gamma=1, num_drafts=1), 3, 0)  # warm-up
    found = {name: [] for name in ("shipped", "rounds6", "interleaved")}
    seconds = {name: [] for name in found}
    for calibration in range(calibrations):
        start = time.perf_counter()
        medians = {k: [] for k in (0, 1, 2)}
        for attempt in range(6):
            for k in medians:
                clocked = _ClockedPolicy(max_gamma=max(1, k), num_drafts=k)
                run(ids, clocked, LOOP_STEPS + 1, attempt)
                times = clocked.schedules[0].times
                medians[k].append(statistics.median((b - a) * 1e3 for a, b in zip(times, times[1:])))
            if attempt == 1:
                seconds["shipped"].append(time.perf_counter() - start)
        seconds["rounds6"].append(time.perf_counter() - start)
        shipped = {k: min(m[:2]) for k, m in medians.items()}
        rounds6 = {k: min(m) for k, m in medians.items()}
        start = time.perf_counter()
        tagged = {k: [] for k in (0, 1, 2)}
        for attempt in range(calls):
            policy = CyclingPolicy(max_gamma=2)
            run(ids, policy, steps_per_call + 1, attempt)
            s = policy.schedule
            # step i (between update i-1 and update i) drafted s.drafts[i-1]'s successor: the lengths set at update i-1
            lengths = [PATTERN[0]] + [PATTERN[j % len(PATTERN)] for j in range(1, len(s.times))]
            for i in range(2, len(s.times)):
                tagged[lengths[i]].append((s.times[i] - s.times[i - 1]) * 1e3)
        interleaved = {k: statistics.median(v) for k, v in tagged.items()}
        seconds["interleaved"].append(time.perf_counter() - start)
        for name, est in (("shipped", shipped), ("rounds6", rounds6), ("interleaved", interleaved)):
            found[name].append((est[1] / est[0], est[2] / est[0], est[0]))
        print(f"  batch {batch} calibration {calibration}: " + "; ".join(
            f"{n} {e[-1][0]:.3f} {e[-1][1]:.3f} (plain {e[-1][2]:.1f} ms)" for n, e in found.items()), flush=True)
    for name, values in found.items():
        ones, twos = [v[0] for v in values], [v[1] for v in values]
        print(f"  batch {batch} {name:11s}: 1 draft {min(ones):.3f}-{max(ones):.3f} (spread {max(ones) - min(ones):.3f}, "
              f"sd {statistics.stdev(ones):.3f}), 2 drafts {min(twos):.3f}-{max(twos):.3f} (sd {statistics.stdev(twos):.3f}); "
              f"{statistics.mean(seconds[name]):.1f} s", flush=True)
