"""Issue 24, session o: draft-length rules for batches compared without a clock. Each rule runs the real loop on real
prompts with costs pinned to what the bench's calibration measured on this setting (AMD EPYC Zen 4, zen4-n2: drafter
step, 1- and 2-token forwards, loop steps with 0 / 1 / 2 drafts), so its decisions and its steps repeat exactly; every
step is then priced at the measured loop step of its draft length, and plain generate() at the plain step (the prefill
left out of both). Model time is what the bench's timing would see if each step cost its calibrated price; a 1-draft
step measured 134.7 ms in real held-out calls at fp32 batch 8 against 132.5 calibrated (step_anatomy.txt), and the
before-rule's bench miss (0.941x) reads 0.947x here.
Run: .venv/bin/python docs/bench/issue24/batch-bar/model_time.py DTYPE BATCHES {chat,heldout} {greedy,sampled}
(chat: the bench's 8 chat prompts; heldout: the 48 held-out requests; sampled: temperature 0.7, EOS ignored, seed i
for the i-th batch, as the bench's sampled runs.)
"""
import sys
from dataclasses import dataclass

import torch

from hf_specdec import policy as P
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.calibration import StepCosts
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.policy import DraftSchedule
from hf_specdec.smollm2 import load_smollm2

#: (mode, dtype, batch): drafter step, 1- and 2-token forwards, loop steps with 0 / 1 / 2 drafts, ms (zen4-n2's
#: "costs ms" of the head's default rows).
COSTS = {
    ("greedy", "float32", 4): (5.2, 83.0, 98.0, 83.7, 107.6, 120.2),
    ("greedy", "float32", 8): (6.6, 99.7, 124.0, 99.7, 136.1, 160.1),
    ("greedy", "bfloat16", 4): (4.0, 58.5, 64.1, 57.7, 70.7, 80.9),
    ("greedy", "bfloat16", 8): (5.0, 64.5, 79.1, 64.4, 80.7, 96.5),
    ("sampled", "float32", 4): (5.6, 90.5, 102.6, 91.8, 111.4, 131.9),
    ("sampled", "float32", 8): (6.3, 97.9, 124.4, 99.3, 140.4, 171.6),
    ("sampled", "bfloat16", 4): (3.9, 59.0, 63.8, 57.9, 69.5, 80.5),
    ("sampled", "bfloat16", 8): (4.8, 65.0, 76.2, 66.1, 88.3, 105.6),
}


def pinned(mode: str, dtype: str, batch: int) -> StepCosts:
    draft, one, two, plain, drafting, twice = COSTS[mode, dtype, batch]
    return StepCosts(draft_ms=draft, target_ms={1: one, 2: two, 3: 2 * two - one},
                     loop_ms={0: plain, 1: drafting, 2: twice}, catch_up_ms=0.009 * plain)


STEPS: list[int] = []  # each verification's draft length (the most any active row drafted)


def _clocked(cls):
    update = cls.update

    def logged(self, active, num_drafted, num_accepted):
        STEPS.append(int(num_drafted[active].max()) if active.any() else 0)
        return update(self, active, num_drafted, num_accepted)

    cls.update = logged


for cls in (DraftSchedule, P.CostAwareSchedule):
    _clocked(cls)


class RowRule(P.CostAwareSchedule):
    """The default's length choice with `choose` in place of the summed-token rule; the give-up rule and probes as
    the default has them."""

    def choose(self, rows: torch.Tensor, longest: int) -> int:
        raise NotImplementedError

    def _lengths(self, active, probing):
        rows = active.cpu()
        k = 0
        if rows.any():
            longest = min(self.policy.max_gamma, 1 + int(self.total_accepted[rows].max()))
            k = 0 if self.given_up() else self.choose(rows, longest)
            k = 1 if k == 0 and probing else k
        return torch.full(rows.shape, k, dtype=torch.long, device=self.device)


class SlowestAlpha(RowRule):
    """The batch decides on its least accepted row's estimate alone (with the batch bar)."""

    def choose(self, rows, longest):
        alpha = self.alpha()[rows].min().reshape(1)
        return P.best_draft_length(alpha, self.costs, longest, self.policy.draft_gain(int(rows.sum())))


class Bottleneck(RowRule):
    """The length that ends the batch soonest if each row needs tokens-left / expected-tokens steps (no spread)."""

    def choose(self, rows, longest):
        alpha = self.alpha()[rows].double()
        left = (self.max_new_tokens - self._committed[rows]).clamp(min=1).double()
        best, best_ms = 0, float(left.max()) * self.costs.step_ms(0)
        for length in range(1, longest + 1):
            ms = float((left / P.expected_tokens(alpha, length)).max()) * self.costs.step_ms(length)
            if ms * (1 + self.policy.min_gain) < best_ms:
                best, best_ms = length, ms
        return best


def rule(schedule_cls=None, **kwargs):
    @dataclass(frozen=True, kw_only=True)
    class Rule(P.CostAwareDraftPolicy):
        def start(self, *args, **kw):
            schedule = P.CostAwareDraftPolicy.start(self, *args, **kw)
            if schedule_cls is not None and type(schedule) is P.CostAwareSchedule:
                schedule.__class__ = schedule_cls
                schedule.lengths = schedule._lengths(schedule._active, probing=False)
            return schedule

    return Rule(trees=False, **kwargs)


def main() -> None:
    dtype, sizes, prompt_set, mode = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    target, tokenizer = load_smollm2(getattr(torch, dtype))
    head = load_drafter("drafters/smollm2-135m-instruct-eagle3")
    prompts = encode(tokenizer, HELDOUT_REQUESTS if prompt_set == "heldout" else CHAT_PROMPTS[:8])
    for batch_size in sizes:
        costs = pinned(mode, dtype, batch_size)
        methods = {
            "plain generate()": None,
            "bar 5 % (before)": rule(costs=costs, min_batch_gain=0.05),
            "bar 8 % (this commit)": rule(costs=costs, min_batch_gain=0.08),
            "bar 10 %": rule(costs=costs, min_batch_gain=0.10),
            "least accepted row's alpha, bar 5 %": rule(SlowestAlpha, costs=costs, min_batch_gain=0.05),
            "bottleneck: tokens left / expected tokens": rule(Bottleneck, costs=costs),
            "chain of 1": 1,
        }
        plain_ms = None
        for name, gamma in methods.items():
            total, counts = 0.0, {}
            for i, batch in enumerate(batches(prompts, batch_size, tokenizer.pad_token_id or 0)):
                kwargs = dict(max_new_tokens=48)
                if mode == "sampled":
                    kwargs.update(do_sample=True, temperature=0.7, eos_token_id=None)
                if gamma is None:
                    new = target.generate(**batch, **kwargs).shape[1] - batch["input_ids"].shape[1]
                    lengths = [0] * (new - 1)
                else:
                    STEPS.clear()
                    target.generate(**batch, **kwargs, drafter=head, gamma=gamma,
                                    **({"generator": torch.Generator().manual_seed(i)} if mode == "sampled" else {}))
                    lengths = STEPS[1:]  # the first verification is the prefill
                for length in lengths:
                    total += costs.step_ms(length)
                    counts[length] = counts.get(length, 0) + 1
            plain_ms = plain_ms or total
            print(f"{mode} {dtype} batch {batch_size} {prompt_set}: {name}: {plain_ms / total:.3f}x plain in model time, "
                  f"steps by draft length {dict(sorted(counts.items()))}", flush=True)


if __name__ == "__main__":
    main()
