"""Side-by-side wall time of plain generate(), chains and draft trees, before and after the tree-speed changes.

Run from the repository root with the base version copied as a package `hf_specdec_base` on PYTHONPATH
(see tree-speed.md), e.g.
    nice -n -15 taskset -c 1 python docs/bench/issue23/tree_speed.py --dtype bf16 --batch 1 --prompts 4
Every prompt (batch) runs every method once, in an order rotated per prompt, 1 torch thread.
"""
import argparse, statistics, time, collections
import torch
import hf_specdec
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches
from hf_specdec.smollm2 import load_smollm2

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="bf16")
parser.add_argument("--batch", type=int, default=1)
parser.add_argument("--prompts", type=int, default=4)
parser.add_argument("--new", type=int, default=64)
parser.add_argument("--mode", default="greedy")
parser.add_argument("--drafter", default="drafters/smollm2-135m-instruct-eagle3")
parser.add_argument("--methods", default="plain,g1,g2,g3,g4,base:g4,4/4/16,base:4/4/16,4/5/24,base:4/5/24,8/6/32,base:8/6/32")
args = parser.parse_args()
torch.set_num_threads(1)
dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
model, tok = load_smollm2(dtype)
packages = {"new": hf_specdec}
if "base:" in args.methods:
    import hf_specdec_base
    packages["base"] = hf_specdec_base
drafters = {name: package.load_drafter(args.drafter) for name, package in packages.items()}  # as loaded: a head in float32

def method(spec):
    version, _, shape = spec.rpartition(":")
    version = version or "new"
    package = packages[version]
    if shape == "plain":
        return lambda inputs, kw, stats: model.generate(**inputs, **kw)
    gamma = int(shape[1:]) if shape.startswith("g") else package.TreeDraftPolicy(**dict(zip(("top_k", "max_depth", "max_nodes"), map(int, shape.split("/")))))
    return lambda inputs, kw, stats: package.speculative_generate(model, drafters[version], gamma=gamma, stats=stats, **inputs, **kw)

specs = args.methods.split(",")
methods = {spec: method(spec) for spec in specs}
prompts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True) for p in CHAT_PROMPTS]
prompts = [p if isinstance(p, list) else p["input_ids"] for p in prompts][: args.prompts * args.batch]
groups = batches(prompts, args.batch, tok.pad_token_id)
kw = dict(max_new_tokens=args.new, do_sample=args.mode == "sampled")
if args.mode == "sampled":
    kw.update(temperature=0.7, top_k=0)
times, tokens, forwards, differ = collections.defaultdict(list), collections.Counter(), collections.Counter(), collections.Counter()
for spec, fn in methods.items():  # warm-up (calibration, allocations)
    fn(groups[0], dict(kw, max_new_tokens=8), None)
for g, inputs in enumerate(groups):
    order = specs[g % len(specs):] + specs[: g % len(specs)]
    reference = None
    outs = {}
    for spec in order:
        version, _, shape = spec.rpartition(":")
        stats = None if shape == "plain" else packages[version or "new"].SpeculativeStats()
        torch.manual_seed(g)
        t = time.perf_counter()
        out = methods[spec](inputs, kw, stats)
        times[spec].append(time.perf_counter() - t)
        new = (out[:, inputs["input_ids"].shape[1]:] != tok.pad_token_id).sum().item()
        tokens[spec] += new
        forwards[spec] += stats.target_forwards if stats is not None else out.shape[1] - inputs["input_ids"].shape[1]
        outs[spec] = out
    for spec in specs:
        if not torch.equal(outs[spec], outs["plain"]):
            differ[spec] += 1
plain = sum(times["plain"])
print(f"{args.dtype} batch {args.batch} {args.mode}, {len(groups)} batches x {args.new} new tokens, drafter {args.drafter.split('/')[-1]}")
print("| method | wall s (sum) | vs plain | tokens / target forward | ms / token | batches differing from plain |")
print("|---|---|---|---|---|---|")
for spec in specs:
    total = sum(times[spec])
    ratios = [a / b for a, b in zip(times[spec], times["plain"])]
    print(f"| {spec} | {total:.2f} | {plain / total:.2f}x (median pair {1 / statistics.median(ratios):.2f}x) | {tokens[spec] / forwards[spec]:.2f} | {total / tokens[spec] * 1e3:.1f} | {differ[spec]}/{len(groups)} |")
