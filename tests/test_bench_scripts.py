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


def test_the_table_by_prompt_takes_each_batch_over_the_runs(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import default_vs_best as bench
    finally:
        sys.path.remove(str(BENCHMARKS))
    names = ["plain again", "default", *bench.FIXED]
    paths = []
    for run, (first, second) in enumerate(((1.0, 2.0), (4.0, 0.5))):  # batch 0 and batch 1 of each run
        ratios = {name: [first, second] for name in names}
        ratios["tree 4/3/8"] = [2 * first, second]
        row = {"drafter": "head", "dtype": "bfloat16", "mode": "greedy", "batch": 1, "ratios": ratios}
        paths.append(tmp_path / f"run{run}.json")
        paths[-1].write_text(json.dumps({"date": "d", "commit": "c", "machine": "m", "settings": [row]}))
    lines = bench.by_prompt(paths).splitlines()
    assert lines[0] == "c head bfloat16 greedy b1, 2 runs: × plain; default / each"
    rows = [line.split(" | ") for line in lines[3:]]
    assert [row[0] for row in rows] == ["| 0", "| 1"] and len(rows[0]) == 1 + (len(names) - 1) + len(bench.FIXED)
    assert rows[0][1] == "2.000" and rows[1][1] == "1.000"  # the default's: sqrt(1 x 4), sqrt(2 x 0.5)
    assert rows[0][1 + names.index("tree 4/3/8") - 1] == "4.000"
    assert rows[0][-2] == "0.500" and rows[1][-2] == "1.000"  # default / tree 4/3/8


def _replay_data(right: bool, tokens: int = 40) -> dict:
    """A hand-made record: a drafter right at every depth (or never), chains of 6 and the trees of the menu."""
    costs = [["draft", "chain", depth, 2.0 * depth] for depth in range(1, 7)]
    costs += [["verify", "chain", width, 20.0 + width] for width in range(1, 8)]
    costs += [["draft", "tree", depth, 3.0 * depth] for depth in (3, 4, 6)]
    costs += [["verify", "tree", width, 20.0 + width] for width in (9, 17, 33)]
    shapes = {"chain": [[6 if right else 0, [0.9 if right else 0.05] * 6]] * (tokens - 1)}
    for depth, nodes in ((3, 8), (4, 16), (6, 32)):
        outcome = [[[1.0, 1.0, 1.0, 1.0]] * depth, [[1.0 if right else 0.0, 0.0, 0.0, 0.0]] * depth]
        shapes[f"tree 4/{depth}/{nodes}"] = [[depth if right else 0, outcome]] * (tokens - 1)
    prompt = {"tokens": tokens, "prefill_ms": 50.0, "prior": [0.9 if right else 0.0, 16.0], "shapes": shapes}
    return {"costs": costs, "prompts": [prompt, prompt]}


def test_the_replay_drives_the_default_through_recorded_outcomes():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import replay_default as replay
    finally:
        sys.path.remove(str(BENCHMARKS))
    prompt = _replay_data(True)["prompts"][0]
    assert replay._step(prompt, 1, replay.Shape(0, 2, 2)) == (2, 2, [0.9, 0.9])  # a chain of 2 accepts 2 of the 6
    assert replay._step(prompt, 37, replay.Shape(0, 4, 4))[:2] == (2, 2)  # no room past the last token
    assert replay._step(prompt, 1, replay.Shape(0, 6, 6), path_stop=(0.75, ()))[:2] == (3, 3)  # 0.9^3 < 0.75: stops
    assert replay._step(prompt, 1, replay.Shape(0, 6, 6), path_stop=(0.75, (0.5,) * 4 + (0.99,)))[:2] == (6, 6)  # 0.99^6
    right, wrong = replay.replay(_replay_data(True)), replay.replay(_replay_data(False))
    assert right["default"] > right["medians"]["chain 4"] > right["medians"]["chain 1"] > 1.0  # chains of 6
    assert right["shapes"].get("plain", 0) < 10  # drafts from its first priced steps on
    assert wrong["medians"]["chain 1"] < 0.9 < 0.95 < wrong["default"]  # lets the drafter go


def test_the_encoder_decoder_bench_times_its_methods_side_by_side_in_rounds():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import encoder_decoder_speed as bench
    finally:
        sys.path.remove(str(BENCHMARKS))
    calls = []
    methods = {name: (lambda name=name: calls.append(name) or name.upper()) for name in ("plain", "ours", "hf")}
    times, outputs, shares = bench.side_by_side(methods, rounds=8, seed=3)
    assert outputs == {"plain": "PLAIN", "ours": "OURS", "hf": "HF"}
    assert calls[:3] == ["plain", "ours", "hf"]  # the warm-ups, then 8 rounds of each method once
    rounds = [calls[3 + 3 * i: 6 + 3 * i] for i in range(8)]
    assert all(sorted(r) == ["hf", "ours", "plain"] for r in rounds) and len({tuple(r) for r in rounds}) > 1
    assert all(len(values) == 8 for values in (*times.values(), *shares.values()))
    paired = bench.paired({"plain": [2.0] * 6 + [1.0, 9.0], "ours": [1.0] * 8}, "ours")
    assert paired == {"x_plain": 2.0, "x_plain_interval": [2.0, 2.0]}
    assert bench.paired({"plain": [1.0, 2.0], "ours": [1.0, 1.0]}, "ours")["x_plain_interval"] is None
    calls.clear()
    bench.side_by_side(methods, rounds=2, sync=lambda: calls.append("sync"))  # a GPU's queue drained around each call
    assert calls[3:] == [item for name in calls[3:] if name != "sync" for item in ("sync", name, "sync")]
    import torch
    from transformers.modeling_outputs import BaseModelOutput
    call = {"encoder_outputs": BaseModelOutput(last_hidden_state=torch.ones(1, 2, 3)), "decoder_input_ids": torch.ones(1, 1),
            "max_new_tokens": 4}
    moved = bench.on_device(call, torch.device("meta"))
    assert moved["encoder_outputs"].last_hidden_state.is_meta and moved["decoder_input_ids"].is_meta
    assert moved["max_new_tokens"] == 4 and not call["decoder_input_ids"].is_meta


def test_evened_out_rows_advance_by_the_least_lucky_row():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from equal_length_batches import equal_length_steps
    finally:
        sys.path.remove(str(BENCHMARKS))
    import torch

    matches = torch.tensor([[1, 1, 0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0, 1, 1]], dtype=torch.bool)
    # Row 0 alone, 2 drafts a step: commits 3 (2 accepted + the target's), 3, 1, 1; row 1: 1, 3, 2, 3. Together each
    # step commits the fewer: from 0: 1 (row 1 rejects at once), from 1: 2, from 3: 3, from 6: 1, from 7: 1.
    assert equal_length_steps(matches, 2) == (5, [4, 4])
    assert equal_length_steps(matches, 4) == (5, [3, 3])
    assert equal_length_steps(matches[:1], 4) == (3, [3])  # one row: together is alone
    assert equal_length_steps(torch.ones(3, 8, dtype=torch.bool), 3) == (2, [2, 2, 2])
    assert equal_length_steps(torch.zeros(3, 8, dtype=torch.bool), 3) == (8, [8, 8, 8])
