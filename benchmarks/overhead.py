"""What a plain step of the loop costs outside the target's forward, against plain generate().

Every call decodes the same batch greedily, 48 new tokens, EOS ignored (every row takes every step). The
target's `forward` is wrapped at class level and records (start, end) of every call; a call's per-step
overhead is the median gap between one decode forward's end and the next one's start (prefill and the
end of the call excluded), its forward time the median decode forward. Methods, interleaved in a shuffled
order per repeat (paired):
  plain     target.generate() without a drafter
  unrelated target.generate(drafter=<random-weight drafter>, gamma=<plain steps>)
  head      the same with the shipped EAGLE-3 head (it asks for hidden states every step)
  plain2    plain generate() timed again (A/A control)
where <plain steps> is the default with step costs pinned so that no draft pays and no probe is made: every step
drafts nothing, as the default does once it let a drafter go (the drafter stays, for probes). Run from the repo root with one core and one thread, e.g.
  nice -n -15 taskset -c 1 python benchmarks/overhead.py --dtype bfloat16 --repeats 5
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import subprocess
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.cpu import describe
from hf_specdec.costs import StepCosts
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareDraftPolicy
from hf_specdec.smollm2 import load_smollm2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-sizes", default="1,4,8")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--methods", default="plain,unrelated,head,plain2")
    parser.add_argument("--temperature", type=float, default=0.0, help="sample at this temperature (0: greedy)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    target, tokenizer = load_smollm2(dtype)
    torch.manual_seed(0)
    unrelated = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("drafters/smollm2-135m-instruct"))
    unrelated = unrelated.to(dtype).eval()
    head = load_drafter("drafters/smollm2-135m-instruct-eagle3")

    spans: list[tuple[float, float]] = []
    forward = type(target).forward

    @functools.wraps(forward)
    def timed(*a, **k):
        start = time.perf_counter()
        try:
            return forward(*a, **k)
        finally:
            spans.append((start, time.perf_counter()))

    type(target).forward = timed
    settings = dict(max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0, eos_token_id=None,
                    pad_token_id=tokenizer.pad_token_id)
    if args.temperature > 0:
        settings.update(temperature=args.temperature, top_k=0, top_p=1.0)  # as the bench samples
    drafters = {"unrelated": unrelated, "head": head}

    def call(method: str, inputs) -> tuple[float, float, float]:
        spans.clear()
        if method.startswith("plain"):
            target.generate(**inputs, **settings)
        else:
            never = CostAwareDraftPolicy(costs=StepCosts(verify_ms={1: 1.0, 2: 2.0}, draft_ms=1e6), exploration=0.0)
            target.generate(**inputs, drafter=drafters[method], gamma=never, **settings)
        decode = spans[1:]
        gaps = [b[0] - a[1] for a, b in zip(decode, decode[1:])]
        periods = [b[0] - a[0] for a, b in zip(decode, decode[1:])]
        return (statistics.median(gaps) * 1e3, statistics.median(end - start for start, end in decode) * 1e3,
                statistics.median(periods) * 1e3)

    prompts = encode(tokenizer, CHAT_PROMPTS)
    methods = args.methods.split(",")
    mode = f"sampled at T {args.temperature}" if args.temperature > 0 else "greedy"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d', time.gmtime())}, {commit}, {describe()}")
    print(f"{args.dtype}, {mode}, {torch.get_num_threads()} thread, torch {torch.__version__}")
    print("batch method     overhead_ms  forward_ms  overhead/forward  step_ms  (medians over repeats)")
    for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
        (inputs,) = batches(prompts[:batch_size], batch_size, tokenizer.pad_token_id)
        for method in methods:  # warm-up
            call(method, inputs)
        results = {method: [] for method in methods}
        order = list(methods)
        for repeat in range(args.repeats):
            random.Random(repeat).shuffle(order)
            for method in order:
                results[method].append(call(method, inputs))
        for method in methods:
            gap, fwd, period = (statistics.median(column) for column in zip(*results[method]))
            print(f"{batch_size:5d} {method:10s} {gap:11.3f} {fwd:11.2f} {100 * gap / fwd:15.1f} % {period:8.2f}")


if __name__ == "__main__":
    main()
