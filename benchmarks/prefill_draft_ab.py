"""The default drafting on the prefill's forward where its setting's record says drafting pays, against the shipped
plain prefill, in one process (a change tried and not kept: docs/default-policy-log.md).

Both variants share the setting's record and step costs; they differ only in whether the schedule plans the prefill's
step. Each round times plain generate() and both variants, in a fresh seeded order, after a warm-up call of each; the
result is the paired ratio of the two variants' times (below 1: the drafted prefill faster).

    python benchmarks/prefill_draft_ab.py --pair whisper-large-v3 --dtype bfloat16 --rounds 6
    python benchmarks/prefill_draft_ab.py --pair smollm2 --drafter independent --dtype bfloat16 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import GenerationMixin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_vs_best import load, provenance  # noqa: E402
from encoder_decoder_speed import input_calls, prepare, whisper_pair  # noqa: E402
from hf_specdec import policy  # noqa: E402
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode, grounded_prompts  # noqa: E402

DRAFTED_PREFILL = [False]  # the variant of the current call


def prefill_switch() -> None:
    """Makes each new schedule plan the prefill's step where `DRAFTED_PREFILL` is set and its setting has a record
    (`wants_prior` false), and leave it a plain step otherwise."""
    shipped = policy.AdaptiveSchedule.__init__

    def init(self, *args, **kwargs):
        shipped(self, *args, **kwargs)
        self._stale = DRAFTED_PREFILL[0] and not self.wants_prior

    policy.AdaptiveSchedule.__init__ = init


def whisper_calls(dtype: torch.dtype, batch: int, tokens: int, inputs: int):
    """The Whisper-large-v3-shaped pair of encoder_decoder_speed.py and `inputs` calls' keywords (encoder output given)."""
    target, drafter = whisper_pair(0.025)
    prepare((target, drafter), dtype, 1)  # (packs float32 weights only)
    calls = input_calls(target, True, batch, inputs, tokens, dtype)
    return (lambda **kw: GenerationMixin.generate(target, **kw)), drafter, calls


def smollm2_calls(dtype: str, drafter_kind: str, batch: int, tokens: int):
    """SmolLM2-135M-Instruct with `drafter_kind`, on the held-out chat prompts (grounded ones for prompt lookup)."""
    target, tokenizer, drafter = load(dtype, drafter_kind)
    prompts = list(grounded_prompts()[:8]) if drafter_kind == "prompt_lookup" else CHAT_PROMPTS
    calls = [dict(**group, max_new_tokens=tokens, do_sample=False)
             for group in batches(encode(tokenizer, prompts), batch, tokenizer.pad_token_id)]
    return target.generate, drafter, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", choices=("whisper-large-v3", "smollm2"), required=True)
    parser.add_argument("--drafter", default="independent", help="smollm2: independent, unrelated or prompt_lookup")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=None, help="new tokens (default: 32 Whisper, 48 SmolLM2)")
    parser.add_argument("--inputs", type=int, default=2, help="whisper: random inputs per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    prefill_switch()
    whisper = args.pair == "whisper-large-v3"
    tokens = args.tokens or (32 if whisper else 48)
    if whisper:
        generate, drafter, calls = whisper_calls(getattr(torch, args.dtype), args.batch_size, tokens, args.inputs)
        units = [calls]  # a round times every input in turn
    else:
        generate, drafter, calls = smollm2_calls(args.dtype, args.drafter, args.batch_size, tokens)
        units = [[call] for call in calls]  # a round times each prompt batch on its own

    def run(name: str, unit: list) -> float:
        DRAFTED_PREFILL[0] = name == "prefill drafted"
        start = time.perf_counter()
        for call in unit:
            generate(**call) if name == "plain" else generate(**call, drafter=drafter)
        return time.perf_counter() - start

    names = ["plain", "prefill drafted", "plain prefill"]
    for name in names:
        run(name, units[0])
    times, order = {name: [] for name in names}, random.Random(0)
    for _ in range(args.rounds):
        for unit in units:
            shuffled = order.sample(names, len(names))
            for name in shuffled:
                times[name].append(run(name, unit))
    ratios = [new / old for new, old in zip(times["prefill drafted"], times["plain prefill"])]
    result = dict(**provenance(), pair=args.pair, drafter="distil-whisper-shaped" if whisper else args.drafter,
                  dtype=args.dtype, batch=args.batch_size, tokens=tokens, timed=len(ratios),
                  drafted_over_plain_prefill_time=dict(median=round(statistics.median(ratios), 4),
                                                       geomean=round(statistics.geometric_mean(ratios), 4)),
                  x_plain={name: round(statistics.median(p / t for p, t in zip(times["plain"], times[name])), 3)
                           for name in names[1:]},
                  seconds={name: [round(t, 3) for t in values] for name, values in times.items()})
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
