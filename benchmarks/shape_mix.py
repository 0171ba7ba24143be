"""Where the default's time goes against fixed shapes in one process: SmolLM2-135M-Instruct (bf16) with the shipped head
on the bench's held-out chat prompts, greedy, batch 1, plain generate(), the default and fixed trees (and chains with
--chains) in a shuffled order per prompt, after a warm-up call of each. Per method: its calls' seconds, tokens and
target forwards (tokens a forward, ms a forward); each step's wall time by method, kind and width (the drafting and the
verification together, as the loop runs them); what the default's step costs heard (the median drafting ms by kind and
depth, verifying ms by kind and width); and which shapes the default planned.

Run from the repo root, one process per core and thread (as the bench's processes run):
    nice -n -15 taskset -c 0 python benchmarks/shape_mix.py --seed 0 --out benchmarks/data/shape_mix_882e107_xeon_amx.json
"""

from __future__ import annotations

import collections
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402
from step_costs_in_process import by_part, head_parser, head_setting, listen  # noqa: E402

import hf_specdec  # noqa: E402
from hf_specdec import loop, policy  # noqa: E402


def timed_steps(method: list) -> dict:
    """{(method, kind, width): [ms]} that hears every chain and tree step the loop takes from now on, under the method
    named in `method[0]`."""
    steps = collections.defaultdict(list)
    for name in ("chain_step", "tree_step"):
        step = getattr(loop, name)

        def wrapped(*args, _step=step, _kind=name.split("_")[0], **kwargs):
            start = time.perf_counter()
            out = _step(*args, **kwargs)
            steps[(method[0], _kind, out.width)].append((time.perf_counter() - start) * 1e3)
            return out
        setattr(loop, name, wrapped)
    return steps


def planned_shapes() -> collections.Counter:
    """A counter of the shapes the default plans from now on (top_k/depth/nodes; None: a plain step)."""
    shapes, best = collections.Counter(), policy.AdaptiveSchedule._best

    def counted(self, rows, optimism):
        shape = best(self, rows, optimism)
        if optimism:  # (the plan's choice; without optimism: whether drafting pays for rows about to be dropped)
            shapes["plain" if shape is None else f"{shape.top_k}/{shape.depth}/{shape.nodes}"] += 1
        return shape
    policy.AdaptiveSchedule._best = counted
    return shapes


def main() -> None:
    parser = head_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the methods' order per prompt")
    parser.add_argument("--chains", action="store_true", help="also chains of 2")
    args = parser.parse_args()
    target, drafter, groups = head_setting(args.num_prompts)
    methods = {"plain": None, "default": None, "tree 4/3/8": bench.FIXED["tree 4/3/8"],
               "tree 4/4/16": bench.FIXED["tree 4/4/16"], **({"chain 2": 2} if args.chains else {})}
    current = [None]
    steps, shapes, heard = timed_steps(current), planned_shapes(), listen()

    def run(name, inputs):
        current[0] = name
        stats = hf_specdec.SpeculativeStats()
        kwargs = dict(max_new_tokens=args.new_tokens, do_sample=False)
        if name != "plain":
            kwargs.update(drafter=drafter, gamma=methods[name], stats=stats)
        start = time.perf_counter()
        out = target.generate(**inputs, **kwargs)
        seconds, tokens = time.perf_counter() - start, out.shape[1] - inputs["input_ids"].shape[1]
        return seconds, tokens, stats.target_forwards if name != "plain" else tokens

    for name in methods:  # warm-up: kernels, and the default's first call of this setting
        run(name, groups[0])
    steps.clear(), shapes.clear(), heard.clear()
    totals, order = {name: [0.0, 0, 0] for name in methods}, random.Random(args.seed)
    for _ in range(args.rounds):
        for inputs in groups:
            for name in order.sample(list(methods), len(methods)):
                totals[name] = [total + part for total, part in zip(totals[name], run(name, inputs))]
    result = {**bench.provenance(), "methods": {}, "steps": {}, "default_shapes": dict(shapes)}
    for name, (seconds, tokens, forwards) in totals.items():
        result["methods"][name] = dict(seconds=round(seconds, 3), tokens=tokens, forwards=forwards,
                                       tokens_a_forward=round(tokens / forwards, 3),
                                       ms_a_forward=round(seconds / forwards * 1e3, 2),
                                       tokens_a_second=round(tokens / seconds, 2))
        print(f"{name:12s} {seconds:7.2f} s {tokens:5d} tokens {forwards:5d} forwards  {tokens / forwards:.2f} a forward"
              f"  {seconds / forwards * 1e3:6.1f} ms a forward  {tokens / seconds:6.2f} tokens/s")
    for (name, kind, width), ms in sorted(steps.items()):
        result["steps"][f"{name} {kind} {width}"] = dict(steps=len(ms), median_ms=round(statistics.median(ms), 2))
    result["default_heard"] = {key: dict(steps=len(ms), median_ms=round(statistics.median(ms), 2))
                               for key, ms in sorted(by_part(heard).items())}
    for key, value in result["default_heard"].items():
        print(f"the default heard {key}: {value['median_ms']} ms ({value['steps']} steps)")
    print("the default planned:", dict(shapes))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
