"""What the shared cache saves EarlyExit(k) per verification on SmolLM2-135M-Instruct: one target forward over a
step's last committed token and γ drafts, every layer on every column (the drafter's own cache) against layers
0..k-1 on the last draft only (`hf_specdec.cache.SharedPrefix`), after the same draft.

    python benchmarks/early_exit_verify.py --dtypes bf16 fp32 --batches 1 4 --ks 4 8 12 --gamma 4 --repeats 30

Chat prompts (CHAT_PROMPTS, left-padded), prefilled once; each repeat drafts γ tokens, times the verification forward
alone and rolls the cache back; the median of `--repeats`, torch on one thread. Prints JSON rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.cache import CachedModel, share_prefix
from hf_specdec.drafters.early_exit import _view, decoder_layers
from hf_specdec.smollm2 import load_smollm2

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def verify_ms(model, group, k: int, gamma: int, repeats: int, shared: bool) -> float:
    """Median milliseconds of the verification forward after a γ-token draft, with or without the shared cache."""
    input_ids, mask = group["input_ids"], group["attention_mask"]
    batch, length = input_ids.shape
    pad_lens = (mask == 0).sum(dim=1)
    sequences = torch.cat([input_ids, input_ids[:, -gamma - 1:]], dim=1)  # drafts: any tokens (never accepted here)
    lens = torch.full((batch,), length, dtype=torch.long)
    target = CachedModel(model, batch, torch.device("cpu"))
    _, decoder, name = decoder_layers(model)
    layers = list(getattr(decoder, name))
    prefix = share_prefix(target, layers, k, lambda chosen: _view(model, chosen)) if shared else None
    own = None if shared else CachedModel(_view(model, layers[:k]), batch, torch.device("cpu"))
    target.forward(sequences, pad_lens, lens - 1, 1)  # the prompt but its last token, as after a step
    if own is not None:
        own.forward(sequences, pad_lens, lens - 1, 1)
    times = []
    for _ in range(repeats):
        drafter = own
        if prefix is not None:
            prefix.begin()
            drafter = prefix.drafter
        for j in range(gamma):  # feeds the last committed token and drafts 1..γ-1, as a chain's draft does
            drafter.forward(sequences, pad_lens, lens + j, 1)
        start = time.perf_counter()
        target.forward(sequences, pad_lens, lens + gamma, gamma + 1)
        times.append((time.perf_counter() - start) * 1e3)
        target.rollback(lens - pad_lens - 1, slack=gamma + 1)
        if own is not None:
            own.rollback(lens - pad_lens - 1, slack=gamma + 1)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"], choices=sorted(DTYPES))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--ks", nargs="+", type=int, default=[4, 8, 12])
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for dtype_name in args.dtypes:
        model, tokenizer = load_smollm2(DTYPES[dtype_name])
        prompt_ids = encode(tokenizer, CHAT_PROMPTS[: max(args.batches)])
        for batch in args.batches:
            group = batches(prompt_ids, batch, tokenizer.pad_token_id or tokenizer.eos_token_id)[0]
            for k in args.ks:
                verify_ms(model, group, k, args.gamma, 3, True)  # warm-up
                own = verify_ms(model, group, k, args.gamma, args.repeats, False)
                shared = verify_ms(model, group, k, args.gamma, args.repeats, True)
                print(json.dumps({"dtype": dtype_name, "batch": batch, "k": k, "gamma": args.gamma,
                                  "own_cache_ms": round(own, 2), "shared_ms": round(shared, 2),
                                  "saved": round(1 - shared / own, 3)}), flush=True)


if __name__ == "__main__":
    main()
