"""Batches of a decoder that places tokens by its cache's length (BART, Marian, Pegasus, T5): what keeping every row's
cache the same length would pay, against the two ways its refusal of such batches leaves: plain batched decoding, and
`drafter=` one input at a time.

Rows of a batch accept different numbers of drafts. A decoder given each row's positions (Whisper) lets each row keep
its own; BART's cannot be told them, so a batch could only stay exact by cutting every row back to the step's least
lucky row: the batch then advances 1 + min over rows of the drafts accepted (for greedy decoding, a row that was ahead
re-drafts the same tokens, so feeding its known tokens again is the same step). That scheme is not built: this script
prices it from what it would do and what its parts cost, measured on the BART-large-shaped random-weight pair of
encoder_decoder_speed.py:

- the steps: greedy outputs of plain generate() and the drafter's greedy next token at each of their positions (one
  teacher-forced forward) give each row's accepted drafts at any length (`equal_length_steps`);
- the costs: the target's decoder forward of 1 and γ + 1 tokens at the batch's size over a filled cache, the drafter's
  1-token forward, the drafter's encoder pass (medians of repeated forwards);
- a call's time: plain batched generate()'s measured time, less its 1-token steps, plus the scheme's steps (γ drafter
  forwards and one verification each) and one encoder pass. No loop overhead and no re-fed tokens: the estimate leans
  in the scheme's favour.

Beside it, measured in interleaved rounds: plain generate() on the batch, and generate(drafter=) one input at a time
(the default, and chains of the best γ above). Greedy fp32, 1 thread, linears packed as the encoder-decoder bench.

    python benchmarks/equal_length_batches.py --batch 4 --inputs 2 --tokens 64 --out benchmarks/data/equal_length_batches.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import DynamicCache, EncoderDecoderCache, GenerationMixin

from default_vs_best import commit
from encoder_decoder_speed import bart_pair, hf_specdec, input_calls, prepare, save, side_by_side


def equal_length_steps(matches: torch.Tensor, gamma: int) -> tuple[int, list[int]]:
    """Steps to commit every column of `matches` ([rows, tokens] bool: whether the drafter's greedy next token at that
    position, after the target's own tokens before it, is the target's), drafting `gamma` a step: (with every row cut
    back to the least lucky row's length, each row alone). A row at position p accepts the run of matches from p, at
    most `gamma`, and commits it and the target's next token."""
    rows, tokens = matches.shape

    def accepted(row: int, position: int) -> int:
        run = 0
        while run < gamma and position + run < tokens and bool(matches[row, position + run]):
            run += 1
        return run

    position, together = 0, 0
    while position < tokens:
        position += 1 + min(accepted(row, position) for row in range(rows))
        together += 1
    alone = []
    for row in range(rows):
        position, steps = 0, 0
        while position < tokens:
            position, steps = position + 1 + accepted(row, position), steps + 1
        alone.append(steps)
    return together, alone


def _median_ms(run, reps: int) -> float:
    run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def forward_costs(target, drafter, call: dict, tokens: torch.Tensor, widths, reps: int) -> dict:
    """ms of: the target's decoder forward of each width in `widths` over a cache of half the output, the drafter's
    1-token forward over its own such cache, and the drafter's encoder over the source (`call`'s input_ids)."""
    source, filled = call["input_ids"], tokens.shape[1] // 2
    costs = {}
    with torch.no_grad():
        encoded = target.get_encoder()(input_ids=source)
        costs["encoder_ms"] = _median_ms(lambda: drafter.get_encoder()(input_ids=source), reps)
        for name, model, model_widths in (("target", target, widths), ("drafter", drafter, (1,))):
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            model(encoder_outputs=encoded, decoder_input_ids=tokens[:, :filled], past_key_values=cache, use_cache=True)
            for width in model_widths:
                def step(width=width, model=model, cache=cache):
                    model(encoder_outputs=encoded, decoder_input_ids=tokens[:, filled:filled + width],
                          past_key_values=cache, use_cache=True)
                    cache.self_attention_cache.crop(-width)  # (5.23: a negative count removes that many)
                costs[f"{name}_{width}_ms"] = _median_ms(step, reps)
    return {key: round(value, 2) for key, value in costs.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--inputs", type=int, default=2, help="batches of random 64-token sources (seeds batch, ...)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds of the measured methods")
    parser.add_argument("--reps", type=int, default=20, help="repeats of each forward the costs are the medians of")
    parser.add_argument("--share", type=float, default=0.1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    target, drafter = bart_pair(args.share)
    prepare((target, drafter), torch.float32, 1)
    calls = input_calls(target, False, args.batch, args.inputs, args.tokens, torch.float32)
    outputs = [GenerationMixin.generate(target, **call) for call in calls]
    with torch.no_grad():  # the drafter's greedy next token after each of the target's prefixes
        guesses = [drafter(input_ids=call["input_ids"], decoder_input_ids=out[:, :-1]).logits.argmax(-1)
                   for call, out in zip(calls, outputs)]
    matches = [guess == out[:, 1:] for guess, out in zip(guesses, outputs)]  # [batch, tokens] each
    steps = {gamma: [equal_length_steps(m, gamma) for m in matches] for gamma in args.gammas}
    costs = forward_costs(target, drafter, calls[0], outputs[0], sorted({1, *(g + 1 for g in args.gammas)}), args.reps)

    def rows(call):  # the batch's inputs one at a time
        return [{**call, "input_ids": call["input_ids"][row:row + 1]} for row in range(args.batch)]

    def alone(**keywords):
        return lambda: [GenerationMixin.generate(target, **one, **keywords) for call in calls for one in rows(call)]

    per_step = {gamma: gamma * costs["drafter_1_ms"] + costs[f"target_{gamma + 1}_ms"] for gamma in args.gammas}
    best = min(args.gammas, key=lambda g: sum(together for together, _ in steps[g]) * per_step[g])
    methods = {"plain batch": lambda: [GenerationMixin.generate(target, **call) for call in calls],
               "one at a time, default": alone(drafter=drafter),
               f"one at a time, chains of {best}": alone(drafter=drafter, gamma=best)}
    times, results, _ = side_by_side(methods, args.rounds)
    expected = [out[row] for out in outputs for row in range(args.batch)]  # the batch's rows, in the calls' order
    exact = all(torch.equal(one[0], row) for name in methods if name != "plain batch"
                for one, row in zip(results[name], expected))
    plain_s = statistics.median(times["plain batch"])
    plain_steps_s = args.inputs * args.tokens * costs["target_1_ms"] / 1e3  # its 1-token steps, as priced
    scheme = {}
    for gamma in args.gammas:
        together, slowest = sum(t for t, _ in steps[gamma]), sum(max(a) for _, a in steps[gamma])
        price = lambda n: plain_s - plain_steps_s + (n * per_step[gamma] + args.inputs * costs["encoder_ms"]) / 1e3  # noqa: E731
        scheme[gamma] = dict(steps=together, rows_alone_steps=[a for _, a in steps[gamma]],
                             tokens_per_step=round(args.inputs * args.tokens / together, 3),
                             estimated_s=round(price(together), 3), x_plain=round(plain_s / price(together), 3),
                             # a decoder given each row's positions (Whisper's): the batch waits for its slowest row
                             per_row_positions_x_plain=round(plain_s / price(slowest), 3))
    forwards = []  # the loop's target forwards a row, alone, chains of `best`: what `rows_alone_steps` predicts
    for call in calls:
        for one in rows(call):
            stats = hf_specdec.SpeculativeStats()
            GenerationMixin.generate(target, **one, drafter=drafter, gamma=best, stats=stats)
            forwards.append(stats.target_forwards)
    result = dict(
        batch=args.batch, inputs=args.inputs, tokens=args.tokens, share=args.share,
        agreement=round(float(torch.cat(matches).double().mean()), 3), costs_ms=costs,
        plain_batch_s=round(plain_s, 3), plain_steps_priced_s=round(plain_steps_s, 3),
        equal_length=scheme, best_gamma=best, rows_alone_forwards_measured=forwards,
        one_at_a_time={name: dict(s=round(statistics.median(times[name]), 3),
                                  x_plain=round(statistics.median(p / t for p, t in zip(times["plain batch"], times[name])), 3))
                       for name in methods if name != "plain batch"},
        one_at_a_time_exact=exact, seconds={name: [round(t, 3) for t in values] for name, values in times.items()},
        command=" ".join(["python", *sys.argv]), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        commit=commit(),
        machine=f"{hf_specdec.cpu.describe()}, {torch.get_num_threads()} thread", torch=torch.__version__,
        transformers=transformers.__version__)
    print(json.dumps(result, indent=1))
    if args.out:
        save(args.out, f"bart-large batch {args.batch}, {result['commit']}, {result['date'][:10]}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
