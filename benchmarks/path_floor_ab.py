"""The path stop's floors reading the next draft at least at depth 1's acceptance (shipped) against at least at depth
2's (the rule before), in one process, beside plain generate(), a fixed chain and (encoder-decoder pairs) transformers'
assisted generation (docs/default-policy-log.md).

Each arm keeps its own step costs and record (the setting's registry is swapped per arm), as if it ran alone. Each
round times every arm once over the same inputs, in a fresh seeded order, after a warm-up of each
(`encoder_decoder_speed.side_by_side`); every arm's tokens are checked against plain generate()'s. Greedy, batch 1,
one thread.

    python benchmarks/path_floor_ab.py --pair whisper-large-v3 --rounds 8 --out F
    python benchmarks/path_floor_ab.py --pair bart-large --gamma 2 --assisted 3 --rounds 12 --out F
    python benchmarks/path_floor_ab.py --pair smollm2 --drafter head --dtype float32 --gamma 2 --rounds 12 --out F
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import statistics
import sys
from pathlib import Path

import torch
import transformers
from transformers import GenerationMixin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_vs_best import provenance  # noqa: E402
from encoder_decoder_speed import _assisted, bart_pair, input_calls, prepare, side_by_side, whisper_pair  # noqa: E402
from prefill_draft_ab import smollm2_calls  # noqa: E402

from hf_specdec import CostAwareDraftPolicy, costs, policy  # noqa: E402


class _DepthTwoFloors(policy.AdaptiveSchedule):
    """The shipped schedule with the rule before: after d drafts the next draft is read at its depth's acceptance
    where that is above depth 2's, else at depth 2's (shipped: above the better of depths 1 and 2)."""

    def _plan(self) -> None:
        stale = self._stale
        super()._plan()
        if stale and self._depth and int(self._rows.sum()) == 1:  # (where the shipped plan set the floors)
            floors, odds = self.path_stop
            row = self.alphas()[int(self._rows.nonzero())]
            worth, alone, second = floors[0] * max(row[:2]), len(self._rows) == 1, row[min(1, len(row) - 1)]
            self.path_stop = (tuple(worth / max(second, a * alone) for a in row[1:] or row), odds)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Before(CostAwareDraftPolicy):
    def start(self, *args, **kwargs):
        schedule = super().start(*args, **kwargs)
        schedule.__class__ = _DepthTwoFloors
        return schedule


def encoder_decoder_calls(pair: str, dtype: torch.dtype, inputs: int, tokens: int):
    """encoder_decoder_speed.py's pair and `inputs` calls' keywords (`input_calls`, batch 1)."""
    target, drafter = whisper_pair(0.025) if pair == "whisper-large-v3" else bart_pair(0.1)
    prepare((target, drafter), dtype, 1)  # (packs float32 weights only)
    calls = input_calls(target, pair == "whisper-large-v3", 1, inputs, tokens, dtype)
    return (lambda **kw: GenerationMixin.generate(target, **kw)), drafter, calls, target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", choices=("whisper-large-v3", "bart-large", "smollm2"), required=True)
    parser.add_argument("--drafter", default="head", help="smollm2: head or independent")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--gamma", type=int, default=4, help="the fixed chain timed beside")
    parser.add_argument("--assisted", default="heuristic", help="encoder-decoder: assisted generation's schedule "
                        "(heuristic, or a constant number of drafts)")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens (default: 32; SmolLM2 48)")
    parser.add_argument("--inputs", type=int, default=None, help="calls per round (default: 4; SmolLM2 8 prompts)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    tokens = args.tokens or (48 if args.pair == "smollm2" else 32)
    if args.pair == "smollm2":
        generate, drafter, calls = smollm2_calls(args.dtype, args.drafter, 1, tokens)
        calls, target = calls[: args.inputs or 8], None
    else:
        dtype = getattr(torch, args.dtype)
        generate, drafter, calls, target = encoder_decoder_calls(args.pair, dtype, args.inputs or 4, tokens)
    arms = {"plain": {}, "default": dict(drafter=drafter), "floors at depth 2": dict(drafter=drafter, gamma=_Before()),
            f"chains of {args.gamma}": dict(drafter=drafter, gamma=args.gamma)}
    registries = {name: {} for name in arms}
    config = None
    if target is not None:
        config = copy.deepcopy(target.generation_config)
        config.num_assistant_tokens_schedule = "heuristic" if args.assisted == "heuristic" else "constant"
        config.num_assistant_tokens = 5 if args.assisted == "heuristic" else int(args.assisted)
        arms["assisted"] = {}

    def run(name: str) -> list:
        if name == "assisted":
            return [_assisted(target, drafter, config, call) for call in calls]
        costs._registry = registries[name]  # this arm's step costs and record
        return [generate(**call, **arms[name]) for call in calls]

    times, outputs, _ = side_by_side({name: functools.partial(run, name) for name in arms}, args.rounds)
    exact = {name: all(torch.equal(out, ref) for out, ref in zip(outputs[name], outputs["plain"])) for name in arms}
    ratio = lambda a, b: [x / y for x, y in zip(times[a], times[b])]  # noqa: E731
    result = dict(**provenance(), pair=args.pair, drafter=args.drafter if args.pair == "smollm2" else "2 decoder layers",
                  dtype=args.dtype, batch=1, tokens=tokens, rounds=args.rounds, exact=exact,
                  default_over_before_time=round(statistics.median(ratio("default", "floors at depth 2")), 4),
                  x_plain={name: round(statistics.median(ratio("plain", name)), 3) for name in arms if name != "plain"},
                  seconds={name: [round(t, 3) for t in values] for name, values in times.items()})
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
