"""Feature extraction in float32 or bfloat16 (issue 25, `distill --feature-dtype`).

    python docs/bench/issue25/extract_dtype.py speed THREADS DTYPE BATCH_TOKENS   # tokens/s, peak RSS
    python docs/bench/issue25/extract_dtype.py agree                              # what bfloat16 changes

`speed`: prompt + response tokens a second over 32 Magpie records (work/distill/magpie-l0.jsonl, from 100 on).
`agree`: on 24 records of magpie-l1.jsonl, the relative error of bfloat16 states against float32's (both rounded to
float16 as a store keeps them), and how often the teacher's top-1 (the target's LM head over the final state, what
training fits) is the same token, with the mean total variation distance of its distributions.
Results of session e: extract_dtype.txt beside this file.
"""
import resource
import sys
import time

import torch

from hf_specdec.distill.data import read_records
from hf_specdec.distill.features import _hidden_states, record_key
from hf_specdec.smollm2 import load_smollm2

LAYERS = [2, 15, 27, 30]  # the EAGLE-3 head's low / mid / high states and the final one (SmolLM2, 30 layers)


def speed(threads: int, dtype: torch.dtype, batch_tokens: int) -> None:
    torch.set_num_threads(threads)
    records = read_records("work/distill/magpie-l0.jsonl")[100:132]
    tokens = sum(len(r.ids) for r in records)
    target, _ = load_smollm2(dtype)
    with torch.inference_mode():
        list(_hidden_states(records[:4], target, LAYERS, batch_tokens, False))  # warm-up
        started = time.perf_counter()
        for _ in _hidden_states(records, target, LAYERS, batch_tokens, False):
            pass
        seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"{threads} thread(s), {dtype}, batch_tokens {batch_tokens}: {tokens} tokens in {seconds:.1f} s, "
          f"{tokens / seconds:.0f} tok/s, peak RSS {peak:.1f} GB")


def agree() -> None:
    torch.set_num_threads(1)
    records = read_records("work/distill/magpie-l1.jsonl")[:24]
    states = {}
    for dtype in (torch.float32, torch.bfloat16):
        target, _ = load_smollm2(dtype)
        with torch.inference_mode():
            states[dtype] = {k: v.half().float() for k, v in _hidden_states(records, target, LAYERS, 1024, False)}
        if dtype == torch.float32:
            lm_head = target.lm_head.weight.detach().float()
    full, half = states[torch.float32], states[torch.bfloat16]
    for i, layer in enumerate(LAYERS):
        num = sum(float(((half[k][:, i] - a[:, i]) ** 2).sum()) for k, a in full.items())
        den = sum(float((a[:, i] ** 2).sum()) for a in full.values())
        print(f"layer {layer}: relative rms error of bfloat16 states {(num / den) ** 0.5:.4f}")
    same = total = 0
    variation = 0.0
    for record in records:
        key = record_key(record)
        a = full[key][record.prompt_len:, -1] @ lm_head.T
        b = half[key][record.prompt_len:, -1] @ lm_head.T
        same += int((a.argmax(-1) == b.argmax(-1)).sum())
        total += a.shape[0]
        variation += float(0.5 * (a.softmax(-1) - b.softmax(-1)).abs().sum())
    print(f"teacher top-1 the same at {same}/{total} = {same / total:.4f} response positions; "
          f"mean total variation {variation / total:.4f}")


if __name__ == "__main__":
    if sys.argv[1] == "speed":
        speed(int(sys.argv[2]), getattr(torch, sys.argv[3]), int(sys.argv[4]))
    else:
        agree()
