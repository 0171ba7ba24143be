"""What the default costs where its drafter never pays: each call's time against plain generate()'s, and whether it
drafted (a probe), in one process.

After two warm-up calls of the default and of plain generate() per prompt batch, every call of the default runs between
two plain calls on the same batch; a call's ratio is its time over the plain calls' mean. The calls that drafted
nothing read what the loop's plain steps cost; the ones that probed add what a probe costs, its drafter's first
forward in the call included (it reads the prompt and the tokens so far).

    python benchmarks/probe_cost.py --dtype float32 --drafter unrelated --batch-size 4 \
        --out benchmarks/data/probe_cost_e361731_zen4_unrelated_fp32_b4_p1.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_specdec  # noqa: E402
from default_vs_best import load, provenance, timed  # noqa: E402
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--drafter", default="unrelated")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, tokenizer, drafter = load(args.dtype, args.drafter)
    groups = batches(encode(tokenizer, list(CHAT_PROMPTS)), args.batch_size, tokenizer.pad_token_id)
    kwargs = dict(max_new_tokens=args.new_tokens, do_sample=False)
    for inputs in groups[:2]:  # warm-up: kernels, and the setting's first calls
        target.generate(**inputs, drafter=drafter, **kwargs)
        target.generate(**inputs, **kwargs)
    calls = []
    for _ in range(args.rounds):
        for inputs in groups:
            stats = hf_specdec.SpeculativeStats()
            before, _ = timed(lambda: target.generate(**inputs, **kwargs))
            default, _ = timed(lambda: target.generate(**inputs, drafter=drafter, stats=stats, **kwargs))
            after, _ = timed(lambda: target.generate(**inputs, **kwargs))
            calls.append({"time_over_plain": 2 * default / (before + after), "drafted": int(stats.drafted.sum()),
                          "drafter_forwards": stats.drafter_forwards})
            print(calls[-1], flush=True)
    probed = [call["time_over_plain"] for call in calls if call["drafted"]]
    plain = [call["time_over_plain"] for call in calls if not call["drafted"]]
    summary = {"calls": len(calls), "calls_that_probed": len(probed),
               "mean_time_over_plain_probed": statistics.fmean(probed) if probed else None,
               "mean_time_over_plain_not_probed": statistics.fmean(plain) if plain else None,
               "geomean_time_over_plain": statistics.geometric_mean(call["time_over_plain"] for call in calls)}
    print(json.dumps(summary))
    if args.out:
        record = {**provenance(), "dtype": args.dtype, "drafter": args.drafter, "batch_size": args.batch_size,
                  "new_tokens": args.new_tokens, **summary, "per_call": calls}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
