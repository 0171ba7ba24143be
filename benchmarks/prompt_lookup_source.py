"""Prompt lookup over the source on summarization-like inputs: a tiny BART trained in-process to copy spans of its
source (a "summary" keeps each source token with probability 0.8, in order), then greedy generate() with
drafter="prompt_lookup" against the same calls without a drafter: tokens per target forward and wall time.

    python benchmarks/prompt_lookup_source.py --steps 1200 --requests 20 --out benchmarks/data/encoder_decoder.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import transformers
from transformers import BartConfig, BartForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_specdec  # noqa: E402
from encoder_decoder_speed import save  # noqa: E402

VOCAB, PAD, BOS, EOS = 96, 0, 1, 2
SOURCE_LEN = 40


def pairs(count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(sources [count, SOURCE_LEN], summaries [count, <= SOURCE_LEN + 1] ending in EOS, PAD after)."""
    sources = torch.randint(3, VOCAB, (count, SOURCE_LEN), generator=generator)
    keep = torch.rand(count, SOURCE_LEN, generator=generator) < 0.8
    summaries = torch.full((count, SOURCE_LEN + 1), PAD)
    for row in range(count):
        kept = sources[row][keep[row]]
        summaries[row, : len(kept)] = kept
        summaries[row, len(kept)] = EOS
    return sources, summaries


def train(steps: int, seed: int = 0) -> BartForConditionalGeneration:
    torch.manual_seed(seed)
    config = BartConfig(vocab_size=VOCAB, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256,
                        max_position_embeddings=256, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                        decoder_start_token_id=EOS, forced_bos_token_id=None, forced_eos_token_id=None)
    model = BartForConditionalGeneration(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        sources, summaries = pairs(32, generator)
        labels = summaries.masked_fill(summaries == PAD, -100)
        loss = model(input_ids=sources, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.generation_config.forced_bos_token_id = model.generation_config.forced_eos_token_id = None
    return model, float(loss.detach())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    start = time.perf_counter()
    model, loss = train(args.steps)
    train_s = time.perf_counter() - start
    sources, _ = pairs(args.requests, torch.Generator().manual_seed(12345))  # held out: another seed
    common = dict(do_sample=False, max_new_tokens=SOURCE_LEN + 1)
    results = {}
    for name, extra in (("plain", {}), ("lookup_default", dict(drafter="prompt_lookup")),
                        (f"lookup_gamma{args.gamma}", dict(drafter="prompt_lookup", gamma=args.gamma))):
        stats, outputs, seconds = hf_specdec.SpeculativeStats(), [], 0.0
        for row in range(args.requests):
            kwargs = dict(common, **extra, **({"stats": stats} if extra else {}))
            model.generate(input_ids=sources[row : row + 1], **kwargs)  # warm-up
            begin = time.perf_counter()
            outputs.append(model.generate(input_ids=sources[row : row + 1], **kwargs))
            seconds += time.perf_counter() - begin
        results[name] = dict(seconds=round(seconds, 3), outputs=outputs, stats=stats if extra else None)
    plain = results["plain"]
    tokens = sum(int((out[0, 1:] != PAD).sum()) for out in plain["outputs"])
    copied = sum(int(((out[0, 1:] != PAD) & torch.isin(out[0, 1:], sources[i])).sum())
                 for i, out in enumerate(plain["outputs"]))
    rows = [dict(method="plain", seconds=plain["seconds"], tokens_per_forward=1.0, speedup=1.0, exact=True)]
    for name, result in results.items():
        if name == "plain":
            continue
        stats = result["stats"]
        rows.append(dict(method=name, seconds=result["seconds"],
                         tokens_per_forward=round(float(stats.emitted.sum()) / max(stats.target_forwards, 1), 2),
                         acceptance=round(stats.acceptance_rate, 3) if stats.drafted.sum() else None,
                         speedup=round(plain["seconds"] / result["seconds"], 2),
                         exact=all(torch.equal(a, b) for a, b in zip(result["outputs"], plain["outputs"]))))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit,
                  machine=f"{hf_specdec.cpu.describe()}, 1 thread",
                  train_steps=args.steps, final_loss=round(loss, 3), train_s=round(train_s, 1),
                  requests=args.requests, output_tokens=tokens, output_tokens_in_source=copied, rows=rows)
    if args.out:
        save(args.out, "prompt lookup over the source", report)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
