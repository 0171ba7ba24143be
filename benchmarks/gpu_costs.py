"""GPU costs of hf_specdec at realistic shapes, with RANDOM weights (no checkpoint reaches the GPU machine).

Targets: a SmolLM2-135M-shaped Llama (30 layers, hidden 576, 9/3 heads, vocab 49152) and a Llama-3.2-1B-shaped
one (16 layers, hidden 2048, 32/8 heads, inter 8192, vocab 128256); drafters: small random Llamas of the same
vocabulary (random drafts are almost always rejected: the loop timings price steps, not speed-ups). Sections:

  forward  target forward ms by width n (new tokens per row after 256 cached), batch 1/4/8: CUDA events, warm-up,
           median of rounds taken in turns; the plain HF forward and the loop's CachedModel.forward
  loop     ms per step and per token of plain generate(), our loop with 0 drafts, chains (gamma 1/2/4), trees
           (TreeDraftPolicy 4/4/16 and 8/6/32) and the default policy, batch 1 and 4, greedy, min_new_tokens
  sync     host-device syncs per loop step (torch.cuda.set_sync_debug_mode("warn")) and their top source lines
  exact    greedy output of the loop == plain generate() (fp32, bf16; batch 1 and left-padded batch 4)
  host     us per kernel launch and per synchronize; the profiler's top CPU ops of one forward
  profile  cProfile of single calls (loop-0, chain-1, tree-4/4/16 at batch 1)
  default  the default policy (no gamma=) against plain generate() and every fixed shape, side by side: whole greedy
           calls of --new-tokens tokens in --reps rounds taken in turns, each call's time over generate()'s in the
           same round (and an A/A control), with two drafters: the target's first --trunc-layers layers ("trunc",
           shared weights; the target's later layers write --tail-scale of their usual share, which sets alpha), with
           chains 1-4, trees 4/3/8 and 4/4/16 and at batch 1 transformers' assisted generation (4 drafts); and a
           random one (alpha 0), the default only; the default's first call of the setting against its later ones;
           the drafted lengths it chose and the step costs it measured

    python benchmarks/gpu_costs.py --out DIR                 # all sections but profile, on CUDA
    python benchmarks/gpu_costs.py --quick --device cpu      # a smoke run with tiny models
    python benchmarks/gpu_costs.py --models llama8b --sections default --trunc-layers 4 --tail-scale 0.05 --out DIR
Writes DIR/costs.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import copy
import json
import linecache
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from collections import Counter

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import hf_specdec
from hf_specdec.cache import CachedModel, prefers_position_masks
from hf_specdec.costs import StepCosts, costs_for
from hf_specdec.policy import CostAwareDraftPolicy, TreeDraftPolicy

SHAPES = {
    # SmolLM2-135M (hf_specdec.smollm2's checkpoint config)
    "smol135m": dict(num_hidden_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                     num_key_value_heads=3, head_dim=64, vocab_size=49152, tie_word_embeddings=True,
                     rope_theta=100000.0, bos_token_id=1, eos_token_id=2, pad_token_id=2),
    # Llama-3-8B: untied embeddings; with --trunc-layers 4 --tail-scale 0.05 the pair the default's GPU goal names
    "llama8b": dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                    num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False,
                    rope_theta=500000.0, bos_token_id=128000, eos_token_id=128001, pad_token_id=128001),
    # Llama-3.2-1B
    "llama1b": dict(num_hidden_layers=16, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                    num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                    rope_theta=500000.0, bos_token_id=128000, eos_token_id=128001, pad_token_id=128001),
}
#: The drafters: 4 layers, same vocabulary.
DRAFTER_SHAPES = {
    "smol135m": dict(num_hidden_layers=4, hidden_size=256, intermediate_size=768, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=64),
    "llama1b": dict(num_hidden_layers=4, hidden_size=512, intermediate_size=1536, num_attention_heads=8,
                    num_key_value_heads=2, head_dim=64),
    "llama8b": dict(num_hidden_layers=4, hidden_size=1024, intermediate_size=3584, num_attention_heads=16,
                    num_key_value_heads=4, head_dim=64),
}
TINY = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=512, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)

CONTEXT = 256  # cached tokens before the timed forwards; prompt length of the loop timings
WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def build(shape: dict, dtype: torch.dtype, device: str, seed: int, **overrides) -> LlamaForCausalLM:
    """A Llama with random weights (transformers' init, seeded), built on `device` in `dtype`."""
    # initializer_range 0.05, not 0.02: at 0.02 the residual stream is mostly the input embedding and greedy output
    # repeats a token (every draft accepted, a useless exactness check); at 0.05 it varies like text does.
    config = LlamaConfig(**{"initializer_range": 0.05, **shape, **overrides}, max_position_embeddings=4096,
                         attn_implementation="sdpa")
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    model.generation_config.pad_token_id = shape["pad_token_id"]
    model.generation_config.eos_token_id = shape["eos_token_id"]
    return model.eval()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------------- forward


class Timer:
    """CUDA events on a GPU, perf_counter elsewhere; ms."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def __call__(self, run) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        begin = time.perf_counter()
        run()
        return (time.perf_counter() - begin) * 1e3


@torch.no_grad()
def forward_costs(model, batch: int, device: str, widths, rounds: int, context: int) -> dict:
    """{"hf": {n: ms}, "loop": {n: ms}}: median forward ms of n new tokens per row after `context` cached ones,
    through the model's own forward (DynamicCache, no mask: nothing is padded) and through the loop's
    CachedModel.forward (as a verification calls it, with the position-mask choice the loop would make)."""
    from transformers import DynamicCache

    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, context + max(widths)), generator=gen).to(device)
    timer = Timer(device)
    out = {}
    # The model's own forward.
    cache = DynamicCache(config=model.config)
    model(input_ids=ids[:, :context], past_key_values=cache, use_cache=True, logits_to_keep=1)

    def hf(width):
        model(input_ids=ids[:, context : context + width], past_key_values=cache, use_cache=True, logits_to_keep=width)
        cache.crop(-width)

    # The loop's forward (CachedModel), rolled back to the context after each.
    masks = prefers_position_masks(model, torch.device(device))
    cached = CachedModel(model, batch, torch.device(device), position_masks=masks)
    pad_lens = torch.zeros(batch, dtype=torch.long, device=device)
    ctx = torch.full((batch,), context, dtype=torch.long, device=device)
    cached.forward(ids, pad_lens, ctx, 1)

    def loop(width):
        cached.forward(ids, pad_lens, ctx + width, width)
        cached.rollback(ctx.clone(), slack=context)

    for name, run in (("hf", hf), ("loop", loop)):
        for width in widths:  # warm-up
            run(width), run(width)
        times = {width: [] for width in widths}
        for _ in range(rounds):
            for width in widths:
                times[width].append(timer(lambda: run(width)))
        out[name] = {width: statistics.median(t) for width, t in times.items()}
    out["position_masks"] = masks
    return out


# ---------------------------------------------------------------------------------------------------- loop


def prompts(vocab: int, batch: int, length: int, device: str, padded: bool, pad: int, seed: int = 1):
    """[batch, length] random prompts (no special ids); `padded`: rows 1.. lose 20/40/60 % to left padding."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab - 1, (batch, length), generator=gen)
    ids[ids == pad] = 3
    mask = torch.ones_like(ids)
    if padded:
        for row in range(1, batch):
            cut = int(length * 0.2 * row) % length
            ids[row, :cut], mask[row, :cut] = pad, 0
    return ids.to(device), mask.to(device)


def plain_policy():
    """A policy that never drafts (every step a plain target step, through our loop): the default with costs pinned
    so that no draft pays, and no probe."""
    return CostAwareDraftPolicy(costs=StepCosts(verify_ms={1: 1.0, 2: 2.0}, draft_ms=1e6), exploration=0.0)


VARIANTS = {
    "generate": None,
    "loop-0": plain_policy,
    "chain-1": lambda: 1,
    "chain-2": lambda: 2,
    "chain-3": lambda: 3,
    "chain-4": lambda: 4,
    "tree-4/3/8": lambda: TreeDraftPolicy(top_k=4, max_depth=3, max_nodes=8),
    "tree-4/4/16": lambda: TreeDraftPolicy(top_k=4, max_depth=4, max_nodes=16),
    "tree-8/6/32": lambda: TreeDraftPolicy(top_k=8, max_depth=6, max_nodes=32),
    "default": lambda: None,
}


def timed_variant(target, drafter, variant, ids, mask, length, device):
    """(milliseconds, stats) of one `run_variant` call, the device synchronized before and after."""
    sync(device)
    begin = time.perf_counter()
    _, stats = run_variant(target, drafter, variant, ids, mask, length)
    sync(device)
    return (time.perf_counter() - begin) * 1e3, stats


def run_variant(target, drafter, variant: str, ids, mask, new_tokens: int, return_dict=False):
    """(output, stats or None) of one greedy call with min_new_tokens = max_new_tokens (no early EOS)."""
    kwargs = dict(attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    if return_dict:
        kwargs.update(return_dict_in_generate=True, output_scores=True)
    if variant == "generate":
        return target.generate(ids, **kwargs), None
    if variant == "assisted-4":  # transformers' assisted generation, 4 drafts a step
        return target.generate(ids, assistant_model=drafter, num_assistant_tokens=4,
                               num_assistant_tokens_schedule="constant", **kwargs), None
    stats = hf_specdec.SpeculativeStats()
    gamma = VARIANTS[variant]()
    if gamma is None:
        out = target.generate(ids, drafter=drafter, stats=stats, **kwargs)
    else:
        out = target.generate(ids, drafter=drafter, gamma=gamma, stats=stats, **kwargs)
    return out, stats


def loop_costs(target, drafter, batch: int, device: str, reps: int, long: int, short: int, forward_ms: float,
               variants=tuple(VARIANTS)) -> dict:
    """Per variant: ms per step and per token, from the difference of a `long` and a `short` call (prefill,
    setup and the default's first steps cancel), the best of `reps` rounds taken in turns (every other round
    in reverse order); with generate() among the variants, also each long call's time over generate()'s in the same
    round (median and range over rounds: host noise moves whole rounds)."""
    ids, mask = prompts(target.config.vocab_size, batch, CONTEXT, device, padded=False, pad=target.config.pad_token_id)
    timings = {variant: {long: [], short: []} for variant in variants}
    forwards = {}
    for variant in variants:  # warm-up (and the default's first call of the setting)
        run_variant(target, drafter, variant, ids, mask, short)
    for round_ in range(reps):
        for variant in variants if round_ % 2 == 0 else variants[::-1]:
            for length in (long, short):
                ms, stats = timed_variant(target, drafter, variant, ids, mask, length, device)
                timings[variant][length].append(ms)
                steps = length if stats is None else stats.target_forwards
                forwards[variant, length] = (steps, stats)
    out = {}
    for variant in variants:
        total_long, total_short = min(timings[variant][long]), min(timings[variant][short])
        steps_long, stats = forwards[variant, long]
        steps_short = forwards[variant, short][0]
        delta = total_long - total_short
        row = {
            "ms_per_token": delta / (long - short),
            "ms_per_step": delta / max(steps_long - steps_short, 1),
            "steps": steps_long,
            "total_ms": total_long,
        }
        if stats is not None:
            row.update(alpha=stats.acceptance_rate, tokens_per_step=stats.tokens_per_step,
                       draft_lengths=stats.draft_lengths.tolist())
        row["overhead_ms"] = row["ms_per_step"] - forward_ms
        row["overhead_pct"] = 100 * row["overhead_ms"] / forward_ms
        if "generate" in timings:
            ratios = sorted(a / b for a, b in zip(timings[variant][long], timings["generate"][long]))
            row["paired_vs_generate"] = dict(median=statistics.median(ratios), low=ratios[0], high=ratios[-1],
                                             rounds=len(ratios))
        row["rounds_ms"] = timings[variant]
        out[variant] = row
    out["forward_ms"] = forward_ms
    if "default" in variants:
        measured = costs_for(target, hf_specdec.ModelDrafter(drafter), ids.device, batch, False).measured()
        out["default_costs"] = {" ".join(map(str, key)): ms for key, ms in sorted(measured.items())}
    return out


# ---------------------------------------------------------------------------------------------------- default


def scale_tail(target, first: int, scale: float) -> None:
    """Scales what the target's layers from `first` on write to the residual stream (o_proj, down_proj) by `scale`:
    the first layers then decide most of the output, so a truncated copy agrees often. Shapes (and so every cost)
    stay as they were; greedy output stays varied (32 distinct tokens in 32 at scale 0.05, smol135m, fp32)."""
    with torch.no_grad():
        for layer in target.model.layers[first:]:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)


def truncated(target, layers: int) -> LlamaForCausalLM:
    """A drafter made of the target's embedding, its first `layers` decoder layers, final norm and head: the same
    modules (shared weights, no copy)."""
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = layers
    with torch.device("meta"):
        drafter = LlamaForCausalLM(config)
    drafter.model.embed_tokens = target.model.embed_tokens
    drafter.model.layers = torch.nn.ModuleList(target.model.layers[:layers])
    drafter.model.norm, drafter.model.rotary_emb = target.model.norm, target.model.rotary_emb
    drafter.lm_head = target.lm_head
    drafter.generation_config = copy.deepcopy(target.generation_config)
    return drafter.eval()


#: The default section's fixed shapes: the goal's "best fixed shape" is the fastest of these in the same run.
FIXED = ("chain-1", "chain-2", "chain-3", "chain-4", "tree-4/3/8", "tree-4/4/16")


def default_policy_costs(target, drafter, batch: int, device: torch.device) -> dict:
    """The step costs the default measured for this pair and batch (greedy), ms by (part, kind, size): what it
    decided with."""
    measured = costs_for(target, hf_specdec.ModelDrafter(drafter), device, batch, False).measured()
    return {" ".join(map(str, key)): ms for key, ms in sorted(measured.items())}


def _spread(values) -> dict:
    values = sorted(values)
    return dict(median=statistics.median(values), low=values[0], high=values[-1], n=len(values))


def default_vs_plain(target, drafters: dict, batch: int, device: str, rounds: int, new_tokens: int, skip=()) -> dict:
    """Whole greedy calls of `new_tokens` tokens, side by side: plain generate() twice (the second an A/A control),
    per drafter the default (and for the first drafter every FIXED shape, and at batch 1 transformers' assisted
    generation with 4 constant drafts), in `rounds` rounds taken in turns (every other round in reverse order).
    Before the rounds, after a plain call that warms plain's kernels: the first drafter's default's first call of the
    setting right after a timed plain one, then one untimed call of every other label. Per label: ms per round, its
    ratio to generate()'s in the same round, tokens per target forward and the drafted lengths of the last call.
    `skip`: labels ("random/default") not to run."""
    ids, mask = prompts(target.config.vocab_size, batch, CONTEXT, device, padded=False, pad=target.config.pad_token_id)
    first_name = next(iter(drafters))
    runs = [("generate", None, "generate"), ("generate-aa", None, "generate")]
    for name, drafter in drafters.items():
        variants = ("default",) + (FIXED + (("assisted-4",) if batch == 1 else ()) if name == first_name else ())
        runs += [(f"{name}/{variant}", drafter, variant) for variant in variants]
    runs = [run for run in runs if run[0] not in skip]
    out = {label: {"rounds_ms": []} for label, _, _ in runs}
    run_variant(target, None, "generate", ids, mask, new_tokens)  # (a cold first call: 11 s, later ones 3 s)
    first = {}
    for label, drafter, variant in runs[:1] + [run for run in runs if run[0] == f"{first_name}/default"]:
        first[label] = timed_variant(target, drafter, variant, ids, mask, new_tokens, device)[0]
    for label, drafter, variant in runs:
        try:
            if label not in first:
                run_variant(target, drafter, variant, ids, mask, new_tokens)
        except Exception as error:  # a label that fails (say, assisted generation) leaves the others' rows
            out[label]["error"] = f"{type(error).__name__}: {error}"[:300]
    runs = [run for run in runs if "error" not in out[run[0]]]
    for round_ in range(rounds):
        for label, drafter, variant in runs if round_ % 2 == 0 else runs[::-1]:
            ms, stats = timed_variant(target, drafter, variant, ids, mask, new_tokens, device)
            out[label]["rounds_ms"].append(ms)
            if stats is not None:
                out[label].update(tokens_per_forward=stats.tokens_per_step, target_forwards=stats.target_forwards,
                                  alpha=stats.acceptance_rate, draft_lengths=stats.draft_lengths.tolist(),
                                  tree_sizes=stats.tree_sizes.tolist())
        print(f"[batch {batch}: round {round_ + 1} of {rounds} done]", flush=True)
    plain = out["generate"]["rounds_ms"]
    for label, row in out.items():
        if len(row["rounds_ms"]) == len(plain):
            row["vs_generate"] = _spread([ms / p for ms, p in zip(row["rounds_ms"], plain)])
    summary = {"first_call_ms": first}
    if len(first) == 2:  # the default's first call, relative to plain, over its later calls' median
        later = out[f"{first_name}/default"].get("vs_generate", {}).get("median")
        if later:
            summary["first_vs_later"] = later / (first[f"{first_name}/default"] / first["generate"])
    fixed = {label: row for label, row in out.items() if label.split("/")[-1] in FIXED and "vs_generate" in row}
    default = out.get(f"{first_name}/default", {})
    if fixed and "vs_generate" in default:
        best = min(fixed, key=lambda label: fixed[label]["vs_generate"]["median"])
        summary.update(best_fixed=best, default_vs_best=_spread(
            [d / b for d, b in zip(default["rounds_ms"], fixed[best]["rounds_ms"])]))
    summary["policy_costs"] = {name: default_policy_costs(target, drafter, batch, ids.device)
                               for name, drafter in drafters.items()}
    out["summary"] = summary
    return out


def table_default(name, results) -> str:
    lines = [f"\n#### {name}: whole calls, x plain generate() in the same round (median, range), tokens per target "
             "forward\n", "batch | label | ms (median) | x generate | range | tok/fwd | alpha | drafted hist (last call)",
             "---|---|---|---|---|---|---|---"]
    for batch, result in results.items():
        for label, row in result.items():
            if label == "summary" or not isinstance(row, dict) or "rounds_ms" not in row:
                continue
            if "vs_generate" not in row:
                lines.append(f"{batch} | {label} | {row.get('error', 'no rounds')} |||||")
                continue
            ratio = row["vs_generate"]
            alpha = f"{row['alpha']:.2f}" if "alpha" in row else ""
            hist = row.get("draft_lengths", "")
            if row.get("tree_sizes") and sum(row["tree_sizes"]):
                hist = f"{hist} trees {row['tree_sizes']}"
            lines.append(f"{batch} | {label} | {statistics.median(row['rounds_ms']):.0f} | {1 / ratio['median']:.3f} | "
                         f"{1 / ratio['high']:.3f}-{1 / ratio['low']:.3f} | {row.get('tokens_per_forward', 1.0):.2f} | "
                         f"{alpha} | {hist}")
    lines.append("")
    for batch, result in results.items():
        summary = result.get("summary", {})
        if "default_vs_best" in summary:
            spread = summary["default_vs_best"]
            lines.append(f"- batch {batch}: default / best fixed ({summary['best_fixed']}) speed "
                         f"{1 / spread['median']:.3f} ({1 / spread['high']:.3f}-{1 / spread['low']:.3f})")
        if "first_vs_later" in summary:
            lines.append(f"- batch {batch}: the default's first call runs {summary['first_vs_later']:.3f} as fast, "
                         f"relative to plain, as its later calls (first calls ms {summary['first_call_ms']})")
        lines.append(f"- batch {batch}: the default's measured costs {json.dumps(summary.get('policy_costs'))}")
    if any(r.get("warnings") for r in results.values()):
        lines.append(f"- warnings: {[r.get('warnings') for r in results.values()]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- sync


def count_syncs(target, drafter, variant: str, batch: int, device: str, new_tokens: int) -> dict:
    """Synchronizing CUDA calls of one call, per target forward, and the source lines that made them (the
    innermost hf_specdec frame; else the innermost frame outside torch)."""
    ids, mask = prompts(target.config.vocab_size, batch, CONTEXT, device, padded=False, pad=target.config.pad_token_id)
    run_variant(target, drafter, variant, ids, mask, new_tokens)  # warm-up outside the count
    sites: Counter = Counter()
    count = 0
    original = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        nonlocal count
        if "synchronizing" not in str(message):
            return original(message, category, filename, lineno, file, line)
        count += 1
        stack = traceback.extract_stack()[:-1]
        ours = [f for f in stack if "/hf_specdec/" in f.filename]
        outside = [f for f in stack if "/torch/" not in f.filename]
        frame = (ours or outside or stack)[-1]
        name = frame.filename
        name = "hf_specdec/" + name.split("/hf_specdec/")[-1] if "/hf_specdec/" in name else name.split("site-packages/")[-1]
        where = f"{name}:{frame.lineno}"
        sites[f"{where}  {linecache.getline(frame.filename, frame.lineno).strip()[:90]}"] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            _, stats = run_variant(target, drafter, variant, ids, mask, new_tokens)
        finally:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = original
    steps = new_tokens if stats is None else stats.target_forwards
    return {"syncs": count, "steps": steps, "per_step": count / steps, "top": sites.most_common(15)}


# ---------------------------------------------------------------------------------------------------- exact


def first_difference(reference, other, prompt_len: int):
    """[(row, new-token index)] of each row's first differing token, for rows that differ."""
    out = []
    for row in range(reference.shape[0]):
        diff = (reference[row, prompt_len:] != other[row, prompt_len:]).nonzero()
        if diff.numel():
            out.append((row, int(diff[0])))
    return out


def exactness(target, drafters: dict, device: str, batch: int, padded: bool, new_tokens: int, variants) -> dict:
    """Per (drafter, variant): equal to plain greedy generate(), or the rows' first differences with plain's
    top-1 minus top-2 processed score there (a near tie: < 1e-3 or so)."""
    ids, mask = prompts(target.config.vocab_size, batch, 96, device, padded=padded, pad=target.config.pad_token_id)
    reference = run_variant(target, None, "generate", ids, mask, new_tokens, return_dict=True)[0]
    expected = reference.sequences
    out = {"sample": expected[0, ids.shape[1] : ids.shape[1] + 12].tolist()}
    for drafter_name, drafter in drafters.items():
        for variant in variants:
            got, stats = run_variant(target, drafter, variant, ids, mask, new_tokens)
            if got.shape == expected.shape and torch.equal(got, expected):
                out[f"{drafter_name}/{variant}"] = {"equal": True, "alpha": round(stats.acceptance_rate, 3)}
                continue
            diffs = first_difference(expected, got, ids.shape[1]) if got.shape == expected.shape else [("shape",)]
            detail = []
            for row, at in diffs[:4]:
                top2 = reference.scores[at][row].float().topk(2).values
                detail.append({"row": row, "token": at, "margin": float(top2[0] - top2[1])})
            out[f"{drafter_name}/{variant}"] = {"equal": False, "rows": len(diffs), "first": detail,
                                                "alpha": round(stats.acceptance_rate, 3)}
    return out


# ---------------------------------------------------------------------------------------------------- profile


def profile_variant(target, drafter, variant: str, batch: int, device: str, new_tokens: int, lines: int = 28) -> str:
    """cProfile of one greedy call (after a warm-up), by cumulative time, hf_specdec's and transformers' frames."""
    import cProfile
    import io
    import pstats

    ids, mask = prompts(target.config.vocab_size, batch, CONTEXT, device, padded=False, pad=target.config.pad_token_id)
    run_variant(target, drafter, variant, ids, mask, new_tokens)
    profiler = cProfile.Profile()
    sync(device)
    profiler.enable()
    run_variant(target, drafter, variant, ids, mask, new_tokens)
    sync(device)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("cumulative")
    stats.print_stats("hf_specdec|transformers/(generation|models/llama|cache_utils|masking)", lines)
    return text.getvalue()


# ---------------------------------------------------------------------------------------------------- host


@torch.no_grad()
def host_costs(model, device: str) -> dict:
    """What the host spends: us per launch of a tiny op, us per synchronize, and the top CPU ops of one 1-token
    forward after CONTEXT cached tokens (torch.profiler, CPU activity only)."""
    from transformers import DynamicCache

    small = torch.ones(8, device=device)
    for _ in range(100):
        small.add_(1)
    sync(device)
    begin = time.perf_counter()
    for _ in range(2000):
        small.add_(1)
    launch_us = (time.perf_counter() - begin) / 2000 * 1e6
    sync(device)
    begin = time.perf_counter()
    for _ in range(200):
        small.add_(1)
        sync(device)
    sync_us = (time.perf_counter() - begin) / 200 * 1e6 - launch_us
    ids = torch.randint(0, model.config.vocab_size, (1, CONTEXT + 1), generator=torch.Generator().manual_seed(0)).to(device)
    cache = DynamicCache(config=model.config)
    model(input_ids=ids[:, :CONTEXT], past_key_values=cache, use_cache=True, logits_to_keep=1)

    def one():
        model(input_ids=ids[:, CONTEXT:], past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.crop(-1)

    for _ in range(3):
        one()
    sync(device)
    begin = time.perf_counter()
    for _ in range(10):
        one()
    sync(device)
    forward_ms = (time.perf_counter() - begin) / 10 * 1e3
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            one()
        sync(device)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    return {"launch_us": launch_us, "sync_us": sync_us, "forward_ms": forward_ms, "profile": table}


# ---------------------------------------------------------------------------------------------------- main


def environment(device: str) -> dict:
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version()}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, sms=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1),
                   cuda=torch.version.cuda)
    return env


def table_forward(name, results) -> str:
    lines = [f"\n#### {name}: target forward after {CONTEXT} cached tokens, v(n)/v(1) (v(1) in ms)\n"]
    for kind in ("hf", "loop"):
        widths = list(next(iter(results.values()))[kind])
        lines.append(f"{kind} forward | v(1) ms | " + " | ".join(f"n={w}" for w in widths[1:]))
        lines.append("---|---|" + "---|" * (len(widths) - 1))
        for batch, result in results.items():
            times = result[kind]
            base = times[widths[0]]
            masks = " (4D masks)" if kind == "loop" and result["position_masks"] else ""
            lines.append(f"batch {batch}{masks} | {base:.2f} | " + " | ".join(f"{times[w] / base:.2f}" for w in widths[1:]))
        lines.append("")
    return "\n".join(lines)


def table_loop(name, results) -> str:
    lines = [f"\n#### {name}: ms per step / per token (overhead = step - forward v(1); alpha; tokens per step)\n",
             "batch | variant | ms/step | ms/token | overhead ms (% of forward) | alpha | tok/step | drafted hist",
             "---|---|---|---|---|---|---|---"]
    for batch, result in results.items():
        for variant in VARIANTS:
            if variant not in result:
                continue
            row = result[variant]
            alpha = f"{row['alpha']:.2f}" if "alpha" in row else ""
            tps = f"{row['tokens_per_step']:.2f}" if "tokens_per_step" in row else "1"
            paired = row.get("paired_vs_generate")
            paired = f" (long call / generate()'s: {paired['median']:.3f}, {paired['low']:.3f}-{paired['high']:.3f})" \
                if paired else ""
            lines.append(f"{batch} | {variant} | {row['ms_per_step']:.2f} | {row['ms_per_token']:.2f} | "
                         f"{row['overhead_ms']:+.2f} ({row['overhead_pct']:+.0f} %) | {alpha} | {tps} | "
                         f"{row.get('draft_lengths', '')}{paired}")
        lines.append(f"{batch} | (forward v(1) at ~{CONTEXT} ctx) | {result['forward_ms']:.2f} | | | | |")
        if "default_costs" in result:
            lines.append(f"{batch} | (default policy's measured step costs) | {result['default_costs']} | | | | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--models", default="smol135m,llama1b")
    parser.add_argument("--sections", default="host,forward,sync,loop,exact")
    parser.add_argument("--quick", action="store_true", help="tiny models, few rounds: a smoke run")
    parser.add_argument("--batches", default="1,4", help="batch sizes of the loop timings")
    parser.add_argument("--reps", type=int, default=3, help="rounds of the loop timings")
    parser.add_argument("--long", type=int, default=64, help="new tokens of the long loop-timing call")
    parser.add_argument("--short", type=int, default=16, help="new tokens of the short loop-timing call")
    parser.add_argument("--new-tokens", type=int, default=128, help="new tokens of the default section's calls")
    parser.add_argument("--exact-tokens", type=int, default=48)
    parser.add_argument("--trunc-layers", type=int, default=4, help="layers of the 'trunc' drafter (default section)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="loop section: the variants to time")
    parser.add_argument("--skip", default="", help="default section: labels not to run, e.g. trunc/assisted-4,random/default")
    parser.add_argument("--tail-scale", type=float, default=0.05,
                        help="the default section's target: its layers after --trunc-layers write this share (1: as built)")
    parser.add_argument("--out", default=None, help="folder for costs.json (default: print only)")
    args = parser.parse_args()
    device, sections = args.device, args.sections.split(",")
    quick = args.quick
    results = {"env": environment(device), "args": vars(args)}
    print(json.dumps(results["env"]), flush=True)
    out_path = os.path.join(args.out, "costs.json") if args.out else None
    if args.out:
        os.makedirs(args.out, exist_ok=True)

    def save():
        if out_path:
            with open(out_path, "w") as f:
                json.dump(results, f, indent=1, default=str)

    for name in args.models.split(","):
        shape = TINY if quick else SHAPES[name]
        drafter_shape = {**shape, **(dict(num_hidden_layers=1) if quick else DRAFTER_SHAPES[name])}
        res = results[name] = {}
        target = build(shape, torch.bfloat16, device, seed=0)
        drafter = build(drafter_shape, torch.bfloat16, device, seed=1)
        begin = time.time()
        if "host" in sections:
            res["host"] = host_costs(target, device)
            print(f"\n#### {name}: host: {res['host']['launch_us']:.1f} us per tiny-op launch, {res['host']['sync_us']:.1f} us "
                  f"per synchronize, 1-token forward {res['host']['forward_ms']:.2f} ms\n{res['host']['profile']}", flush=True)
            save()
        if "profile" in sections:
            res["profile"] = {}
            for variant in ("loop-0", "chain-1", "tree-4/4/16"):
                res["profile"][variant] = profile_variant(target, drafter, variant, 1, device, 24)
                print(f"\n#### {name}: cProfile of {variant}, batch 1, 24 new tokens\n{res['profile'][variant]}", flush=True)
            save()
        if "forward" in sections:
            res["forward"] = {b: forward_costs(target, b, device, WIDTHS, 5 if quick else 20, 32 if quick else CONTEXT)
                              for b in (1, 4, 8)}
            print(table_forward(name, res["forward"]), flush=True)
            save()
        if "sync" in sections and device.startswith("cuda"):
            res["sync"] = {f"{variant} b{batch}": count_syncs(target, drafter, variant, batch, device, 32)
                           for batch in (1, 4)
                           for variant in ("generate", "loop-0", "chain-4", "tree-4/4/16", "default")}
            print(f"\n#### {name}: synchronizing CUDA calls per target forward (32 new tokens)\n")
            for key, value in res["sync"].items():
                print(f"- {key}: {value['syncs']} syncs / {value['steps']} forwards = {value['per_step']:.1f} per step")
            for key in ("chain-4 b4", "tree-4/4/16 b4", "loop-0 b1"):
                print(f"\n{key} top sites:")
                for site, n in res["sync"][key]["top"]:
                    print(f"  {n:5d}  {site}")
            save()
        if "loop" in sections:
            res["loop"] = {}
            for batch in map(int, args.batches.split(",")):
                forward_ms = res.get("forward", {}).get(batch, {}).get("hf", {}).get(1) or \
                    forward_costs(target, batch, device, (1,), 10, CONTEXT)["hf"][1]
                res["loop"][batch] = loop_costs(target, drafter, batch, device, 2 if quick else args.reps,
                                                16 if quick else args.long, 4 if quick else args.short, forward_ms,
                                                tuple(args.variants.split(",")))
                save()
            print(table_loop(name, res["loop"]), flush=True)
        if "default" in sections:
            first = 1 if quick else args.trunc_layers
            if args.tail_scale != 1:
                scale_tail(target, first, args.tail_scale)
            drafters = {"trunc": truncated(target, first), "random": drafter}
            res["default"] = {"trunc_layers": first, "tail_scale": args.tail_scale, "batches": {}}
            for batch in map(int, args.batches.split(",")):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    result = default_vs_plain(target, drafters, batch, device, 2 if quick else args.reps,
                                              16 if quick else args.new_tokens,
                                              skip=set(filter(None, args.skip.split(","))))
                # Warnings of generate() during the section, e.g. "Unfeasible length constraints"
                result["warnings"] = dict(Counter(str(w.message)[:120] for w in caught if "synchroniz" not in str(w.message)))
                res["default"]["batches"][batch] = result
                save()
                print(table_default(name, {batch: result}), flush=True)
        if "exact" in sections:
            res["exact"] = {}
            for dtype in (torch.float32, torch.bfloat16):
                t = build(shape, dtype, device, seed=0)
                drafters = {"small": build(drafter_shape, dtype, device, seed=1), "self": t}
                for batch, padded in ((1, False), (4, True)):
                    key = f"{str(dtype)[6:]} b{batch}{' padded' if padded else ''}"
                    res["exact"][key] = exactness(t, drafters, device, batch, padded, 16 if quick else args.exact_tokens,
                                                  ("loop-0", "chain-4", "tree-4/4/16", "default"))
                    verdicts = {k: ("equal" if v["equal"] else f"DIFF {v['first']}") + f" a={v['alpha']}"
                                for k, v in res["exact"][key].items() if k != "sample"}
                    verdicts["row 0 starts"] = res["exact"][key].get("sample")
                    print(f"exact {name} {key}: {verdicts}", flush=True)
                del t, drafters
            save()
        print(f"[{name} done in {time.time() - begin:.0f} s]", flush=True)
        del target, drafter
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    save()


if __name__ == "__main__":
    sys.exit(main())
