"""What a call with the default costs over plain generate() outside the steps themselves, where the default settled on
plain steps: after `--warm-calls` calls with the default, short greedy calls (2, 8 and 24 new tokens, EOS ignored) of
one held-out prompt, each timed against plain generate() on the same prompt, interleaved, the median of `--repeats`
pairs per length. The difference that does not grow with the length is the call's fixed overhead (checks, the
drafter's state, reading the prompt).

Run from the repo root with one core and one thread, e.g.
  nice -n -15 taskset -c 1 python benchmarks/call_overhead.py --dtype float32 --drafters independent,unrelated
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from default_vs_best import commit, load, machine  # noqa: E402

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--drafters", default="independent,unrelated")
    parser.add_argument("--lengths", default="2,8,24")
    parser.add_argument("--warm-calls", type=int, default=8, help="calls with the default before timing")
    parser.add_argument("--warm-tokens", type=int, default=48, help="their new tokens (short calls may draft nothing)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/data/call_overhead.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for kind in args.drafters.split(","):
        target, tokenizer, drafter = load(args.dtype, kind)
        prompts = batches(encode(tokenizer, list(CHAT_PROMPTS[:8])), 1, tokenizer.pad_token_id)
        for inputs in prompts[: args.warm_calls]:  # the setting's record and step costs, as a process has them
            target.generate(**inputs, max_new_tokens=args.warm_tokens, do_sample=False, drafter=drafter)
        inputs = prompts[0]
        for length in map(int, args.lengths.split(",")):
            kwargs = dict(max_new_tokens=length, min_new_tokens=length, do_sample=False)
            plain, default = [], []
            for _ in range(args.repeats):
                for times, extra in ((plain, {}), (default, {"drafter": drafter})):
                    start = time.perf_counter()
                    target.generate(**inputs, **kwargs, **extra)
                    times.append((time.perf_counter() - start) * 1e3)
            row = {"drafter": kind, "dtype": args.dtype, "new_tokens": length, "plain_ms": statistics.median(plain),
                   "default_ms": statistics.median(default)}
            row["overhead_ms"] = row["default_ms"] - row["plain_ms"]
            rows.append(row)
            print(f"{kind:12} {args.dtype:8} {length:3} tokens: plain {row['plain_ms']:.1f} ms, default "
                  f"{row['default_ms']:.1f} ms, overhead {row['overhead_ms']:.1f} ms", flush=True)
        del target, drafter
        gc.unfreeze()
        gc.collect()
    record = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(), "threads": 1,
              "command": "python " + " ".join(sys.argv), "rows": rows}
    data = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([*data, record], indent=1))


if __name__ == "__main__":
    main()
