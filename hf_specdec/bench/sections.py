"""The benchmark's sections, in run order; each returns `{"rows": [...], "notes": [...]}` or `{"skipped": why}`.

Contract: a section measures only through `Bench` (so shared measurements are timed once);
`SECTIONS[name].new_runs(config)` estimates what it adds, for the progress bar. Sections
whose measurement cannot run (an int8 backend that crashes on the drafter) skip with a note.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

from transformers import GenerationConfig

from hf_specdec.bench.measure import generated_tokens, leviathan_speedup, per_token_alpha
from hf_specdec.bench.prompts import batches
from hf_specdec.bench.runner import Bench, BenchConfig
from hf_specdec.costs import costs_for
from hf_specdec.drafters import resolve_drafter
from hf_specdec.loading import load_drafter
from hf_specdec.policy import CostAwareDraftPolicy, DraftPolicy, HeuristicDraftPolicy, TreeDraftPolicy

Result = dict[str, Any]


def plain(bench: Bench) -> Result:
    """1. Plain target generate() at batch 1."""
    return {"rows": [bench.row(bench.plain(), mode, method="plain") for mode in bench.config.modes]}


def gamma(bench: Bench) -> Result:
    """3. hf_specdec at every gamma of the sweep, batch 1; sets `bench.best_gamma`."""
    rows = []
    for mode in bench.config.modes:
        sweep = [bench.row(bench.specdec(g), mode, method="hf_specdec", gamma=g) for g in bench.config.gammas]
        bench.best_gamma[mode] = max(sweep, key=lambda row: row["tokens_per_s"])["gamma"]
        rows += sweep
    return {"rows": rows, "best_gamma": dict(bench.best_gamma)}


def hf(bench: Bench) -> Result:
    """2. transformers' assisted generation with the same drafter, at its defaults and at our best gamma."""
    defaults = GenerationConfig._get_default_generation_params()
    effective = {}  # what transformers will use: the assistant's own setting, else its global default
    for name in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"):
        value = getattr(bench.drafter.generation_config, name, None)
        effective[name] = defaults.get(name) if value is None else value
    rows = []
    for mode in bench.config.modes:
        best = bench.gamma_for(mode)
        constant = bench.hf_assisted(num_assistant_tokens=best, num_assistant_tokens_schedule="constant")
        ours = bench.row(bench.specdec(best), mode, method="hf_specdec", gamma=best)
        for method, label, gamma_label in (
            (bench.hf_assisted(), "hf_assisted (defaults)", effective["num_assistant_tokens"]),
            (constant, "hf_assisted (constant)", best),
        ):
            row = bench.row(method, mode, method=label, gamma=gamma_label)
            row["ours_vs_this"] = round(ours["tokens_per_s"] / row["tokens_per_s"], 4)
            rows.append(row)
        rows.append(ours)
    notes = [
        "The defaults rows run transformers' assistant defaults (assistant_defaults above); the constant rows set "
        "num_assistant_tokens to the sweep's best gamma and num_assistant_tokens_schedule='constant' on the "
        "assistant's generation_config (where transformers reads them) and keep its assistant_confidence_threshold.",
        "transformers' assisted generation refuses batch > 1, so it appears at batch 1 only.",
    ]
    if getattr(bench.drafter.config, "hf_specdec_vocab_subset", None) is not None:
        notes.append(
            "The drafter has a reduced vocabulary head: hf_specdec scores only its subset, transformers "
            "computes (and samples from) the full head."
        )
    return {"rows": rows, "notes": notes, "assistant_defaults": effective}


def batch(bench: Bench) -> Result:
    """4. hf_specdec at the best gamma against plain generate() at each batch size."""
    rows = []
    for mode in bench.config.modes:
        best = bench.gamma_for(mode)
        for size in bench.config.batch_sizes:
            row = bench.row(bench.specdec(best), mode, size, method="hf_specdec", gamma=best)
            row["plain_tokens_per_s"] = round(bench.run(bench.plain(), mode, size).tokens_per_s, 3)
            rows.append(row)
    return {"rows": rows, "notes": ["Prompts are left-padded within each batch; speedup is over plain generate() "
                                    "at the same batch size. transformers' assisted generation cannot run here."]}


def bound(bench: Bench) -> Result:
    """5. The Leviathan bound from measured alpha and cost ratio, and our speedup as a fraction of it."""
    target_ms = bench.step_cost("target", bench.target)
    drafter_ms = bench.step_cost("drafter", bench.drafter)
    cost_ratio = drafter_ms / target_ms
    verify_ms = {g: bench.step_cost(f"target x{g + 1}", bench.target, g + 1) for g in bench.config.gammas}
    rows = []
    for mode in bench.config.modes:
        for g in bench.config.gammas:
            row = bench.row(bench.specdec(g), mode, method="hf_specdec", gamma=g)
            row["alpha"] = round(per_token_alpha(bench.run(bench.specdec(g), mode).stats, g), 4)
            row["bound"] = round(leviathan_speedup(row["alpha"], g, cost_ratio), 4)
            row["fraction_of_bound"] = round(row["speedup"] / row["bound"], 4)
            row["verify_ratio"] = round(verify_ms[g] / target_ms, 4)
            row["hardware_bound"] = round(leviathan_speedup(row["alpha"], g, cost_ratio, row["verify_ratio"]), 4)
            row["fraction_of_hardware_bound"] = round(row["speedup"] / row["hardware_bound"], 4)
            rows.append(row)
    return {
        "rows": rows,
        "target_step_ms": round(target_ms, 4),
        "drafter_step_ms": round(drafter_ms, 4),
        "cost_ratio": round(cost_ratio, 4),
        "verify_ms": {str(g + 1): round(ms, 4) for g, ms in verify_ms.items()},
        "notes": [
            "bound = (1 - a^(g+1)) / ((1 - a)(g c + 1)); a = alpha, the measured probability that a draft is "
            "accepted after accepted ones (accepted / (accepted + steps with a rejection)), c = drafter step / target "
            "step, each the median of 20 single-token forwards with a warm cache after the first chat prompt "
            f"({len(bench.prompt_ids['chat'][0])} tokens).",
            "hardware bound: the same with the target's step replaced by its measured (g+1)-token verification "
            "forward, v = verify_ratio (Leviathan et al. take v = 1); its fraction separates the loop's own "
            "overhead from what verifying more tokens costs on this machine.",
        ],
    }


def _best_fixed(rows: list[dict[str, Any]], default_row: dict[str, Any]) -> dict[str, Any]:
    """Marks the fastest of the fixed-gamma `rows` (side by side: the highest paired speedup over plain) and
    sets `default_row["vs_best_fixed"]`, the ratio of their speedups; returns it."""
    best = max(rows, key=lambda row: row["speedup"])
    best["method"] += " (fastest)"
    default_row["vs_best_fixed"] = round(default_row["speedup"] / best["speedup"], 4)
    return best


def _decided_with(bench: Bench, drafter, batch_size: int, mode: str) -> dict[str, Any]:
    """The step costs the default policy decided with in a group's calls, as the loop measured them (median ms of
    the plain step and of each chain length it ran; nothing is timed here)."""
    measured = costs_for(bench.target, resolve_drafter(drafter), bench.target.device, batch_size,
                         mode == "sampled").measured()
    steps = {key[2]: ms for key, ms in measured.items() if key[:2] == ("verify", "chain")}
    drafts = {key[2]: ms for key, ms in measured.items() if key[:2] == ("draft", "chain")}
    if not steps:
        return {}
    parts = [f"{width - 1}: {ms + drafts.get(width - 1, 0.0):.1f}" for width, ms in sorted(steps.items())]
    return {"costs_ms": ", ".join(parts)}


def default(bench: Bench) -> Result:
    """6. The cost-aware default (no gamma=) against every fixed gamma of the sweep at batch 1 (the batch-1
    best at larger batches), and with an unrelated drafter (random weights, same vocabulary) against plain
    generate(): each batch size's methods timed side by side with plain generate(), and plain generate()
    again as an A/A control."""
    rows, default_policy = [], CostAwareDraftPolicy()
    for mode in bench.config.modes:
        best = bench.gamma_for(mode)
        for size in sorted(bench.config.batch_sizes):
            gammas = bench.config.gammas if size == 1 else (best,)
            methods = [(bench.specdec(g), {"method": "hf_specdec, fixed gamma", "gamma": g}) for g in gammas]
            methods += [
                (bench.specdec(None), {"method": "hf_specdec, default", "gamma": "default"}),
                (bench.specdec(None, bench.unrelated, "unrelated"),
                 {"method": "hf_specdec, default, unrelated drafter", "gamma": "default"}),
            ]
            control = (bench.plain_again(), {"method": "plain generate(), timed again (A/A control)"})
            *group, again = bench.rows_side_by_side([*methods, control], mode, size)
            for row, drafter in ((group[-2], bench.drafter), (group[-1], bench.unrelated)):
                row.update(_decided_with(bench, drafter, size, mode))
            fastest = _best_fixed(group[:-2], group[-2])
            if size == 1:
                best = fastest["gamma"]
            rows += [*group, again]
    return {
        "rows": rows,
        "notes": [
            "Timed side by side: at each batch size, every prompt batch is generated by plain generate() and each "
            "method in turn (order shuffled per batch, garbage collected before each call), "
            f"{bench.config.repeats} repeat(s)"
            + (f", more where needed for {bench.config.min_pairs} calls per method" if bench.config.min_pairs else "")
            + ". 'vs plain' is paired: the median, "
            "over every batch and repeat, of the ratio of a method's tokens/s to plain's on the same batch in the "
            "same repeat (calls timed next to each other); 'vs best fixed' is the ratio of two such speedups of "
            "one group. 'vs plain, totals' is the ratio of the median totals over repeats, and 'vs plain, one "
            "repeat' the lowest and highest ratio of a single repeat's totals: the noise of this run. '90 % interval' "
            "brackets the paired median without assuming a distribution (the j-th smallest and largest call ratio: "
            "with 8 calls the 2nd, covering 93 %; none below 5 calls): a ratio whose interval holds a goal's bar is "
            "not told apart from the bar by this run. Batch 1 runs every gamma of the sweep; larger batches run batch "
            "1's fastest.",
            f"default = no gamma= (CostAwareDraftPolicy(), max_gamma {default_policy.max_gamma}); it measures step "
            "costs as calls run and remembers them per setting (the warm-up call's steps included).",
            "The A/A control is plain generate() timed again as one more method of the group: its ratio to plain is "
            "1 but for noise, so it shows how far the noise of that group moves a ratio. Every other row of the "
            "group compares with the mean of plain's two calls on the same batch in the same repeat (half the "
            "baseline's per-call noise variance).",
            "The unrelated drafter has the drafter's architecture and vocabulary and fresh random weights: it never "
            "agrees, so these rows show what the default costs when speculation cannot pay.",
            "costs ms = the loop's measured step costs the default decided with, by drafts per step (0: a plain "
            "step): the median of the latest steps of each length in this setting's calls.",
        ],
    }


def feature(bench: Bench) -> Result:
    """7. The feature drafter (EAGLE head): fixed gammas and the default policy at batch 1 (and the
    default at the other batch sizes), per-token alpha, and its step cost against the target's; each
    batch size's methods timed side by side with plain generate()."""
    if bench.feature_drafter is None:
        return {"skipped": "no feature drafter (pass --feature-drafter DIR)."}
    drafter = bench.feature_drafter
    rows = []
    for mode in bench.config.modes:
        for size in sorted(bench.config.batch_sizes):
            gammas = bench.config.feature_gammas if size == 1 else ()
            methods = [(bench.specdec(g, drafter, "feature"), {"method": "feature head", "gamma": g}) for g in gammas]
            methods.append((bench.specdec(None, drafter, "feature"), {"method": "feature head, default", "gamma": "default"}))
            group = bench.rows_side_by_side(methods, mode, size)
            group[-1].update(_decided_with(bench, drafter, size, mode))
            if gammas:
                runs = bench.run_side_by_side([method for method, _ in methods], mode, size)[1:]
                for row, run, g in zip(group, runs, gammas):
                    row["alpha"] = round(per_token_alpha(run.stats, g), 4)
                _best_fixed(group[:-1], group[-1])
            rows += group
    return {
        "rows": rows,
        **_head_step(bench, drafter),
        "notes": [
            "Timed side by side with plain generate() at each batch size, as in the default section.",
            "alpha = per-token acceptance along the decoded path (accepted / (accepted + rejections)) at that gamma.",
            "head / target step: the head's drafting of one token and the loop's plain step, batch 1, greedy, as the "
            "loop measured them in this run's calls.",
            "costs ms of the default rows: as in the default section.",
        ],
    }


def _head_step(bench: Bench, drafter) -> dict[str, float]:
    """The head's drafting step and the plain step at batch 1, greedy, as the loop measured them in this run."""
    measured = costs_for(bench.target, drafter, bench.target.device, 1, False).measured()
    head, plain = measured.get(("draft", "chain", 1)), measured.get(("verify", "chain", 1))
    if head is None or plain is None:
        return {}
    return {"head_step_ms": round(head, 4), "target_step_ms": round(plain, 4), "step_cost_ratio": round(head / plain, 4)}


def _tree_label(gamma) -> str:
    if isinstance(gamma, TreeDraftPolicy):
        return f"tree {gamma.top_k}/{gamma.max_depth}/{gamma.max_nodes}"
    if isinstance(gamma, CostAwareDraftPolicy):
        return "default" if gamma.trees else "default, chains only"
    return f"chain {gamma}"


def trees(bench: Bench) -> Result:
    """8. Draft trees with the feature head: fixed chains, fixed trees, the default (which may run
    trees) and the default held to chains, side by side with plain generate() at each batch size; batch 1 runs
    every chain of `feature_gammas` and every tree of `tree_shapes`, larger batches batch 1's best chain and
    best tree. 'vs best chain' compares tokens per target forward (the tree gain) and speed."""
    if bench.feature_drafter is None:
        return {"skipped": "no feature drafter (pass --feature-drafter DIR)."}
    drafter = bench.feature_drafter
    shapes = [TreeDraftPolicy(top_k=k, max_depth=d, max_nodes=n) for k, d, n in bench.config.tree_shapes]
    defaults = [CostAwareDraftPolicy(), CostAwareDraftPolicy(trees=False)]
    rows = []
    for mode in bench.config.modes:
        best_chain, best_tree = bench.config.feature_gammas[0], shapes[0]
        for size in sorted(bench.config.batch_sizes):
            fixed = [*bench.config.feature_gammas, *shapes] if size == 1 else [best_chain, best_tree]
            methods = [(bench.specdec(g, drafter, "trees"), {"method": _tree_label(g), "gamma": _tree_label(g)})
                       for g in [*fixed, *defaults]]
            group = bench.rows_side_by_side(methods, mode, size)
            chains = [row for row in group if str(row["method"]).startswith("chain")]
            trees_ = [row for row in group if str(row["method"]).startswith("tree")]
            chain = max(chains, key=lambda row: row["speedup"])
            for row in group:
                row["vs_best_chain"] = round(row["speedup"] / chain["speedup"], 4)
                if row.get("tokens_per_step") and chain.get("tokens_per_step"):
                    row["forward_gain"] = round(row["tokens_per_step"] / chain["tokens_per_step"], 4)
            if size == 1:
                best_chain = next(g for g in fixed if _tree_label(g) == chain["method"])
                best_tree = next(g for g in shapes if _tree_label(g) == max(trees_, key=lambda r: r["speedup"])["method"])
            rows += group
    return {
        "rows": rows,
        "notes": [
            "Timed side by side with plain generate() at each batch size, as in the default section.",
            "vs best chain = this row's speedup over the fastest chain's of its group; forward gain = its tokens "
            "per target forward over that chain's (the tree gain).",
            "default = no gamma= (it runs trees where its measured costs say they pay); 'default, chains only' = "
            "CostAwareDraftPolicy(trees=False).",
        ],
    }


def datagen(bench: Bench) -> Result:
    """8. Data generation for distillation: the distill tool's continuous batching (`stream_generate`) against
    transformers' generate() on static left-padded batches, greedy, same prompts and batch size."""
    import time

    from hf_specdec.distill.data import build_prompts, encode_prompt
    from hf_specdec.distill.generation import stream_generate

    size, new_tokens = bench.config.datagen_batch_size, bench.config.max_new_tokens
    prompts = [encode_prompt(bench.tokenizer, p) for p in build_prompts("train")[: 2 * size]]
    rows = []
    start = time.perf_counter()
    generated = sum(len(response) for _, _, response in stream_generate(
        bench.target, prompts, eos_ids=bench.eos_ids, max_new_tokens=new_tokens, batch_size=size))
    seconds = time.perf_counter() - start
    rows.append({"method": "stream_generate (continuous batching)", "batch_size": size, "tokens": generated,
                 "seconds": round(seconds, 2), "tokens_per_s": round(generated / seconds, 2)})
    start, generated = time.perf_counter(), 0
    for inputs in batches(prompts, size, bench.pad_token_id):
        out = bench.target.generate(**inputs, max_new_tokens=new_tokens, do_sample=False, pad_token_id=bench.pad_token_id)
        generated += sum(map(len, generated_tokens(out, inputs["input_ids"].shape[1], bench.eos_ids)))
    seconds = time.perf_counter() - start
    rows.append({"method": "generate() (static batches)", "batch_size": size, "tokens": generated,
                 "seconds": round(seconds, 2), "tokens_per_s": round(generated / seconds, 2)})
    bench._tick()
    return {"rows": rows, "notes": [
        f"{2 * size} of the distill tool's template prompts, greedy, up to {new_tokens} new tokens, batches of {size}; "
        "tokens = generated tokens up to each row's first EOS."
    ]}


def _int8_probe(path: str, quantization: str) -> str | None:
    """Loads the int8 drafter at `path` and runs one forward in a child process; returns why it failed,
    or None. Quantized CPU kernels can segfault on some shapes, which no `except` in this process catches."""
    probe = (
        "import sys, torch; from hf_specdec.loading import load_drafter; "
        "model = load_drafter(sys.argv[1], quantization=sys.argv[2]); "
        "torch.inference_mode()(model)(input_ids=torch.tensor([[1, 2, 3]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, path, quantization], capture_output=True, text=True, timeout=600
    )
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        return f"killed by {signal.Signals(-done.returncode).name}"
    return (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]


def int8(bench: Bench) -> Result:
    """(a) The int8 drafter against the fp32 one: step cost, acceptance and speed at the best gamma."""
    with tempfile.TemporaryDirectory() as scratch:
        path = bench.config.drafter_path
        if path is None:  # an in-memory drafter (the stand-in) goes through the same loader from disk
            bench.drafter.save_pretrained(scratch)
            path = scratch
        # optimum-quanto first, bitsandbytes if quanto's CPU kernel cannot run this drafter's shapes.
        crashes = {}
        for quantization in ("int8", "int8-bnb"):
            crashes[quantization] = _int8_probe(path, quantization)
            if crashes[quantization] is None:
                break
        else:
            return {"skipped": f"every int8 backend crashed in a one-forward probe process ({crashes})."}
        quantized = load_drafter(path, quantization=quantization)
    target_ms = bench.step_cost("target", bench.target)
    rows = []
    for mode in bench.config.modes:
        best = bench.gamma_for(mode)
        for label, model in (("drafter", bench.drafter), ("int8", quantized)):
            cost = bench.step_cost(label, model)
            row = bench.row(bench.specdec(best, model, label), mode, method=f"hf_specdec ({label})", gamma=best)
            row.update(drafter_step_ms=round(cost, 4), cost_ratio=round(cost / target_ms, 4))
            rows.append(row)
    failed = {name: why for name, why in crashes.items() if why is not None}
    return {"rows": rows, "target_step_ms": round(target_ms, 4), "quantization": quantization, "failed": failed}


def policy(bench: Bench) -> Result:
    """(b) Adaptive gamma policies against the best fixed gamma, batch 1."""
    rows = []
    for mode in bench.config.modes:
        best = bench.gamma_for(mode)
        variants = {
            "auto": "auto",
            f"DraftPolicy(max_gamma={best}, min_confidence=0.4)": DraftPolicy(max_gamma=best, min_confidence=0.4),
            "HeuristicDraftPolicy(min_confidence=0)": HeuristicDraftPolicy(min_confidence=0.0),
        }
        fixed = bench.row(bench.specdec(best), mode, method="hf_specdec", gamma=best)
        rows.append(fixed)
        for label, value in variants.items():
            row = bench.row(bench.specdec(value), mode, method="hf_specdec", gamma=label)
            row["vs_best_fixed"] = round(row["tokens_per_s"] / fixed["tokens_per_s"], 4)
            rows.append(row)
    return {"rows": rows, "notes": [f"gamma='auto' is {HeuristicDraftPolicy()!r}."]}


def lookup(bench: Bench) -> Result:
    """(c) Prompt lookup on input-grounded and chat prompts, against plain generate() and transformers'."""
    tokens = bench.config.lookup_tokens
    rows = []
    for prompts in ("grounded", "chat"):
        for mode in bench.config.modes:
            for size in bench.config.lookup_batch_sizes:
                ours = bench.specdec(tokens, "prompt_lookup", "prompt_lookup")
                rows.append(bench.row(ours, mode, size, prompts, method="hf_specdec prompt_lookup", gamma=tokens))
                if size == 1:
                    theirs = bench.hf_prompt_lookup(tokens)
                    rows.append(bench.row(theirs, mode, size, prompts, method="hf prompt_lookup", gamma=tokens))
    return {
        "rows": rows,
        "notes": [
            f"Both implementations draft up to {tokens} tokens per step. 'grounded' prompts summarise, rewrite or "
            "extract from a passage of about 300 tokens; 'chat' prompts are open-ended. transformers' prompt "
            "lookup refuses batch > 1."
        ],
    }


@dataclass(frozen=True)
class Section:
    title: str
    run: Callable[[Bench], Result]
    # New measurements (timings and step costs) it adds after the sections before it: the progress bar's total.
    new_runs: Callable[[BenchConfig], int]


SECTIONS: dict[str, Section] = {
    "plain": Section("Plain generate()", plain, lambda c: len(c.modes)),
    "gamma": Section("Gamma sweep (batch 1)", gamma, lambda c: len(c.modes) * len(c.gammas)),
    "hf": Section("transformers assisted generation (batch 1)", hf, lambda c: 2 * len(c.modes)),
    "batch": Section("Batch sizes", batch, lambda c: 2 * len(c.modes) * len(set(c.batch_sizes) - {1})),
    "bound": Section("Leviathan bound", bound, lambda c: 2 + len(c.gammas)),
    "default": Section(
        "Default policy (no gamma=) and an unrelated drafter", default,
        lambda c: len(c.modes) * len(c.batch_sizes),
    ),
    "feature": Section(
        "Feature drafter (EAGLE head)", feature,
        lambda c: len(c.modes) * len(c.batch_sizes),
    ),
    "trees": Section("Draft trees (feature head)", trees, lambda c: len(c.modes) * len(c.batch_sizes)),
    "int8": Section("int8 drafter", int8, lambda c: 1 + len(c.modes)),
    "datagen": Section("Data generation for distillation (tokens/s)", datagen, lambda c: 1),
    "policy": Section("Adaptive gamma policies (batch 1)", policy, lambda c: 3 * len(c.modes)),
    "lookup": Section(
        "Prompt lookup",
        lookup,
        lambda c: len(c.modes) * (4 * len(c.lookup_batch_sizes) + 2 - (1 in c.lookup_batch_sizes)),
    ),
}
