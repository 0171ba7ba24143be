"""The default draft policy (no gamma=) against plain generate() and against the best fixed shape, side by side on
held-out prompts, with SmolLM2-135M-Instruct as the target.

Each setting (drafter, dtype, mode, batch size) generates every prompt batch with plain generate(), plain generate()
again (the A/A control), the default, chains of 1-4 and trees 4/3/8 and 4/4/16, in a shuffled order per batch, after
one warm-up call of each; a method's ratio is the median over batches of its tokens/s over plain's on the same batch.
`--first-call` instead times, in fresh processes after one plain generate(), the first call with a drafter against the
tenth identical one (each relative to a plain call next to it); process k runs the k-th held-out prompt batch from the
end (`--one-prompt`: every process the last one), so the reading is not one prompt's.

Run: python benchmarks/default_vs_best.py --out benchmarks/data/default_vs_best.json   (add --quick for a smoke run)
Table of recorded runs: python benchmarks/default_vs_best.py --table benchmarks/data/default_vs_best.json
    (runs of one setting at one commit, e.g. the same command in three processes, are pooled into one row: a process's
    decisions and timings move together, so its calls are not independent draws; pooling processes is.)
First call: python benchmarks/default_vs_best.py --first-call --drafters head --dtypes bfloat16 --batch-sizes 1
    --out benchmarks/data/default_first_call_b1.json
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import hf_specdec
from hf_specdec import TreeDraftPolicy
from hf_specdec.bench.measure import median_interval
from hf_specdec.bench.models import load_pair, unrelated_drafter
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode, grounded_prompts

HEAD = "drafters/smollm2-135m-instruct-eagle3"
FIXED = {"chain 1": 1, "chain 2": 2, "chain 3": 3, "chain 4": 4,
         "tree 4/3/8": TreeDraftPolicy(top_k=4, max_depth=3, max_nodes=8),
         "tree 4/4/16": TreeDraftPolicy(top_k=4, max_depth=4, max_nodes=16)}


def machine() -> str:
    """The CPU (model, family and model number, bf16 flags) or the GPU."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    from hf_specdec.cpu import describe

    return describe()


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def provenance() -> dict:
    """Where a result comes from: today's date, the commit, the machine and the command that ran."""
    return {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(), "command": " ".join(sys.argv)}


def timed(call) -> tuple[float, int]:
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def run_setting(target, tokenizer, drafter, prompts, batch_size, mode, new_tokens, repeats, seed, trace=None):
    """{method: [ratio to plain per batch and repeat]} of one setting, and (greedy) {method: [whether its tokens are
    plain's]}: in bf16 a near-tie of the target's top two logits may fall the other way at another verification width,
    and from there a method decodes other text, which may copy more or less of the prompt (prompt lookup).
    `trace` (a list): each of the default's calls appends what it drafted (`shapes`); they then pay for `stats=`."""
    ids = encode(tokenizer, prompts)
    groups = batches(ids, batch_size, tokenizer.pad_token_id)
    sampling = dict(do_sample=True, temperature=0.7) if mode == "sampled" else dict(do_sample=False)
    kwargs = dict(max_new_tokens=new_tokens, **sampling)
    if mode == "sampled":  # every method decodes the whole length, so tokens/s compare alike
        kwargs.update(min_new_tokens=new_tokens)

    def method(name):
        def call(inputs):
            if name.startswith("plain"):
                out = target.generate(**inputs, **kwargs)
            else:
                gamma = None if name == "default" else FIXED[name]
                stats = hf_specdec.SpeculativeStats() if trace is not None and gamma is None else None
                out = target.generate(**inputs, drafter=drafter, gamma=gamma, stats=stats, **kwargs)
                if stats is not None:
                    trace.append(shapes(stats))
            return int((out[:, inputs["input_ids"].shape[1]:] != tokenizer.pad_token_id).sum()), out
        return call

    names = ["plain", "plain again", "default", *FIXED]
    for name in names:  # warm-up: kernels, and the default's first call of this setting measures its step costs
        method(name)(groups[0])
    ratios = {name: [] for name in names if name != "plain"}
    same = {name: [] for name in ratios} if mode == "greedy" else None
    order = random.Random(seed)
    for _ in range(repeats):
        for inputs in groups:
            shuffled = names[:]
            order.shuffle(shuffled)
            rates, outs = {}, {}
            for name in shuffled:
                seconds, (tokens, outs[name]) = timed(lambda: method(name)(inputs))
                rates[name] = tokens / seconds
            for name in ratios:
                ratios[name].append(rates[name] / rates["plain"])
                if same is not None:
                    same[name].append(torch.equal(outs[name], outs["plain"]))
    return ratios, same


def shapes(stats) -> dict:
    """A call's row-steps by the depth they drafted (0: plain; a tree's depth too) and its tree steps by their nodes."""
    drafted = {depth: count for depth, count in enumerate(stats.drafted_histogram.sum(dim=0).tolist()) if count}
    trees = {nodes: count for nodes, count in enumerate(stats.tree_sizes.tolist()) if nodes and count}
    return {"by depth": drafted, "trees by nodes": trees, "target forwards": stats.target_forwards}


def first_call(dtype: str, drafter_kind: str, batch_size: int, new_tokens: int, prompt: int = 0) -> dict:
    """In this (fresh) process: one plain warm-up call, then pairs (plain, with the drafter) ten times, on the
    `prompt`-th batch of held-out prompts from the end; the first pair's ratio against the tenth's."""
    target, tokenizer, drafter = load(dtype, drafter_kind)
    end = len(CHAT_PROMPTS) - prompt * batch_size
    groups = batches(encode(tokenizer, CHAT_PROMPTS[end - batch_size: end]), batch_size, tokenizer.pad_token_id)
    kwargs = dict(max_new_tokens=new_tokens, do_sample=False)
    target.generate(**groups[0], **kwargs)
    ratios = []
    for _ in range(10):
        plain, _ = timed(lambda: target.generate(**groups[0], **kwargs))
        spec, _ = timed(lambda: target.generate(**groups[0], drafter=drafter, **kwargs))
        ratios.append(plain / spec)
    return {"prompt": prompt, "first": ratios[0], "tenth": ratios[-1], "first_over_tenth": ratios[0] / ratios[-1],
            "all": ratios}


def first_calls(args) -> dict:
    """`first_call` in `args.processes` fresh processes, process k on the k-th prompt batch (`--one-prompt`: all on the
    first; one process's tenth call alone is noisy: calls 2-10 of one process read 1.17-1.54x plain, and on one prompt
    a greedy call's speed turns on where its drafts happen to break): the median over processes of the first call's
    ratio over the tenth's, the geometric mean of the first calls' ratios over the tenth calls', and the median of the
    first call's ratio over the median of calls 2-10."""
    command = [sys.executable, __file__, "--first-call", "--processes", "0", "--dtypes", args.dtypes, "--drafters",
               args.drafters, "--batch-sizes", args.batch_sizes, "--new-tokens", str(args.new_tokens),
               "--threads", str(args.threads), "--prompt"]
    runs = [json.loads(subprocess.run(command + [str(0 if args.one_prompt else k)], capture_output=True, text=True,
                                      check=True).stdout.splitlines()[-1]) for k in range(args.processes)]
    geomean = lambda key: statistics.geometric_mean(run[key] for run in runs)  # noqa: E731
    return {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(), "command": " ".join(sys.argv),
            "first_over_tenth": statistics.median(run["first_over_tenth"] for run in runs),
            "first_over_tenth_geomean": geomean("first") / geomean("tenth"),
            "first_over_later": statistics.median(run["first"] / statistics.median(run["all"][1:]) for run in runs),
            "runs": runs}


def load(dtype: str, drafter_kind: str):
    target, independent, tokenizer, _ = load_pair(dtype=getattr(torch, dtype))
    drafter = {"head": lambda: hf_specdec.load_drafter(HEAD), "independent": lambda: independent,
               "unrelated": lambda: unrelated_drafter(independent), "prompt_lookup": lambda: "prompt_lookup"}
    drafter = drafter[drafter_kind]()
    gc.collect()
    gc.freeze()  # the loaded models' and tokenizer's ~370k objects: no 190 ms generation-2 scans inside timed calls
    return target, tokenizer, drafter


def interval(values: list[float]) -> tuple[float, float] | None:
    """The median's distribution-free 90 % interval over paired ratios (8: the 2nd smallest and 2nd largest)."""
    bracket = median_interval(values)
    return None if bracket is None else bracket[:2]


def pooled(paths: list[Path]) -> list[tuple[dict, dict, int]]:
    """(record, row, runs) per setting of recorded runs: the runs of one setting at one commit on one machine and thread
    count (separate processes: a process's decisions and timings move together) pooled into one row, their paired
    ratios together, the best fixed shape and the medians taken over the pool."""
    rows: dict[tuple, tuple[dict, dict, int]] = {}
    for path in paths:
        record = json.loads(path.read_text())
        for row in record["settings"]:
            key = (row.get("commit", record["commit"]), record["machine"], record.get("threads", 1), row["drafter"],
                   row["dtype"], row["mode"], row["batch"])
            if key in rows:
                first, pool, runs = rows[key]
                ratios = {name: pool["ratios"][name] + row["ratios"][name] for name in pool["ratios"]}
                merged = {**pool, "ratios": ratios}
                if "same_text" in pool and "same_text" in row:  # (a run without the record: none for the pool)
                    merged["same_text"] = {name: pool["same_text"][name] + row["same_text"][name] for name in ratios}
                else:
                    merged.pop("same_text", None)
                rows[key] = (first, merged, runs + 1)
            else:
                rows[key] = (record, row, 1)
    out = []
    for record, row, runs in rows.values():
        medians = {name: statistics.median(values) for name, values in row["ratios"].items()}
        best = max(FIXED, key=medians.get)
        out.append((record, {**row, "default": medians["default"], "aa": medians["plain again"], "best_fixed": best},
                    runs))
    return out


def table(paths: list[Path]) -> str:
    """The markdown table and the goals' aggregates of recorded runs (runs of a setting at one commit: pooled)."""
    lines = ["| date | commit | machine | drafter | dtype | mode | batch | runs | default × plain | best fixed (× plain) | "
             "default / best fixed (90 % interval) | same, where both decode plain's text (batches) | A/A |",
             "|" + "---|" * 13]
    by_drafter: dict[str, list[float]] = {}
    versus_best, below_plain, misses = [], [], []
    for record, row, runs in pooled(paths):
        ratios = row["ratios"]
        pairs = [d / b for d, b in zip(ratios["default"], ratios[row["best_fixed"]])]
        bracket, paired = interval(pairs), statistics.median(pairs)
        shown = f"{paired:.3f}" + (f" ({bracket[0]:.3f}–{bracket[1]:.3f})" if bracket else "")
        best, same = statistics.median(ratios[row["best_fixed"]]), row.get("same_text")
        alike = [pair for pair, *texts in zip(pairs, same["default"], same[row["best_fixed"]]) if all(texts)] if (
            same) else []  # greedy: the batches on which both decoded plain's tokens (the same work)
        on_text = f"{statistics.median(alike):.3f} ({len(alike)} of {len(pairs)})" if alike else "–"
        lines.append(f"| {record['date']} | {row.get('commit', record['commit'])} | {record['machine']} | "
                     f"{row['drafter']} | {row['dtype']} | {row['mode']} | {row['batch']} | {runs} | "
                     f"{row['default']:.3f} | {row['best_fixed']} ({best:.3f}) | {shown} | {on_text} | {row['aa']:.3f} |")
        by_drafter.setdefault(row["drafter"], []).append(row["default"])
        if row["drafter"] in ("head", "independent"):
            versus_best.append(paired)
            if bracket and bracket[1] < 0.90:
                misses.append(row)
        if row["default"] < 1 - abs(1 - row["aa"]):
            below_plain.append(f"{row['drafter']} {row['dtype']} {row['mode']} b{row['batch']} "
                               f"{row['default']:.3f} (A/A {row['aa']:.3f})")
    geo = lambda values: statistics.geometric_mean(values) if values else math.nan  # noqa: E731
    lines += ["", f"- default / best fixed shape, head and independent drafter, geometric mean over "
                  f"{len(versus_best)} settings: {geo(versus_best):.3f}; settings whose interval lies below 0.90: "
                  f"{len(misses)}"]
    lines += [f"- default × plain, geometric mean, {name}: {geo(values):.3f} ({len(values)} settings)"
              for name, values in by_drafter.items()]
    lines += [f"- below plain by more than the A/A control's distance from 1: {', '.join(below_plain) or 'none'}"]
    return "\n".join(lines)


def by_prompt(paths: list[Path]) -> str:
    """Per pooled setting, each prompt batch's geometric mean over the runs of every method's ratio to plain, and of the
    default's over each fixed shape's on the same calls (with `--repeats`, each repeat of a batch is a row)."""
    lines = []
    for record, row, runs in pooled(paths):
        ratios, names = row["ratios"], [name for name in row["ratios"] if name != "plain again"]
        batches = len(ratios["default"]) // runs
        lines += [f"{row.get('commit', record['commit'])} {row['drafter']} {row['dtype']} {row['mode']} "
                  f"b{row['batch']}, {runs} runs: × plain; default / each",
                  "| batch | " + " | ".join(names) + " | " + " | ".join(f"default / {n}" for n in FIXED) + " |",
                  "|" + "---|" * (1 + len(names) + len(FIXED))]
        for batch in range(batches):
            pick = lambda values: values[batch::batches]  # noqa: E731
            means = [statistics.geometric_mean(pick(ratios[name])) for name in names]
            versus = [statistics.geometric_mean([d / f for d, f in zip(pick(ratios["default"]), pick(ratios[name]))])
                      for name in FIXED]
            lines.append(f"| {batch} | " + " | ".join(f"{m:.3f}" for m in means + versus) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafters", default="head,independent,unrelated,prompt_lookup")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--modes", default="greedy,sampled")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--first-call", action="store_true", help="time the first call against the tenth instead")
    parser.add_argument("--processes", type=int, default=8, help="--first-call: fresh processes (0: this one)")
    parser.add_argument("--prompt", type=int, default=0, help="--first-call in this process: the prompt batch")
    parser.add_argument("--one-prompt", action="store_true", help="--first-call: every process on the same prompt")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 prompts, 8 tokens")
    parser.add_argument("--trace", action="store_true",
                        help="record what each of the default's calls drafted (its calls then also pay for stats=)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/data/default_vs_best.json"))
    parser.add_argument("--table", type=Path, nargs="+", help="print the table of recorded runs instead of running")
    parser.add_argument("--by-prompt", action="store_true", help="--table: each prompt batch's ratios instead")
    args = parser.parse_args()
    if args.table:
        print(by_prompt(args.table) if args.by_prompt else table(args.table))
        return
    torch.set_num_threads(args.threads)
    if args.quick:
        args.num_prompts, args.new_tokens = 2, 8
    if args.first_call and not args.processes:
        print(json.dumps(first_call(args.dtypes.split(",")[0], args.drafters.split(",")[0],
                                    int(args.batch_sizes.split(",")[0]), args.new_tokens, args.prompt)))
        return
    if args.first_call:
        record = first_calls(args)
        print(json.dumps({key: value for key, value in record.items() if key != "runs"}))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1))
        return
    record = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(), "threads": args.threads,
              "command": " ".join(sys.argv), "settings": []}
    for dtype in args.dtypes.split(","):
        for kind in args.drafters.split(","):
            target, tokenizer, drafter = load(dtype, kind)
            prompts = grounded_prompts() if kind == "prompt_lookup" else CHAT_PROMPTS
            for mode in args.modes.split(","):
                for size in map(int, args.batch_sizes.split(",")):
                    trace = [] if args.trace else None
                    ratios, same = run_setting(target, tokenizer, drafter, list(prompts[: max(args.num_prompts, size)]),
                                               size, mode, args.new_tokens, args.repeats, seed=size, trace=trace)
                    medians = {name: statistics.median(values) for name, values in ratios.items()}
                    best = max(FIXED, key=medians.get)
                    row = {"drafter": kind, "dtype": dtype, "mode": mode, "batch": size, "ratios": ratios,
                           "default": medians["default"], "aa": medians["plain again"], "best_fixed": best,
                           "default_vs_best": medians["default"] / medians[best],
                           **({"same_text": same} if same else {}), **({"default_trace": trace} if trace else {})}
                    record["settings"].append(row)
                    print(f"{kind:13} {dtype:8} {mode:7} b{size}: default {row['default']:.3f}x plain, "
                          f"{row['default_vs_best']:.3f}x best fixed ({best} {medians[best]:.3f}x), A/A {row['aa']:.3f}"
                          + (f"; plain's text: default {sum(same['default'])}, {best} {sum(same[best])} of "
                             f"{len(same[best])}" if same else ""), flush=True)
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
