"""Self-speculation on SmolLM2-135M-Instruct: EarlyExit(k) against plain generate() and the shipped EAGLE-3 head.

    python benchmarks/early_exit.py --dtypes bf16 fp32 --batches 1 4 --ks 4 8 12 --prompts 4 --max-new-tokens 48

Greedy chat prompts (hf_specdec.bench.prompts.CHAT_PROMPTS), gamma fixed, torch on one thread; methods run side by
side on each prompt group (plain first), and every output is checked token-identical to plain generate()'s.
Each EarlyExit(k) runs twice: on the target's own cache (the verification skips layers 0..k-1 for drafted tokens)
and with a k-layer cache of its own that the verification recomputes (`--no-own-cache` drops that row).
Writes the rows as JSON (--out) and prints a markdown table for docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from datetime import datetime, timezone

import torch

import hf_specdec
from hf_specdec.bench.models import DEFAULT_FEATURE_DRAFTER
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.cpu import describe
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class OwnCache(hf_specdec.EarlyExit):
    """EarlyExit(k) keeping a k-layer cache of its own, which the verification recomputes (as on models whose cache
    it cannot share): the comparison for the shared cache."""

    def __repr__(self) -> str:
        return f"EarlyExit({self.num_layers}), own cache"

    def start(self, target, batch_size, device):
        drafting = super().start(target, batch_size, device)
        drafting.shares = False
        return drafting


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def timed(target, group, max_new_tokens, **kwargs):
    """(output, seconds, SpeculativeStats or None) of one greedy generate() call."""
    stats = hf_specdec.SpeculativeStats() if "drafter" in kwargs else None
    if stats is not None:
        kwargs["stats"] = stats
    start = time.perf_counter()
    out = target.generate(**group, do_sample=False, max_new_tokens=max_new_tokens, **kwargs)
    return out, time.perf_counter() - start, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"], choices=sorted(DTYPES))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--ks", nargs="+", type=int, default=[4, 8, 12])
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=4, help="chat prompts per setting")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--no-own-cache", action="store_true", help="skip EarlyExit(k) with a cache of its own")
    parser.add_argument("--out", default="benchmarks/data/early_exit.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    measured_commit = commit()  # the code that runs, whatever is committed meanwhile
    rows = []
    for dtype_name in args.dtypes:
        target, tokenizer = load_smollm2(DTYPES[dtype_name])
        head = load_drafter(DEFAULT_FEATURE_DRAFTER, dtype=DTYPES[dtype_name])
        methods = {}
        for k in args.ks:
            methods[f"EarlyExit({k})"] = hf_specdec.EarlyExit(k)
            if not args.no_own_cache:
                methods[repr(OwnCache(k))] = OwnCache(k)
        methods["shipped EAGLE-3 head"] = head
        prompt_ids = encode(tokenizer, CHAT_PROMPTS[: args.prompts])
        for batch in args.batches:
            groups = batches(prompt_ids, batch, tokenizer.pad_token_id or tokenizer.eos_token_id)
            timed(target, groups[0], 4)  # warm-up
            seconds = {"plain": 0.0, **{name: 0.0 for name in methods}}
            accepted = {name: [] for name in methods}
            exact, tokens = {name: True for name in methods}, 0
            for group in groups:
                plain, took, _ = timed(target, group, args.max_new_tokens)
                seconds["plain"] += took
                tokens += int((plain[:, group["input_ids"].shape[1]:] != tokenizer.pad_token_id).sum())
                for name, drafter in methods.items():
                    out, took, stats = timed(target, group, args.max_new_tokens, drafter=drafter, gamma=args.gamma)
                    seconds[name] += took
                    accepted[name].append(stats.acceptance_rate)
                    exact[name] &= torch.equal(out, plain)
            for name in ["plain", *methods]:
                row = {
                    "dtype": dtype_name, "batch": batch, "method": name, "gamma": None if name == "plain" else args.gamma,
                    "tokens_per_s": tokens / seconds[name], "speedup": seconds["plain"] / seconds[name],
                    "acceptance": None if name == "plain" else sum(accepted[name]) / len(accepted[name]),
                    "exact": True if name == "plain" else exact[name],
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    result = {"date": stamp, "commit": measured_commit, "machine": describe(), "threads": 1, "prompts": args.prompts,
              "max_new_tokens": args.max_new_tokens, "rows": rows}
    with open(args.out, "w") as file:
        json.dump(result, file, indent=1)
    print("| date | commit | machine | dtype | batch | drafter | γ | acceptance | tokens/s | vs plain | exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        acceptance = "—" if row["acceptance"] is None else f"{row['acceptance']:.3f}"
        print(f"| {stamp} | {result['commit']} | {result['machine']} | {row['dtype']} | {row['batch']} | {row['method']} | "
              f"{row['gamma'] or '—'} | {acceptance} | {row['tokens_per_s']:.1f} | {row['speedup']:.2f}x | "
              f"{'yes' if row['exact'] else 'NO'} |")


if __name__ == "__main__":
    main()
