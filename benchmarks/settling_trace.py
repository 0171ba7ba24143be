"""How one process's default settles: SmolLM2-135M-Instruct (bf16) with the shipped head on held-out chat prompts,
greedy, batch 1, a warm-up call then each prompt once, as the bench runs it. Per planned step: the shape planned (a
chain's planned depth, or a tree's nodes), the path stop's floor, the first depths' acceptance estimates, what the step
drafted and accepted, and the setting's step prices as the plan read them. Prints each call's shapes and the prices at
the end; `--out` keeps every step.

Run from the repo root with one core and one thread:
    nice -n -15 taskset -c 0 python benchmarks/settling_trace.py --out /tmp/settling_1.json
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_costs_in_process import head_parser, head_setting  # noqa: E402

from hf_specdec import policy  # noqa: E402


def traced() -> list[dict]:
    """A list that hears every plan and outcome of the default's schedules in this process from now on."""
    steps, plan, update = [], policy.AdaptiveSchedule._plan, policy.AdaptiveSchedule.update

    def planned(self):
        stale = self._stale
        plan(self)
        if stale:
            shape = f"tree {self._tree.max_nodes}" if self._tree else f"chain {self._depth}"
            prices = {" ".join(map(str, key)): round(ms, 1) for key, ms in self.costs.measured().items()}
            floors = self.path_stop[0] if isinstance(self.path_stop[0], tuple) else (self.path_stop[0],)
            steps.append(dict(step=self.steps, shape=shape, floor=[round(f, 3) for f in floors[:3]],
                              alphas=[round(a, 2) for a in self.alphas()[0][:4]], prices=prices))

    def heard(self, active, num_drafted, num_accepted, *args, **kwargs):
        if steps and "drafted" not in steps[-1]:
            steps[-1].update(drafted=int(num_drafted.sum()), accepted=int(num_accepted.sum()))
        return update(self, active, num_drafted, num_accepted, *args, **kwargs)

    policy.AdaptiveSchedule._plan, policy.AdaptiveSchedule.update = planned, heard
    return steps


def main() -> None:
    args = head_parser(__doc__).parse_args()
    target, drafter, groups = head_setting(args.num_prompts)
    steps, calls = traced(), []
    kwargs = dict(max_new_tokens=args.new_tokens, do_sample=False, drafter=drafter)
    for number, inputs in enumerate([groups[0], *groups]):  # the warm-up call first
        steps.clear()
        start = time.perf_counter()
        target.generate(**inputs, **kwargs)
        calls.append(dict(call="warm-up" if number == 0 else number - 1, seconds=round(time.perf_counter() - start, 2),
                          shapes=dict(collections.Counter(step["shape"] for step in steps)), steps=list(steps)))
        print(json.dumps({key: value for key, value in calls[-1].items() if key != "steps"}), flush=True)
    print(json.dumps(calls[-1]["steps"][-1]["prices"]))
    if args.out:
        args.out.write_text(json.dumps(calls) + "\n")


if __name__ == "__main__":
    main()
