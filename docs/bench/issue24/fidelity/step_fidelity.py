"""Session m (issue 24): do the calibration's scratch loop steps price real calls' steps? Whole loop steps with 0, 1 and
2 drafts per row (calibration's _ClockedPolicy: the time between verifications, median over a call's steps), timed in
turns on (a) the calibration's own scratch input (128 random tokens a row, no padding), (b) the bench's 8 chat prompts
as one left-padded batch, (c) the same prompts cut to the shortest one (no padding), each for 48 new tokens with no
early stop, with the shipped independent drafter or the head; the 1- and 2-draft steps as multiples of the plain step.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/fidelity/step_fidelity.py DTYPE BATCH DRAFTER ROUNDS
"""
import copy
import statistics
import sys

import torch

from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import LOOP_CONTEXT, _ClockedPolicy
from hf_specdec.cpu import describe
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

dtype, batch_size, which, rounds = getattr(torch, sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.set_num_threads(1)
target, tok = load_smollm2(dtype)
drafter = load_drafter(DEFAULT_FEATURE_DRAFTER) if which == "head" else load_drafter(DEFAULT_DRAFTER, dtype=dtype)
ids = encode(tok, list(CHAT_PROMPTS[:batch_size]))
padded = batches(ids, batch_size, tok.pad_token_id or 0)[0]
shortest = min(len(i) for i in ids)
cut = torch.tensor([i[-shortest:] for i in ids])
scratch = torch.randint(0, target.config.vocab_size, (batch_size, LOOP_CONTEXT), generator=torch.Generator().manual_seed(1))
inputs = {"scratch (calibration's)": dict(input_ids=scratch, attention_mask=torch.ones_like(scratch)),
          "chat prompts, padded": padded,
          "chat prompts, cut to the shortest": dict(input_ids=cut, attention_mask=torch.ones_like(cut))}
config = copy.deepcopy(target.generation_config)
config.update(max_new_tokens=48, do_sample=False, eos_token_id=None)
times = {(name, k): [] for name in inputs for k in (0, 1, 2)}
for attempt in range(rounds + 1):  # the first round warms up
    for (name, k), steps in times.items():
        policy = _ClockedPolicy(max_gamma=max(1, k), num_drafts=k)
        target.generate(**inputs[name], generation_config=config, drafter=drafter, gamma=policy)
        (schedule,) = policy.schedules
        if attempt:
            steps.append(statistics.median(b - a for a, b in zip(schedule.times, schedule.times[1:])) * 1e3)
print(f"# {describe()}; {sys.argv[1]}, batch {batch_size}, {which} drafter, greedy, 48 new tokens without early stop, "
      f"{rounds} rounds in turns (fastest round; prompts {[len(i) for i in ids]} tokens)")
for name in inputs:
    plain, one, two = (min(times[name, k]) for k in (0, 1, 2))
    print(f"  {name}: plain {plain:.1f} ms, 1 draft {one:.1f} ms ({one / plain:.3f}x), 2 drafts {two:.1f} ms ({two / plain:.3f}x)")
