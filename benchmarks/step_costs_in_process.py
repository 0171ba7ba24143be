"""What the loop times for the same steps at different moments of one process: SmolLM2-135M-Instruct (bf16) with the
shipped head on held-out chat prompts, greedy, batch 1: the default once over the prompts, then fixed shapes in turn,
tree 4/3/8 twice (before and after tree 4/6/32's calls). Per pass: its calls' wall time and the median of each kind of
step the loop recorded (drafting by depth, verifying by width), as the default's step costs hear them.

Run from the repo root with one core and one thread, the other core idle:
    nice -n -15 taskset -c 0 python benchmarks/step_costs_in_process.py --out benchmarks/data/step_costs_in_process_zen4.json
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402
from replay_default import _Tree  # noqa: E402  (a fixed tree whose steps the loop times, as the default's)

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402
from hf_specdec.costs import StepCosts  # noqa: E402


def head_parser(doc: str) -> argparse.ArgumentParser:
    """The options every script timing this setting takes: prompts, new tokens a call, where to write."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path)
    return parser


def head_setting(num_prompts: int) -> tuple:
    """(target, drafter, one-row input batches): SmolLM2 in bf16 with the shipped head on held-out chat prompts, one
    torch thread."""
    torch.set_num_threads(1)
    target, tokenizer, drafter = bench.load("bfloat16", "head")
    return target, drafter, batches(encode(tokenizer, CHAT_PROMPTS[:num_prompts]), 1, tokenizer.pad_token_id)


def listen() -> list[tuple]:
    """A list that hears every step the loop records from now on, as the default's step costs do: (kind, depth, width,
    draft ms, verify ms, when)."""
    heard, record = [], StepCosts.record

    def hear(self, kind, depth, width, draft_ms, verify_ms):
        heard.append((kind, depth, width, draft_ms, verify_ms, time.perf_counter()))
        return record(self, kind, depth, width, draft_ms, verify_ms)

    StepCosts.record = hear
    return heard


def by_part(heard: list[tuple]) -> dict[str, list[float]]:
    """The ms of `listen`'s steps by part and size ("draft chain 2", "verify tree 9"), as the step costs keep them: a
    step right after plain ones has no drafting sample."""
    parts = collections.defaultdict(list)
    for kind, depth, width, draft_ms, verify_ms, _ in heard:
        parts[f"verify {kind} {width}"].append(verify_ms)
        if draft_ms is not None:
            parts[f"draft {kind} {depth}"].append(draft_ms)
    return parts


def main() -> None:
    args = head_parser(__doc__).parse_args()
    target, drafter, groups = head_setting(args.num_prompts)
    heard = listen()
    tree = lambda k, d, n: _Tree(top_k=k, max_depth=d, max_nodes=n)  # noqa: E731
    passes = [("default", None), ("tree 4/3/8", tree(4, 3, 8)), ("tree 4/6/32", tree(4, 6, 32)),
              ("tree 4/3/8 again", tree(4, 3, 8))]
    target.generate(**groups[0], max_new_tokens=args.new_tokens, do_sample=False, drafter=drafter)  # warm-up
    result = []
    for name, gamma in passes:
        wall = 0.0
        heard.clear()
        for inputs in groups:
            start = time.perf_counter()
            target.generate(**inputs, max_new_tokens=args.new_tokens, do_sample=False, drafter=drafter, gamma=gamma)
            wall += time.perf_counter() - start
        steps = by_part(heard)
        medians = {key: round(statistics.median(ms), 1) for key, ms in sorted(steps.items()) if len(ms) >= 3}
        result.append({"pass": name, "wall_s": round(wall, 2), "median_ms": medians,
                       "steps": {key: len(ms) for key, ms in sorted(steps.items())}})
        print(json.dumps(result[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps({**bench.provenance(), "passes": result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
