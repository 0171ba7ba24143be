"""The data behind the published tables: every row of a `python -m hf_specdec.bench` run, one JSON line each,
tagged with its run (date, commit, machine, torch threads), in benchmarks/data/<table>.jsonl.

A benchmark script runs the bench (`run_bench`), appends the rows of the reports it wrote (`append`), and prints
its table from the file (`load`); earlier runs stay in the file as older rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
#: Environment variables that cap the CPU's instruction set; a run under them names the cap in its machine.
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


def machine_of(environment: dict) -> str:
    caps = [f"{name}={os.environ[name]}" for name in ISA_CAPS if os.environ.get(name)]
    return environment["cpu"] + (f" [{', '.join(caps)}]" if caps else "")


def rows_of(results: Path, machine: str | None = None) -> list[dict]:
    """The rows of one report (`results.json`), each tagged with its run, dtype and section."""
    report = json.loads(results.read_text())
    environment, config = report["environment"], report["config"]
    run = {"started": environment["date_utc"], "date": environment["date_utc"][:10], "commit": environment["git_commit"],
           "machine": machine or machine_of(environment), "threads": environment["torch_threads"]}
    run["run"] = f"{run['date']} {run['commit']} {run['threads']}t" + (" capped" if "[" in run["machine"] else "")
    rows = []
    for section, content in report["sections"].items():
        for row in content.get("rows", []):
            rows.append({**run, "dtype": config["dtype"], "ignore_eos": config.get("ignore_eos", False),
                         "section": section, **row})
    return rows


def append(table: str, rows: list[dict]) -> None:
    DATA.mkdir(exist_ok=True)
    with open(DATA / f"{table}.jsonl", "a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, sort_keys=True) + "\n")


def load(table: str) -> list[dict]:
    path = DATA / f"{table}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def run_bench(arguments: list[str], out: Path, cpus: str | None = None) -> Path:
    """Runs `python -m hf_specdec.bench ARGUMENTS --out OUT` (on the cores `cpus`, at raised priority where
    allowed) and returns the report it wrote."""
    command = [sys.executable, "-m", "hf_specdec.bench", *arguments, "--no-progress", "--out", str(out)]
    if cpus:
        command = ["taskset", "-c", cpus, *command]
    if os.geteuid() == 0:  # raised priority, so other processes disturb the timings less
        command = ["nice", "-n", "-15", *command]
    subprocess.run(command, check=True)
    return out / "results.json"


if __name__ == "__main__":  # python benchmarks/bench_data.py TABLE REPORT_DIR...: append those reports' rows
    rows = [row for folder in sys.argv[2:] for row in rows_of(Path(folder) / "results.json")]
    append(sys.argv[1], rows)
    print(f"{len(rows)} rows appended to {DATA / sys.argv[1]}.jsonl")
