"""What each shape's steps delivered against what the default promised when it chose them, in one process:
SmolLM2-135M-Instruct (bf16) with the shipped head on held-out chat prompts, greedy, batch 1, a warm-up call then each
prompt once per round, as the bench runs it. Per shape: its steps, tokens committed over tokens promised (the ratio
its delivery record prices it by), and its first steps (call, committed, promised); per call the shapes planned. A
tree's rank-1 paths are listed apart ("path 4/3/8": what they committed against what a chain promised).

Run from the repo root, one process per core and thread:
    nice -n -15 taskset -c 0 python benchmarks/delivery_trace.py --out benchmarks/data/delivery_trace_xeon_amx_0.json
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402
from shape_mix import planned_shapes  # noqa: E402
from step_costs_in_process import head_parser, head_setting  # noqa: E402

from hf_specdec.costs import StepCosts  # noqa: E402


def main() -> None:
    parser = head_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    target, drafter, groups = head_setting(args.num_prompts)
    steps, deliver, call = [], StepCosts.deliver, [0]

    def heard(self, shape, committed, expected, record="delivered"):  # (a tree's rank-1 path: "path 4/3/8")
        name = f"{'path ' if record == 'paths' else ''}{shape.top_k}/{shape.depth}/{shape.nodes}"
        steps.append((call[0], name, committed, round(expected, 3)))
        return deliver(self, shape, committed, expected, record)

    StepCosts.deliver, shapes, calls = heard, planned_shapes(), []
    for number, inputs in enumerate([groups[0], *groups * args.rounds]):  # the warm-up call first
        call[0] = number
        shapes.clear()
        start = time.perf_counter()
        target.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False, drafter=drafter)
        calls.append(dict(call=number, seconds=round(time.perf_counter() - start, 2), shapes=dict(shapes)))
        print(json.dumps(calls[-1]), flush=True)
    by_shape = collections.defaultdict(list)
    for number, shape, committed, expected in steps:
        by_shape[shape].append((number, committed, expected))
    summary = {shape: dict(steps=len(rows), delivered=round(sum(r[1] for r in rows) / sum(r[2] for r in rows), 3),
                           first=rows[:8]) for shape, rows in sorted(by_shape.items())}
    for shape, row in summary.items():
        print(f"{shape}: {row['steps']} steps, delivered {row['delivered']} of promised; first {row['first'][:4]}")
    if args.out:
        args.out.write_text(json.dumps({**bench.provenance(), "calls": calls, "shapes": summary, "steps": steps}) + "\n")


if __name__ == "__main__":
    main()
