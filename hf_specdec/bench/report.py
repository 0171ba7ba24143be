"""Writing the results: results.json, results.md (one table per section plus the goals) and PNG plots.

Contract: everything here reads the results dict `hf_specdec.bench.run_bench` returns and nothing
else; `goals` derives the benchmark's targets from the section rows; plots use matplotlib's Agg backend.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MODE_COLORS = {"greedy": "tab:blue", "sampled": "tab:orange"}

# Per section, the row keys shown in the markdown table and their headers.
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "plain": [("mode", "mode"), ("tokens", "tokens"), ("seconds", "s"), ("tokens_per_s", "tokens/s")],
    "gamma": [
        ("mode", "mode"), ("gamma", "gamma"), ("acceptance_rate", "acceptance"), ("tokens_per_step", "tokens/step"),
        ("tokens_per_s", "tokens/s"), ("speedup", "vs plain"), ("exact", "= plain greedy"),
    ],
    "hf": [
        ("mode", "mode"), ("method", "method"), ("gamma", "gamma"), ("acceptance_rate", "acceptance"),
        ("tokens_per_s", "tokens/s"), ("speedup", "vs plain"), ("ours_vs_this", "hf_specdec vs this"),
        ("exact", "= plain greedy"),
    ],
    "batch": [
        ("mode", "mode"), ("batch_size", "batch"), ("gamma", "gamma"), ("acceptance_rate", "acceptance"),
        ("plain_tokens_per_s", "plain tokens/s"), ("tokens_per_s", "hf_specdec tokens/s"), ("speedup", "speedup"),
        ("exact", "= plain greedy"),
    ],
    "bound": [
        ("mode", "mode"), ("gamma", "gamma"), ("acceptance_rate", "acceptance"), ("alpha", "alpha"),
        ("speedup", "measured speedup"),
        ("bound", "bound"), ("fraction_of_bound", "fraction of bound"),
        ("verify_ratio", "v"), ("hardware_bound", "bound with v"),
        ("fraction_of_hardware_bound", "fraction of bound with v"),
    ],
    "default": [
        ("mode", "mode"), ("batch_size", "batch"), ("method", "method"), ("gamma", "gamma"),
        ("acceptance_rate", "acceptance"), ("tokens_per_step", "tokens/step"), ("tokens", "tokens"),
        ("tokens_per_s", "tokens/s"), ("speedup", "vs plain"), ("speedup_interval", "vs plain, 90 % interval"),
        ("speedup_of_totals", "vs plain, totals"),
        ("speedup_range", "vs plain, one repeat"), ("vs_best_fixed", "vs best fixed"), ("exact", "= plain greedy"),
        ("costs_ms", "costs ms"),
    ],
    "feature": [
        ("mode", "mode"), ("batch_size", "batch"), ("method", "method"), ("gamma", "gamma"), ("alpha", "alpha"),
        ("acceptance_rate", "acceptance"), ("tokens_per_step", "tokens/step"), ("tokens_per_s", "tokens/s"),
        ("speedup", "vs plain"), ("speedup_interval", "vs plain, 90 % interval"),
        ("speedup_of_totals", "vs plain, totals"), ("speedup_range", "vs plain, one repeat"),
        ("vs_best_fixed", "vs best fixed"), ("exact", "= plain greedy"), ("costs_ms", "costs ms"),
    ],
    "trees": [
        ("mode", "mode"), ("batch_size", "batch"), ("method", "method"), ("acceptance_rate", "acceptance"),
        ("tokens_per_step", "tokens/forward"), ("forward_gain", "forward gain"), ("tokens_per_s", "tokens/s"),
        ("speedup", "vs plain"), ("speedup_interval", "vs plain, 90 % interval"),
        ("speedup_range", "vs plain, one repeat"), ("vs_best_chain", "vs best chain"), ("exact", "= plain greedy"),
    ],
    "datagen": [
        ("method", "method"), ("batch_size", "batch"), ("tokens", "tokens"), ("seconds", "s"), ("tokens_per_s", "tokens/s"),
    ],
    "int8": [
        ("mode", "mode"), ("method", "method"), ("gamma", "gamma"), ("drafter_step_ms", "drafter step ms"),
        ("cost_ratio", "c"), ("acceptance_rate", "acceptance"), ("tokens_per_s", "tokens/s"),
        ("speedup", "vs plain"), ("exact", "= plain greedy"),
    ],
    "policy": [
        ("mode", "mode"), ("gamma", "gamma"), ("acceptance_rate", "acceptance"), ("tokens_per_step", "tokens/step"),
        ("tokens_per_s", "tokens/s"), ("speedup", "vs plain"), ("vs_best_fixed", "vs best fixed"),
        ("exact", "= plain greedy"),
    ],
    "lookup": [
        ("prompts", "prompts"), ("mode", "mode"), ("batch_size", "batch"), ("method", "method"),
        ("acceptance_rate", "acceptance"), ("tokens_per_s", "tokens/s"), ("speedup", "vs plain"),
        ("exact", "= plain greedy"),
    ],
}


def _rows(results: dict, section: str) -> list[dict]:
    return results["sections"].get(section, {}).get("rows", [])


def goals(results: dict) -> list[dict[str, Any]]:
    """The benchmark's targets, per decoding mode, from whichever sections ran."""
    found = []

    def add(goal: str, mode: str, value: float, threshold: float, strict: bool = False, judged: bool = True,
            interval: list[float] | None = None) -> None:
        met = (value > threshold if strict else value >= threshold) if judged else None
        found.append({"goal": goal, "mode": mode, "value": round(value, 3), "threshold": threshold, "met": met})
        if interval is not None:  # a paired median's: the run's noise around `value`
            found[-1]["interval"] = interval

    # Sampled rows of a batch stop at EOS after different, random lengths in each method, while every method
    # runs until its batch's longest row ends: tokens/s then measures which method's draws were longer
    # (the same seconds for 369 tokens in one method and 444 in another were seen), not speed. Such a ratio
    # is reported but not judged; `--ignore-eos` gives every row the same length and is judged.
    def comparable(mode: str, batch_size: int) -> bool:
        return mode == "greedy" or batch_size == 1 or bool(results["config"].get("ignore_eos"))

    best_gamma = results["sections"].get("gamma", {}).get("best_gamma", {})
    for mode in results["config"]["modes"]:
        hf_rows = [r for r in _rows(results, "hf") if r["mode"] == mode]
        theirs = [r["tokens_per_s"] for r in hf_rows if r["method"].startswith("hf_assisted")]
        ours = [r["tokens_per_s"] for r in hf_rows if r["method"] == "hf_specdec"]
        if theirs and ours:
            add(">= 1.3x the faster transformers assisted row, batch 1", mode, ours[0] / max(theirs), 1.3)
        at_best = [
            r for r in _rows(results, "bound") if r["mode"] == mode and r["gamma"] == best_gamma.get(mode)
        ]
        if at_best:
            add(">= 0.9 of the Leviathan bound at the best gamma", mode, at_best[0]["fraction_of_bound"], 0.9)
        batch_rows = sorted((r for r in _rows(results, "batch") if r["mode"] == mode), key=lambda r: r["batch_size"])
        if batch_rows and batch_rows[-1]["batch_size"] > 1:
            largest = batch_rows[-1]
            add(f"> 1x plain at batch {largest['batch_size']}", mode, largest["speedup"], 1.0, strict=True)
        sweep = [r for r in _rows(results, "gamma") if r["mode"] == mode and r["gamma"] == best_gamma.get(mode)]
        if sweep:
            add(">= 1.5x plain at batch 1 (best gamma)", mode, sweep[0]["speedup"], 1.5)
        # The default never loses to plain with a useless drafter, and stays near the best fixed gamma.
        for row in _rows(results, "default"):
            if row["mode"] != mode:
                continue
            judged = comparable(mode, row["batch_size"])
            if row["method"].endswith("unrelated drafter"):
                add(f"default, unrelated drafter: >= 0.97x plain at batch {row['batch_size']}", mode, row["speedup"], 0.97,
                    judged=judged, interval=row.get("speedup_interval"))
            elif row.get("gamma") == "default":
                add(f"default: >= 0.95x the best fixed gamma at batch {row['batch_size']}", mode, row["vs_best_fixed"], 0.95,
                    judged=judged)
        # The feature drafter as a user runs it (the default policy).
        feature_rows = {(r["batch_size"], r["gamma"]): r for r in _rows(results, "feature") if r["mode"] == mode}
        default_b1 = feature_rows.get((1, "default"))
        if default_b1 is not None:
            add("feature head, default, batch 1: x plain", mode, default_b1["speedup"], 1.5 if mode == "greedy" else 1.3,
                interval=default_b1.get("speedup_interval"))
            if theirs:
                add("feature head, default, batch 1: x the faster transformers assisted row (independent drafter)", mode,
                    default_b1["tokens_per_s"] / max(theirs), 1.3)
            sweep_rows = [r for (size, g), r in feature_rows.items() if size == 1 and g != "default"]
            if sweep_rows and mode == "greedy":
                alpha = max(sweep_rows, key=lambda r: r["tokens_per_s"])["alpha"]
                add("feature head: per-token alpha (fastest fixed gamma)", mode, alpha, 0.6)
        largest = max((size for size, g in feature_rows if g == "default"), default=1)
        if mode == "greedy" and largest > 1:
            at_largest = feature_rows[(largest, "default")]
            add(f"feature head, default, batch {largest}: x plain", mode, at_largest["speedup"], 1.2,
                interval=at_largest.get("speedup_interval"))
    ratio = results["sections"].get("feature", {}).get("step_cost_ratio")
    if ratio is not None:
        found.append({"goal": "feature head step / target step <= 0.08", "mode": "-", "value": ratio, "threshold": 0.08,
                      "met": ratio <= 0.08})
    return found


def _cell(row: dict, key: str) -> str:
    if key == "exact":
        if "exact_rows" not in row:
            return "–"
        cell = f"{row['exact_rows']}/{row['num_rows']}"
        return cell + (f" (tie {row['tie_exact_rows']}/{row['num_rows']})" if "tie_exact_rows" in row else "")
    value = row.get(key)
    if value is None:
        return "–"
    if key in ("speedup_range", "speedup_interval", "interval"):  # [lowest, highest]
        return f"{value[0]:.3f}–{value[1]:.3f}"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def _table(rows: list[dict], columns: list[tuple[str, str]]) -> list[str]:
    lines = ["| " + " | ".join(header for _, header in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row, key) for key, _ in columns) + " |" for row in rows]
    return lines


def _met(met: bool | None) -> str:
    return "not judged" if met is None else "yes" if met else "no"


def markdown(results: dict, titles: dict[str, str]) -> str:
    env, config = results["environment"], results["config"]
    lines = [
        "# hf_specdec benchmark",
        "",
        f"Target: {results['models']['target']}, **{config.get('dtype', 'float32')}**. Drafter: "
        f"{results['models']['drafter']}. Feature drafter: {results['models'].get('feature_drafter') or 'none'}.",
        f"{config['num_prompts']} prompts, max_new_tokens={config['max_new_tokens']}, modes: "
        f"{', '.join(config['modes'])}"
        + (f" (sampled: temperature {config['temperature']}, no top-k/top-p)" if "sampled" in config["modes"] else "")
        + f", torch threads: {env['torch_threads']}, repeats: {config['repeats']}"
        + (f" (side by side: at least {config['min_pairs']} calls per method)" if config.get("min_pairs") else "")
        + ".",
        f"CPU: {env.get('cpu', 'not recorded')}. "
        f"torch {env['torch']}, transformers {env['transformers']}, {env['cpu_count']} CPUs, load average "
        f"{env['load_average_start']} at start, {env['load_average_end']} at end; {env['wall_seconds']:.0f} s in all.",
        ("tokens/s = generated tokens (EOS ignored: every row generates max_new_tokens, all counted) / wall time, "
         "after a warm-up call; " if config.get("ignore_eos") else
         "tokens/s = generated tokens (each row up to its first EOS) / wall time, after a warm-up call; ")
        + "'= plain greedy' counts prompts whose greedy output equals plain generate()'s at the same batch size"
        + (f"; in {config.get('dtype')}, '(tie n)' also counts a row whose first different token follows a position "
           "where plain generate()'s own top two logits were within 0.25 (a near-tie that half precision can flip)."
           if config.get("dtype", "float32") != "float32" else "."),
    ]
    if results["goals"]:
        lines += ["", "## Goals", "", "| goal | mode | value | 90 % interval | met |", "|---|---|---|---|---|"]
        lines += [
            f"| {g['goal']} | {g['mode']} | {g['value']:.3f} | {_cell(g, 'interval')} | {_met(g['met'])} |"
            for g in results["goals"]
        ]
        if any(g["met"] is None for g in results["goals"]):
            lines += ["", "- not judged: sampled rows of a batch end at EOS after random lengths that differ between "
                      "methods, so their tokens/s compares the draws' lengths (see the tokens column), not speed; "
                      "a run with --ignore-eos compares like with like."]
    for name, section in results["sections"].items():
        lines += ["", f"## {titles[name]}", ""]
        if "skipped" in section:
            lines.append(f"Skipped: {section['skipped']}")
            continue
        extras = {k: v for k, v in section.items() if k not in ("rows", "notes")}
        if extras:
            lines += [", ".join(f"{k}: {_inline(v)}" for k, v in extras.items()), ""]
        lines += _table(section["rows"], COLUMNS[name])
        if section.get("notes"):
            lines += [""] + [f"- {note}" for note in section["notes"]]
    return "\n".join(lines).rstrip() + "\n"


def plots(results: dict, out: Path) -> list[Path]:
    """acceptance_vs_gamma.png, tokens_per_s_vs_gamma.png, speedup_vs_batch.png (those with data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = results["config"]["modes"]
    written = []

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        written.append(out / name)

    sweep = _rows(results, "gamma")
    if sweep:
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode in modes:
            rows = [r for r in sweep if r["mode"] == mode]
            ax.plot([r["gamma"] for r in rows], [r["acceptance_rate"] for r in rows], "o-", color=MODE_COLORS[mode],
                    label=mode)
        ax.set(xlabel="gamma (drafts per step)", ylabel="acceptance rate (accepted / drafted)", ylim=(0, 1),
               title="Acceptance rate vs gamma (batch 1)", xticks=sorted({r["gamma"] for r in sweep}))
        ax.grid(alpha=0.3)
        ax.legend()
        save(fig, "acceptance_vs_gamma.png")

        fig, ax = plt.subplots(figsize=(8.5, 4))
        plain = {r["mode"]: r["tokens_per_s"] for r in _rows(results, "plain")}
        bound = {(r["mode"], r["gamma"]): r["bound"] for r in _rows(results, "bound")}
        hf_constant = [r for r in _rows(results, "hf") if r["method"] == "hf_assisted (constant)"]
        for mode in modes:
            color = MODE_COLORS[mode]
            rows = [r for r in sweep if r["mode"] == mode]
            gammas = [r["gamma"] for r in rows]
            ax.plot(gammas, [r["tokens_per_s"] for r in rows], "o-", color=color, label=f"hf_specdec, {mode}")
            if mode in plain:
                ax.axhline(plain[mode], color=color, linestyle="--", linewidth=1, label=f"plain generate(), {mode}")
                if all((mode, g) in bound for g in gammas):
                    ax.plot(gammas, [plain[mode] * bound[(mode, g)] for g in gammas], ":", color=color,
                            label=f"plain x Leviathan bound, {mode}")
            for r in (r for r in hf_constant if r["mode"] == mode):
                ax.plot(r["gamma"], r["tokens_per_s"], "x", color=color, markersize=9, markeredgewidth=2,
                        label=f"transformers assisted (constant gamma), {mode}")
        ax.set(xlabel="gamma (drafts per step)", ylabel="tokens/s", title="Throughput vs gamma (batch 1)",
               xticks=sorted({r["gamma"] for r in sweep}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
        save(fig, "tokens_per_s_vs_gamma.png")

    batch_rows = _rows(results, "batch")
    if batch_rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode in modes:
            rows = sorted((r for r in batch_rows if r["mode"] == mode), key=lambda r: r["batch_size"])
            ax.plot([r["batch_size"] for r in rows], [r["speedup"] for r in rows], "o-", color=MODE_COLORS[mode],
                    label=f"{mode} (gamma {rows[0]['gamma']})" if rows else mode)
        ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="plain generate()")
        ax.set(xlabel="batch size", ylabel="speedup over plain generate()", title="Speedup vs batch size")
        ax.set_xticks(sorted({r["batch_size"] for r in batch_rows}))
        ax.set_ylim(0, max(1.25, 1.15 * max(r["speedup"] for r in batch_rows)))
        ax.grid(alpha=0.3)
        ax.legend()
        save(fig, "speedup_vs_batch.png")
    return written


def write(results: dict, titles: dict[str, str], out: Path) -> list[Path]:
    """Writes results.json, results.md and the plots under `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(markdown(results, titles))
    return [out / "results.json", out / "results.md", *plots(results, out)]
