"""Every benchmark script under benchmarks/ imports (what it reads from its siblings and the package still exists)
without running: a script that publishes a table must still run when the table is made again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

# One fresh interpreter imports each script in turn and reports {script: error} for those that fail.
PROBE = """
import importlib, json, sys, traceback
sys.path[:0] = sys.argv[1:3]
failed = {}
for name in sys.argv[3:]:
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=2)[-800:]
print(json.dumps(failed))
"""


def test_every_benchmark_script_imports_without_running():
    scripts = sorted(path.stem for path in BENCHMARKS.glob("*.py"))
    assert len(scripts) >= 10
    done = subprocess.run([sys.executable, "-c", PROBE, str(BENCHMARKS), str(BENCHMARKS.parent), *scripts],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {}


def test_the_probe_reports_a_script_that_does_not_import(tmp_path):
    (tmp_path / "broken.py").write_text("from encoder_decoder_speed import machine\n")
    done = subprocess.run([sys.executable, "-c", PROBE, str(BENCHMARKS), str(tmp_path), "broken"],
                          capture_output=True, text=True, timeout=300)
    assert "ImportError" in json.loads(done.stdout.splitlines()[-1])["broken"]
