"""What a setting's first call with the default lacks against its tenth: step costs, or acceptance.

In one process (the shipped head, bf16, batch 1, greedy, 48 tokens, 1 thread), each held-out chat prompt is generated
by the default after four histories of the setting, each from `reset_costs()` (a fresh setting: in-process, so the
kernels of every width are warm):
- first: nothing else (what a process's first call knows);
- costs known: three calls on other prompts, then their acceptance record forgotten (step costs measured, no record);
- other prompts: three calls on other prompts (costs and a record of other prompts);
- tenth: nine calls on the same prompt (costs and this prompt's own record: the tenth identical call).
Each call is timed against a plain generate() of the same prompt next to it; the summary is the geometric mean over
prompts of each history's ratio to plain.

Run: python benchmarks/first_call_parts.py --out benchmarks/data/first_call_parts.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from default_vs_best import CHAT_PROMPTS, batches, commit, encode, load, machine, timed  # noqa: E402

from hf_specdec import costs  # noqa: E402

HISTORIES = ("first", "costs known", "other prompts", "tenth")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8, help="the last N held-out chat prompts")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/data/first_call_parts.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, tokenizer, drafter = load("bfloat16", "head")
    kwargs = dict(max_new_tokens=args.new_tokens, do_sample=False)
    groups = [batches(encode(tokenizer, [prompt]), 1, tokenizer.pad_token_id)[0] for prompt in CHAT_PROMPTS]
    chosen = range(len(groups) - args.prompts, len(groups))
    target.generate(**groups[0], **kwargs)
    ratios = {history: [] for history in HISTORIES}
    for index in chosen:
        others = [groups[(index + k) % len(groups)] for k in (1, 2, 3)]
        before = {"first": [], "costs known": others, "other prompts": others, "tenth": [groups[index]] * 9}
        for history in HISTORIES:
            costs.reset_costs()
            for group in before[history]:
                target.generate(**group, drafter=drafter, **kwargs)
            if history == "costs known":  # the setting's StepCosts, as the loop finds it
                setting = costs.costs_for(target, drafter, target.device, 1, False)
                assert setting.accepted and setting.measured(), "not the setting the calls ran"
                setting.accepted, setting.ranks, setting.delivered, setting.paths = (), (), {}, {}
            plain, _ = timed(lambda: target.generate(**groups[index], **kwargs))
            spec, _ = timed(lambda: target.generate(**groups[index], drafter=drafter, **kwargs))
            ratios[history].append(plain / spec)
        print(index, {history: round(values[-1], 3) for history, values in ratios.items()}, flush=True)
    summary = {history: statistics.geometric_mean(values) for history, values in ratios.items()}
    record = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(), "command": " ".join(sys.argv),
              "prompts": list(chosen), "geomean_x_plain": summary, "ratios": ratios}
    print(json.dumps(summary))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
