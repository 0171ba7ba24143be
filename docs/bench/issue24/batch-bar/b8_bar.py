"""Issue 24, session p: the batch bar beyond 4 rows, compared without a clock at batch 8 (see model_time.py for the
method: the real loop with costs pinned to a bench's calibration, every step priced at its calibrated loop step).
Rules: the bar grown by the slowest-row spread (8 % x 1.37 = 10.9 % at batch 8, session o) and by its square (8 % x 1.87
= 15.0 %, which the shortfall measured at batch 8 asks: 13 % -> 15 %). Costs from two bench runs on the same Zen 4:
session n (zen4-n2) and session o (zen4-o, whose calibration priced the fp32 batch-8 1-draft step 2 % lower).
Run: .venv/bin/python docs/bench/issue24/batch-bar/b8_bar.py DTYPE {chat,heldout} {greedy,sampled} {n2,o}
"""
import dataclasses
import importlib.util
import sys
from pathlib import Path

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

spec = importlib.util.spec_from_file_location("model_time", Path(__file__).with_name("model_time.py"))
model_time = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model_time)  # its COSTS are zen4-n2's; its STEPS log each verification's draft length

#: zen4-o's "costs ms" of the head's default rows (drafter step, 1- and 2-token forwards, loop steps with 0 / 1 / 2
#: drafts, ms) at batch 8.
ZEN4_O = {
    ("greedy", "float32", 8): (7.7, 112.2, 135.3, 106.4, 142.4, 177.7),
    ("greedy", "bfloat16", 8): (6.5, 65.0, 76.6, 67.1, 86.1, 99.8),
    ("sampled", "float32", 8): (8.0, 100.1, 126.5, 100.2, 144.4, 177.9),
    ("sampled", "bfloat16", 8): (5.2, 66.4, 78.2, 68.1, 90.7, 110.9),
}


def grown(power: int):
    """The default with its bar beyond 4 rows grown by the spread ratio to `power`."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Grown(P.CostAwareDraftPolicy):
        def draft_gain(self, rows: int) -> float:
            if rows <= 1:
                return self.min_gain
            spread = P.slowest_row_spread
            return max(self.min_gain, self.min_batch_gain * max(1.0, spread(rows) / spread(4)) ** power)

    return Grown


def main() -> None:
    dtype, prompt_set, mode, cost_set = sys.argv[1:5]
    if cost_set == "o":
        model_time.COSTS.update(ZEN4_O)
    torch.set_num_threads(1)
    target, tokenizer = load_smollm2(getattr(torch, dtype))
    head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
    prompts = encode(tokenizer, HELDOUT_REQUESTS if prompt_set == "heldout" else CHAT_PROMPTS[:8])
    costs = model_time.pinned(mode, dtype, 8)
    methods = {
        "plain": None,
        "spread (10.9 %)": grown(1)(costs=costs, trees=False),
        "spread squared (15.0 %)": grown(2)(costs=costs, trees=False),
    }
    plain_ms, cells = None, []
    for name, gamma in methods.items():
        total, drafting = 0.0, 0
        for i, batch in enumerate(batches(prompts, 8, tokenizer.pad_token_id or 0)):
            kwargs = dict(max_new_tokens=48)
            if mode == "sampled":
                kwargs.update(do_sample=True, temperature=0.7, eos_token_id=None)
            if gamma is None:
                lengths = [0] * (target.generate(**batch, **kwargs).shape[1] - batch["input_ids"].shape[1] - 1)
            else:
                model_time.STEPS.clear()
                seeded = {"generator": torch.Generator().manual_seed(i)} if mode == "sampled" else {}
                target.generate(**batch, **kwargs, drafter=head, gamma=gamma, **seeded)
                lengths = model_time.STEPS[1:]  # the first verification is the prefill
            total += sum(costs.step_ms(length) for length in lengths)
            drafting += sum(length > 0 for length in lengths)
        plain_ms = plain_ms or total
        cells.append(f"{name} {plain_ms / total:.3f} ({drafting} drafting steps)")
    print(f"costs {cost_set}, {mode} {dtype} batch 8 {prompt_set}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
