"""A drafter behind another tokenizer on SmolLM2-135M-Instruct: how much acceptance and speed the translation keeps.

    python benchmarks/other_tokenizer.py --batches 1 4 --prompts 4 --max-new-tokens 48 --drop-shares 0 0.01

The shipped distilled drafter (drafters/smollm2-135m-instruct) behind the target's own tokenizer, and the same weights
behind a tokenizer whose ids are renumbered and a share of the BPE merges removed (hf_specdec.bench.other_tokenizer:
embedding and head rows gathered by token string), greedy and sampled (temperature 0.7, seed 0), gamma fixed, fp32,
torch on one thread, side by side per prompt group. Greedy outputs are checked token-identical to plain generate()'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone

import torch

import hf_specdec
from hf_specdec.bench.models import DEFAULT_DRAFTER
from hf_specdec.bench.other_tokenizer import regathered, renumbered_tokenizer
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.cpu import describe
from hf_specdec.drafters.translated import TranslatedDrafter
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

sys.path.insert(0, os.path.dirname(__file__))
from early_exit import commit  # noqa: E402  (one definition of the commit column)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--drop-shares", nargs="+", type=float, default=[0.0, 0.01])
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", default="benchmarks/data/other_tokenizer.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    measured_commit = commit()  # the code that runs, whatever is committed meanwhile
    target, tokenizer = load_smollm2(torch.float32)
    tokenizer.padding_side = "left"
    drafter = load_drafter(DEFAULT_DRAFTER, dtype=torch.float32)
    methods = {"own tokenizer": drafter}
    shares = {}
    for share in args.drop_shares:
        other, old_ids = renumbered_tokenizer(tokenizer, drop_share=share, seed=0)
        translated = TranslatedDrafter(regathered(drafter, old_ids, other), other, tokenizer)
        name = f"renumbered, {share:.0%} merges dropped ({len(other)} tokens)"
        methods[name] = translated
        shares[name] = translated.vocab_map(target).shared_share
    prompt_ids = encode(tokenizer, CHAT_PROMPTS[: args.prompts])
    rows = []
    for do_sample in (False, True):
        sampling = {"do_sample": True, "temperature": 0.7} if do_sample else {"do_sample": False}
        for batch in args.batches:
            groups = batches(prompt_ids, batch, tokenizer.pad_token_id)
            seconds = {"plain": 0.0, **{name: 0.0 for name in methods}}
            accepted = {name: [] for name in methods}
            exact, tokens = {name: True for name in methods}, 0
            for group in groups:
                start = time.perf_counter()
                plain = target.generate(**group, max_new_tokens=args.max_new_tokens, **sampling)
                seconds["plain"] += time.perf_counter() - start
                tokens += int((plain[:, group["input_ids"].shape[1]:] != tokenizer.pad_token_id).sum())
                for name, method in methods.items():
                    stats = hf_specdec.SpeculativeStats()
                    start = time.perf_counter()
                    out = target.generate(**group, max_new_tokens=args.max_new_tokens, drafter=method, gamma=args.gamma,
                                          stats=stats, generator=torch.Generator().manual_seed(0), **sampling)
                    seconds[name] += time.perf_counter() - start
                    accepted[name].append(stats.acceptance_rate)
                    exact[name] &= do_sample or torch.equal(out, plain)
            for name in ["plain", *methods]:
                row = {"mode": "sampled" if do_sample else "greedy", "batch": batch, "drafter": name,
                       "shared_share": shares.get(name, 1.0 if name != "plain" else None),
                       "tokens_per_s": tokens / seconds[name], "speedup": seconds["plain"] / seconds[name],
                       "acceptance": None if name == "plain" else sum(accepted[name]) / len(accepted[name]),
                       "exact": None if do_sample else (True if name == "plain" else exact[name])}
                own = next((r for r in rows if r["mode"] == row["mode"] and r["batch"] == batch
                            and r["drafter"] == "own tokenizer"), None)
                row["acceptance_kept"] = None if own is None or row["acceptance"] is None or not own["acceptance"] \
                    else row["acceptance"] / own["acceptance"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    result = {"date": stamp, "commit": measured_commit, "machine": describe(), "threads": 1, "prompts": args.prompts,
              "max_new_tokens": args.max_new_tokens, "gamma": args.gamma, "rows": rows}
    with open(args.out, "w") as file:
        json.dump(result, file, indent=1)
    print("| date | commit | machine | mode | batch | drafter | shared tokens | acceptance | kept | tokens/s | vs plain "
          "| exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        def fmt(value, spec):
            return "—" if value is None else format(value, spec)
        exact = "—" if row["exact"] is None else ("yes" if row["exact"] else "NO")
        print(f"| {stamp} | {result['commit']} | {result['machine']} | {row['mode']} | {row['batch']} | {row['drafter']} "
              f"| {fmt(row['shared_share'], '.1%')} | {fmt(row['acceptance'], '.3f')} | {fmt(row['acceptance_kept'], '.0%')} "
              f"| {row['tokens_per_s']:.1f} | {row['speedup']:.2f}x | {exact} |")


if __name__ == "__main__":
    main()
