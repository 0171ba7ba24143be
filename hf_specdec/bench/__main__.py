"""`python -m hf_specdec.bench`: the benchmark on SmolLM2-135M-Instruct and its drafter."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hf_specdec.bench.models import DEFAULT_DRAFTER, DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, grounded_prompts
from hf_specdec.bench.runner import MODES, BenchConfig
from hf_specdec.bench.sections import SECTIONS

DTYPES = ("float32", "bfloat16")

#: --quick: a smoke run of every section in a few minutes on 2 cores; explicit options still win.
QUICK = {
    "max_new_tokens": 16, "num_prompts": 2, "gammas": (1, 2, 4), "batch_sizes": (1, 2), "lookup_batch_sizes": (1, 2),
}


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


def _names(choices):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(part.strip() for part in text.split(",") if part.strip())
        unknown = [name for name in names if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(choices)}")
        return names

    return parse


def build_parser() -> argparse.ArgumentParser:
    defaults = BenchConfig()

    def listed(values) -> str:
        return ",".join(map(str, values))

    parser = argparse.ArgumentParser(
        prog="python -m hf_specdec.bench",
        description="hf_specdec vs plain generate() and transformers' assisted generation on SmolLM2-135M-Instruct.",
    )
    parser.add_argument("--sections", type=_names(list(SECTIONS)), help=f"comma list ({listed(SECTIONS)})")
    parser.add_argument("--modes", type=_names(MODES), help=f"comma list ({listed(MODES)})")
    parser.add_argument("--max-new-tokens", type=int, help=f"tokens generated per prompt ({defaults.max_new_tokens})")
    parser.add_argument("--num-prompts", type=int, help=f"prompts per prompt set ({defaults.num_prompts}; at most "
                        f"{len(CHAT_PROMPTS)} chat and {len(grounded_prompts())} grounded)")
    parser.add_argument("--gammas", type=_ints, help=f"gamma sweep, comma list ({listed(defaults.gammas)})")
    parser.add_argument("--batch-sizes", type=_ints, help=f"batch section, comma list ({listed(defaults.batch_sizes)})")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (all CPUs)")
    parser.add_argument("--repeats", type=int, help=f"timed repeats per measurement, median kept ({defaults.repeats})")
    parser.add_argument("--min-pairs", type=int, help="more repeats where a batch size has few batches: each method "
                        "timed side by side gets at least this many calls (batches x repeats) to pair with plain's "
                        f"({defaults.min_pairs}: --repeats alone)")
    parser.add_argument("--drafter", help=f"drafter directory (default {DEFAULT_DRAFTER}, or a stand-in while it "
                        "does not exist)")
    parser.add_argument("--feature-drafter", help=f"EAGLE feature head directory for the feature section (default "
                        f"{DEFAULT_FEATURE_DRAFTER} when it exists)")
    parser.add_argument("--dtype", type=_names(DTYPES), default=DTYPES,
                        help=f"the target's dtypes, comma list, each a run of its own ({','.join(DTYPES)}); with more "
                        "than one, each writes to OUT/<dtype>/")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="every row generates --max-new-tokens (EOS does not stop it): sampled outputs of different "
                             "methods then cost the same number of steps, so batched sampled ratios compare like with like")
    parser.add_argument("--pack-linears", action="store_true",
                        help="run the target with hf_specdec.pack_linears (oneDNN-packed float32 Linear weights; plain "
                        "generate() uses them too)")
    parser.add_argument("--out", type=Path, default=defaults.out, help=f"output directory ({defaults.out}/)")
    parser.add_argument("--quick", action="store_true", help="tiny settings for a smoke run")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.drafter is not None and not Path(args.drafter).is_dir():
        parser.error(f"--drafter {args.drafter}: no such directory")
    if args.feature_drafter is not None and not Path(args.feature_drafter).is_dir():
        parser.error(f"--feature-drafter {args.feature_drafter}: no such directory")
    import transformers

    import torch

    from hf_specdec.bench import run_bench
    from hf_specdec.bench.models import load_pair
    from hf_specdec.cpu import pack_linears
    from hf_specdec.drafters import resolve_drafter

    transformers.logging.set_verbosity_error()  # keep the progress bar readable
    settings = dict(QUICK) if args.quick else {}
    for name in ("sections", "modes", "max_new_tokens", "num_prompts", "gammas", "batch_sizes", "repeats", "min_pairs"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    drafter_dir = args.drafter or DEFAULT_DRAFTER
    feature_dir = args.feature_drafter or (DEFAULT_FEATURE_DRAFTER if Path(DEFAULT_FEATURE_DRAFTER).is_dir() else None)
    for dtype in args.dtype:
        target, drafter, tokenizer, drafter_source = load_pair(drafter_dir, getattr(torch, dtype))
        drafter_path = drafter_dir if Path(drafter_dir).is_dir() else None
        if drafter_path is None:
            print(f"warning: drafter is a {drafter_source}", file=sys.stderr)
        feature = resolve_drafter(feature_dir) if feature_dir is not None else None
        packed = args.pack_linears and pack_linears(target) > 0
        out = args.out / dtype if len(args.dtype) > 1 else args.out
        config = BenchConfig(threads=args.threads, out=out, drafter_path=drafter_path, dtype=dtype,
                             ignore_eos=args.ignore_eos, **settings)
        results = run_bench(
            target, drafter, tokenizer, config,
            f"SmolLM2-135M-Instruct ({dtype}{', oneDNN-packed linears' if packed else ''})", drafter_source,
            not args.no_progress, feature_drafter=feature, feature_source=feature_dir,
        )
        print((out / "results.md").read_text())
        for goal in results["goals"]:
            print(f"{'n/a ' if goal['met'] is None else 'met ' if goal['met'] else 'MISS'} {goal['goal']} [{dtype}, {goal['mode']}]: {goal['value']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
