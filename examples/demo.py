"""`make demo`: speculative decoding of SmolLM2-135M-Instruct with a shipped drafter, timed side by side with
plain generate() on the same prompts in the same run.

It loads the target in whichever dtype runs a decoding step faster on this machine, warms both methods
up (the default policy measures its costs then), times plain and speculative runs interleaved and keeps
the median of several, prints the policy's choices, and warns when the machine was busy. Per prompt it
says whether the text is plain generate()'s own, and where it is not, where it first differs and the
target's top-two logit gap there (in half precision a near-tie can flip, as it does in plain generate()
between batch sizes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

import torch

import hf_specdec
from hf_specdec.bench.measure import TIE_TOLERANCE, first_difference
from hf_specdec.drafters import resolve_drafter
from hf_specdec.smollm2 import load_smollm2

ROOT = Path(__file__).resolve().parent.parent / "drafters"
#: The fastest shipped drafter on the benchmark (docs/results.md), then the other one.
DRAFTERS = (ROOT / "smollm2-135m-instruct-eagle3", ROOT / "smollm2-135m-instruct")
#: Prompts whose greedy answers read well in bf16 and float32 alike, plain and speculative (a 135M model loops on
#: some prompts, e.g. "1. **1011111..." for a numbered list of cooking tips; tests/test_demo.py checks these).
PROMPTS = [
    "Explain why the sky is blue to a ten year old.",
    "What is the difference between weather and climate?",
    "What are the benefits of drinking water?",
    "Tell me a short story about a friendly robot.",
]


def load_fastest_target(dtypes=(torch.float32, torch.bfloat16)):
    """(target, tokenizer, dtype, ms per decoding step by dtype): SmolLM2 in whichever of `dtypes` runs a one-token
    cached forward faster here (bf16 wins only where the CPU computes in it: AVX512-BF16 or AMX)."""
    timings, models = {}, {}
    for dtype in dtypes:
        model, tok = load_smollm2(dtype)  # a fresh load: casting back and forth would round the fp32 weights
        timings[dtype], models[dtype] = _step_ms(model), model
    dtype = min(timings, key=timings.get)
    return models[dtype], tok, dtype, {str(d).removeprefix("torch."): ms for d, ms in timings.items()}


def _step_ms(model, steps: int = 16) -> float:
    """ms per token of plain greedy generate() on a 128-token prompt (after one warm-up call)."""
    ids = torch.randint(0, model.config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
    lengths = dict(attention_mask=torch.ones_like(ids), max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
    model.generate(ids, **lengths)
    start = time.perf_counter()
    model.generate(ids, **lengths)
    return (time.perf_counter() - start) * 1e3 / steps


def explain(target, tok, prompt: list[int], plain: list[int], spec: list[int]) -> tuple[str, str]:
    """(kind, sentence) for one prompt: identical, a first difference at a near-tie of the target's top two
    logits, or a difference elsewhere."""
    difference = first_difference(target, prompt, plain, spec)
    if difference is None:
        return "identical", "identical to plain generate()"
    show = lambda token: "its end" if token is None else repr(tok.decode([token]))
    where = (f"first differs from plain generate() at new token {difference.index}: plain {show(difference.plain_token)}, "
             f"speculative {show(difference.other_token)}")
    if difference.near_tie:
        dtype = str(next(target.parameters()).dtype).removeprefix("torch.")
        return "near-tie", (f"{where}; the target's top two logits there are {difference.gap:.4f} apart, a near-tie: in "
                            f"{dtype} the scores of a 1-token and a multi-token forward round differently, and plain "
                            "generate() itself flips such ties between batch sizes")
    gap = "plain had ended" if difference.gap is None else f"top-2 gap {difference.gap:.4f}"
    if next(target.parameters()).dtype != torch.float32:
        return "differs", (f"{where} ({gap}, wider than a near-tie): in half precision the target's scores depend on "
                           "how many tokens a forward scores; rerun with --dtype float32, where the text must be identical")
    return "differs", f"{where} ({gap}): not a near-tie; in float32 this is a bug, please report it"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--drafter", default=None, help="drafter directory (default: the fastest shipped one)")
    parser.add_argument("--gamma", type=int, default=None, help="fix the drafts per step (default: the cost-aware policy)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="tokens generated per prompt")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per prompt and method (median kept)")
    parser.add_argument("--no-pack", action="store_true", help="keep PyTorch's default float32 Linear kernels")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="the target's dtype (default: whichever runs a decoding step faster here)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]

    dtypes = (torch.float32, torch.bfloat16) if args.dtype == "auto" else (getattr(torch, args.dtype),)
    target, tok, dtype, step_ms = load_fastest_target(dtypes)
    # oneDNN-packed weights make multi-token forwards (verification, and plain batches) cheaper on CPU; both
    # methods below run the same packed model.
    packed = not args.no_pack and hf_specdec.cpu.available() and hf_specdec.pack_linears(target) > 0
    drafter_dir = Path(args.drafter) if args.drafter else next(path for path in DRAFTERS if path.is_dir())
    drafter = resolve_drafter(str(drafter_dir))
    stats = hf_specdec.SpeculativeStats()
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=False)
    plain_times, spec_times, tokens, verdicts = [], [], 0, []
    for index, prompt in enumerate(PROMPTS):
        inputs = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)
        prompt_len = inputs["input_ids"].shape[1]

        runs = {
            "plain": lambda record=None: target.generate(**inputs, **kwargs),
            "spec": lambda record=None: target.generate(
                **inputs, drafter=drafter, gamma=args.gamma, tokenizer=tok, **({"stats": record} if record else {}),
                **kwargs,
            ),
        }
        if index == 0:  # warm-up; the default policy measures its costs here
            runs["plain"](), runs["spec"]()
        times, outputs = {"plain": [], "spec": []}, {}
        for repeat in range(args.repeats):  # interleaved, so a burst of load hits both methods
            for name, run in runs.items():
                start = time.perf_counter()
                outputs[name] = run(stats if repeat == 0 else None)
                times[name].append(time.perf_counter() - start)
        plain_times.append(statistics.median(times["plain"]))
        spec_times.append(statistics.median(times["spec"]))
        tokens += outputs["plain"].shape[1] - prompt_len
        print(f"\n### {prompt}\n{tok.decode(outputs['spec'][0, prompt_len:], skip_special_tokens=True)}")
        verdict = explain(target, tok, inputs["input_ids"][0].tolist(), outputs["plain"][0, prompt_len:].tolist(),
                          outputs["spec"][0, prompt_len:].tolist())
        verdicts.append(verdict)
        print(f"[{verdict[1]}]\n[plain {plain_times[-1]:.2f} s, speculative {spec_times[-1]:.2f} s: "
              f"{plain_times[-1] / spec_times[-1]:.2f}x]")

    load_after = os.getloadavg()[0]
    plain_rate, spec_rate = tokens / sum(plain_times), tokens / sum(spec_times)
    lengths = stats.draft_lengths.tolist()
    print("\n" + "=" * 72)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or "unknown"
    print(f"run:                          {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {commit}")
    print(f"CPU:                          {hf_specdec.cpu.describe()}")
    print(f"target dtype:                 {str(dtype).removeprefix('torch.')} (one decoding step: "
          + ", ".join(f"{name} {ms:.1f} ms" for name, ms in step_ms.items()) + ")"
          + ("; oneDNN-packed linears (plain and speculative)" if packed else ""))
    print(f"drafter:                      {drafter_dir.name} ({type(drafter).__name__})")
    print(f"policy:                       {'gamma=' + str(args.gamma) if args.gamma else 'cost-aware default'}; steps "
          "by drafts proposed: " + ", ".join(f"{k}: {n}" for k, n in enumerate(lengths) if n))
    counts = {kind: sum(v[0] == kind for v in verdicts) for kind in ("identical", "near-tie", "differs")}
    print(f"same text as plain generate(): {counts['identical']} of {len(verdicts)} identical"
          + (f", {counts['near-tie']} first differ at a near-tie (top-2 gap < {TIE_TOLERANCE})" if counts["near-tie"] else "")
          + (f", {counts['differs']} differ elsewhere (see each prompt)" if counts["differs"] else ""))
    print(f"acceptance rate alpha:        {stats.acceptance_rate:.3f}")
    print(f"tokens per target forward:    {stats.tokens_per_step:.2f}")
    print(f"plain generate():             {plain_rate:.1f} tokens/s (median of {args.repeats} per prompt)")
    print(f"generate(drafter=...):        {spec_rate:.1f} tokens/s")
    per_prompt = ", ".join(f"{plain / spec:.2f}x" for plain, spec in zip(plain_times, spec_times))
    print(f"speed-up (same run):          {sum(plain_times) / sum(spec_times):.2f}x, total plain time over total "
          f"speculative time (per prompt: {per_prompt}; threads={args.threads})")
    cpus = os.cpu_count() or 1
    if max(load_before, load_after) > cpus - args.threads + 0.5:
        print(f"WARNING: load average {load_before:.1f} -> {load_after:.1f} on {cpus} CPUs: other processes were "
              "running, so these timings (and the default policy's measured costs) may be off; rerun when idle.")


if __name__ == "__main__":
    main()
