"""The three documented distill stages as commands on a tiny target (docs/distill-at-scale.md): data
(`distill-data`), training with checkpoints and a learning curve (`distill --kind feature --resume`),
held-out evaluation (`distill-eval`), including the refusals that keep the evaluation honest."""

from __future__ import annotations

import json

import pytest

import tiny_models
from hf_specdec.cli import main
from hf_specdec.cpu import computes_bf16
from hf_specdec.errors import HeldOutLeakError
from test_distill_data import chat_tokenizer


@pytest.fixture
def target_dir(tmp_path):
    path = tmp_path / "target"
    tiny_models.llama(seed=0).save_pretrained(path)
    chat_tokenizer().save_pretrained(path)
    return path


def test_data_train_evaluate_commands_run_resume_and_refuse_leaks(target_dir, tmp_path, capsys):
    data, heldout, head = tmp_path / "data.jsonl", tmp_path / "heldout.jsonl", tmp_path / "head"
    common = ["--target", str(target_dir), "--chunk", "5", "--batch-size", "4", "--max-new-tokens", "12",
              "--max-request-tokens", "24", "--template-fraction", "0", "--dtype", "float32", "--quiet"]
    assert main(["distill-data", *common, "--out", str(data), "--items", "20", "--seed", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["kept"] >= 4
    assert main(["distill-data", *common, "--out", str(heldout), "--items", "5", "--seed", "1000", "--requests-only"]) == 0
    lines = [json.loads(line) for line in data.read_text().splitlines()]
    assert len(lines) == 20 and sum("ids" in line for line in lines) >= 4

    train = ["distill", "--kind", "feature", "--target", str(target_dir), "--out", str(head), "--data", str(data),
             "--no-generate", "--eval-set", "heldout", "--num-eval-prompts", "4", "--max-new-tokens", "12",
             "--vocab-size", "48", "--steps", "4", "--eval-every", "2", "--batch-size", "2", "--quiet"]
    live = [*train, "--live-features", "--out", str(tmp_path / "head-live")]
    assert main(live) == 0  # the target's states computed per batch: nothing stored beside the corpus
    assert not data.with_name("data.jsonl.features").exists() and (tmp_path / "head-live" / "model.safetensors").exists()
    assert main(train) == 0
    manifest = json.loads(data.with_name("data.jsonl.features").joinpath("manifest.json").read_text())
    assert manifest["dtype"] == ("bfloat16" if computes_bf16() else "float32")  # --feature-dtype auto
    curve = json.loads((head / "learning_curve.json").read_text())
    assert [point["step"] for point in curve] == [2, 4]
    assert 0 < curve[0]["tokens_seen"] < curve[1]["tokens_seen"]
    assert set(curve[0]) >= {"alpha_gamma1", "per_depth", "coverage", "loss"}
    assert (tmp_path / "head-checkpoint.pt").exists()
    weights = (head / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="--resume"):
        main(train)  # an earlier run's checkpoint is not overwritten silently
    assert main([*train, "--resume"]) == 0  # finished already: resumes at step 4, trains nothing
    assert (head / "model.safetensors").read_bytes() == weights
    capsys.readouterr()

    evaluate = ["distill-eval", "--target", str(target_dir), "--head", str(head), "--max-new-tokens", "12", "--quiet"]
    assert main([*evaluate, "--magpie-requests", str(heldout)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["train_data"] == [str(data)]  # read from the head's distill_metrics.json
    assert metrics["requests"] > 48 and 0 <= metrics["alpha_gamma1"] <= 1 and len(metrics["per_depth"]) == 4
    assert set(metrics["coverage"]) == {"1", "2", "4", "8"} or set(metrics["coverage"]) == {1, 2, 4, 8}
    head_config = json.loads((head / "config.json").read_text())
    assert head_config["hf_specdec_acceptance"] == json.loads((head / "distill_metrics.json").read_text())["alpha_gamma1"]
    assert main([*evaluate, "--write-acceptance"]) == 0  # the held-out figure replaces the training run's own
    written = json.loads(capsys.readouterr().out)["alpha_gamma1"]
    assert json.loads((head / "config.json").read_text()) == {**head_config, "hf_specdec_acceptance": written}
    with pytest.raises(HeldOutLeakError, match="seed"):  # requests made from the training data's seed
        main([*evaluate, "--magpie-requests", str(data)])


def test_every_option_of_the_stage_commands_is_documented():
    import argparse

    from hf_specdec.distill.cli import add_data_parser, add_eval_parser

    for add in (add_data_parser, add_eval_parser):
        parser = add(argparse.ArgumentParser().add_subparsers())
        assert [a.dest for a in parser._actions if a.dest != "help" and not a.help] == []
