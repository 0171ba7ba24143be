"""`make demo`: speculative decoding of SmolLM2-135M-Instruct with the shipped drafter, side by side
with plain generate() on the same prompts, in the same run."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

import hf_specdec
from hf_specdec.smollm2 import load_smollm2

DRAFTER = Path(__file__).resolve().parent.parent / "drafters" / "smollm2-135m-instruct"
PROMPTS = [
    "Explain why the sky is blue to a ten year old.",
    "Write a short poem about a cat watching the rain.",
    "Give me three tips for learning to cook.",
    "What is the difference between weather and climate?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--drafter", default=str(DRAFTER), help="drafter model directory")
    parser.add_argument("--gamma", type=int, default=1, help="tokens drafted per step (1: best measured for the shipped drafter)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="tokens generated per prompt")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target, tok = load_smollm2()
    drafter = AutoModelForCausalLM.from_pretrained(args.drafter, dtype=torch.float32).eval()  # bf16 is slower on CPU
    plain_time = spec_time = 0.0
    plain_tokens = spec_tokens = 0
    stats = hf_specdec.SpeculativeStats()
    for prompt in PROMPTS:
        chat = [{"role": "user", "content": prompt}]
        inputs = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        prompt_len = inputs["input_ids"].shape[1]
        kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=False)

        start = time.perf_counter()
        plain = target.generate(**inputs, **kwargs)
        plain_time += time.perf_counter() - start
        start = time.perf_counter()
        spec = target.generate(**inputs, drafter=drafter, gamma=args.gamma, tokenizer=tok, stats=stats, **kwargs)
        spec_time += time.perf_counter() - start
        plain_tokens += plain.shape[1] - prompt_len
        spec_tokens += spec.shape[1] - prompt_len

        print(f"\n### {prompt}\n{tok.decode(spec[0, prompt_len:], skip_special_tokens=True)}")
        print(f"[same text as plain generate(): {torch.equal(plain, spec)}]")

    print("\n" + "=" * 72)
    print(f"drafter: {args.drafter}  gamma={args.gamma}  threads={args.threads}")
    print(f"acceptance rate alpha:        {stats.acceptance_rate:.3f}")
    print(f"tokens per target forward:    {stats.tokens_per_step:.2f}")
    print(f"plain generate():             {plain_tokens / plain_time:.1f} tokens/s")
    print(f"generate(drafter=...):        {spec_tokens / spec_time:.1f} tokens/s")
    print(f"speed-up (same run):          {plain_time / spec_time * spec_tokens / plain_tokens:.2f}x")


if __name__ == "__main__":
    main()
