"""Benchmark of hf_specdec against plain generate() and transformers' assisted generation.

Contract: `run_bench(target, drafter, tokenizer, config)` runs the selected sections (see
`hf_specdec.bench.sections`) on model objects, writes results.json / results.md / PNGs under
`config.out` and returns the results dict; `python -m hf_specdec.bench` does the same for
SmolLM2-135M-Instruct. Never imported by the library path.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from datetime import datetime, timezone

import torch
import transformers
from tqdm.auto import tqdm

import hf_specdec  # noqa: F401  (installs the drafter= keyword)
from hf_specdec import cpu
from hf_specdec.bench import report
from hf_specdec.bench.runner import Bench, BenchConfig
from hf_specdec.bench.sections import SECTIONS


def _git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, timeout=10,
            cwd=os.path.dirname(__file__),
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def run_bench(
    target,
    drafter,
    tokenizer,
    config: BenchConfig,
    target_source: str = "in-memory model",
    drafter_source: str = "in-memory model",
    progress: bool = True,
    feature_drafter=None,
    feature_source: str | None = None,
) -> dict:
    """Runs the sections of `config.sections` (in the order of SECTIONS) and writes the report.

    Args:
        target, drafter: causal LMs sharing `tokenizer`'s vocabulary.
        feature_drafter: a FeatureDrafter for the target (the "feature" section), or None.
        config: what to run; `config.threads` is set for the run and restored after.
        target_source, drafter_source: what the models are, for the report.
        progress: show a tqdm bar of measurements.

    Returns:
        The results dict written to `config.out / "results.json"`.
    """
    unknown = set(config.sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown sections {sorted(unknown)}; choose from {list(SECTIONS)}.")
    names = [name for name in SECTIONS if name in config.sections]
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    started, load_start = time.perf_counter(), _load_average()
    environment = {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "cpu": cpu.describe(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "load_average_start": load_start,
    }
    total = sum(SECTIONS[name].new_runs(config) for name in names)
    sections = {}
    try:
        with tqdm(total=total, desc="hf_specdec bench", unit="run", disable=not progress) as bar:
            bench = Bench(target, drafter, tokenizer, config, progress=bar, feature_drafter=feature_drafter)
            for name in names:
                sections[name] = SECTIONS[name].run(bench)
            bar.total = bar.n  # the estimate may be off when sections run out of their usual order
    finally:
        torch.set_num_threads(previous_threads)
    environment.update(load_average_end=_load_average(), wall_seconds=round(time.perf_counter() - started, 1))
    results = {
        "environment": environment,
        "config": config.to_dict(),
        "models": {
            "target": target_source,
            "target_parameters": sum(p.numel() for p in target.parameters()),
            "drafter": drafter_source,
            "drafter_parameters": sum(p.numel() for p in drafter.parameters()),
            "feature_drafter": feature_source,
        },
        "sections": sections,
    }
    results["goals"] = report.goals(results)
    report.write(results, {name: section.title for name, section in SECTIONS.items()}, config.out)
    return results


__all__ = ["BenchConfig", "run_bench"]
