"""`hf-specdec generate`: prints the target's own greedy completions (from arguments, files, stdin, chats,
int8 models, prompt lookup) and a stats line; bad input exits 2 with a message naming the fix."""

import json
import os
import subprocess
import sys

import pytest

import _tiny
from hf_specdec.cli import main
from hf_specdec.loading import load_model

PROMPTS = ["w5 w6 w7", "w9", "w10 w11 w12 w13", "w20 w21"]
MAX_NEW = 8
ENTRY_POINT = os.path.join(os.path.dirname(sys.executable), "hf-specdec")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, target, partial_drafter):
    root = tmp_path_factory.mktemp("cli")
    tokenizer = _tiny.chat_tokenizer()
    for name, model in (("target", target), ("drafter", partial_drafter)):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return root


def _expected(model, tokenizer, prompt: str, chat: bool = False) -> str:
    """The target's own greedy completion of one prompt, decoded as the CLI decodes it."""
    if chat:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_dict=True, return_tensors="pt")["input_ids"]
    else:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def _args(checkpoints, *extra) -> list[str]:
    return ["generate", "--target", str(checkpoints / "target"), "--drafter", str(checkpoints / "drafter"),
            "--max-new-tokens", str(MAX_NEW), *extra]


def test_entry_point_reads_arguments_file_and_stdin(checkpoints, target, tokenizer, tmp_path):
    prompts_file = tmp_path / "prompts.txt"
    prompts_file.write_text(f"{PROMPTS[1]}\n\n{PROMPTS[2]}\n")  # the empty line is skipped
    result = subprocess.run(
        [ENTRY_POINT, *_args(checkpoints, "--gamma", "3", "--batch-size", "2", "--threads", "1",
                             "--prompts-file", str(prompts_file), PROMPTS[0], "-")],
        input=f"{PROMPTS[3]}\n", capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # Arguments first ('-' where it stands), then the file.
    order = [PROMPTS[0], PROMPTS[3], PROMPTS[1], PROMPTS[2]]
    assert result.stdout.splitlines() == [_expected(target, tokenizer, prompt) for prompt in order]
    stats_line = result.stderr.strip().splitlines()[-1]
    assert stats_line.startswith("alpha=") and f"emitted={len(order) * MAX_NEW}" in stats_line
    assert "MatMul8bitLt" not in result.stderr and "Loading weights" not in result.stderr


def test_python_dash_m_runs_the_same_command_line(checkpoints, target, tokenizer):
    result = subprocess.run(
        [sys.executable, "-m", "hf_specdec", *_args(checkpoints, "--threads", "1", PROMPTS[0])],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [_expected(target, tokenizer, PROMPTS[0])]


def test_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as info:
        main(["generate", "--help"])
    assert info.value.code == 0
    help_text = capsys.readouterr().out
    for option in ("--target", "--drafter", "--gamma", "--sample", "--temperature", "--top-k", "--top-p", "--seed",
                   "--max-new-tokens", "--chat", "--int8", "--int8-backend", "--threads", "--prompts-file",
                   "--batch-size", "--device", "--dtype", "--stream", "--jsonl", "--no-progress",
                   "prompt_lookup", "stdin"):
        assert option in help_text, option


def test_chat_jsonl(checkpoints, target, capsys):
    assert main(_args(checkpoints, "--chat", "--jsonl", *PROMPTS[:2])) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    tokenizer = _tiny.chat_tokenizer()
    assert rows == [{"prompt": p, "completion": _expected(target, tokenizer, p, chat=True)} for p in PROMPTS[:2]]


def test_int8_target_and_drafter(checkpoints, tokenizer, capsys):
    assert main(_args(checkpoints, "--int8", "both", *PROMPTS[:2])) == 0
    quantized = load_model(checkpoints / "target", quantization="int8")
    assert capsys.readouterr().out.splitlines() == [_expected(quantized, tokenizer, p) for p in PROMPTS[:2]]


def test_adaptive_gamma(checkpoints, target, tokenizer, capsys):
    assert main(_args(checkpoints, "--gamma", "auto", *PROMPTS[:2])) == 0
    assert capsys.readouterr().out.splitlines() == [_expected(target, tokenizer, p) for p in PROMPTS[:2]]


def test_prompt_lookup_drafter(checkpoints, target, tokenizer, capsys):
    pytest.importorskip("hf_specdec.drafters.prompt_lookup")
    args = _args(checkpoints, PROMPTS[0])
    args[args.index("--drafter") + 1] = "prompt_lookup"
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == [_expected(target, tokenizer, PROMPTS[0])]


def test_feature_head_directory_as_drafter(checkpoints, target, tokenizer, tmp_path, capsys):
    # The CLI loads --drafter with load_drafter, which reads head directories too (they carry no tokenizer).
    from hf_specdec.distill.feature_head import build_feature_head
    from hf_specdec.eagle import save_feature_head

    save_feature_head(build_feature_head(target, "eagle1"), tmp_path / "head")
    args = _args(checkpoints, "--gamma", "2", *PROMPTS[:2])
    args[args.index("--drafter") + 1] = str(tmp_path / "head")
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [_expected(target, tokenizer, p) for p in PROMPTS[:2]]
    assert "drafter_forwards=0" not in captured.err  # the head drafted


def test_stream_prints_the_same_completions(checkpoints, capsys):
    assert main(_args(checkpoints, *PROMPTS[:2])) == 0
    expected = capsys.readouterr().out
    assert main(_args(checkpoints, "--stream", *PROMPTS[:2])) == 0
    assert capsys.readouterr().out == expected


def test_seeded_sampling_is_reproducible(checkpoints, capsys):
    # With a fixed --gamma: the default's draft lengths follow the step costs it measures (docs/policies.md).
    runs = []
    for _ in range(2):
        assert main(_args(checkpoints, "--sample", "--seed", "7", "--gamma", "3", "--temperature", "1.5", "--top-k", "20",
                          "--max-new-tokens", "16", PROMPTS[0])) == 0
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1] and runs[0].strip()


@pytest.mark.parametrize("role", ["target", "drafter"])
def test_missing_checkpoint_exits_2_naming_the_fix(checkpoints, tmp_path, capsys, role):
    args = _args(checkpoints, PROMPTS[0])
    args[args.index(f"--{role}") + 1] = str(tmp_path / "missing")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{role} '{tmp_path / 'missing'}'" in err and "save_pretrained" in err


@pytest.mark.parametrize("extra, message", [
    ((PROMPTS[0], "--temperature", "0.5"), "add --sample"),
    ((), "no prompt"),
    ((PROMPTS[0], "--gamma", "0"), "--gamma must be at least 1"),
    ((PROMPTS[0], "--stream", "--batch-size", "2"), "drop --batch-size"),
])
def test_usage_errors_name_the_fix(checkpoints, capsys, extra, message):
    with pytest.raises(SystemExit) as info:
        main(_args(checkpoints, *extra))
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_early_exit_drafts_with_the_targets_layers(checkpoints, target, tokenizer, capsys):
    args = _args(checkpoints, "--gamma", "2", *PROMPTS[:2])
    at = args.index("--drafter")
    args[at : at + 2] = ["--early-exit", "1"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [_expected(target, tokenizer, p) for p in PROMPTS[:2]]
    assert "drafter_forwards=0" not in captured.err


def test_drafter_with_another_tokenizer(checkpoints, target, tokenizer, tmp_path, capsys):
    # The target's weights behind a renumbered tokenizer, saved apart: --drafter-tokenizer names it.
    from hf_specdec.bench.other_tokenizer import regathered, renumbered_tokenizer

    other, old_ids = renumbered_tokenizer(_tiny.chat_tokenizer(), rename={"</s>": "<eos>"})
    regathered(target, old_ids, other).save_pretrained(tmp_path / "drafter")
    other.save_pretrained(tmp_path / "tokenizer")
    args = _args(checkpoints, "--gamma", "3", "--drafter-tokenizer", str(tmp_path / "tokenizer"), *PROMPTS[:2])
    args[args.index("--drafter") + 1] = str(tmp_path / "drafter")
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [_expected(target, tokenizer, p) for p in PROMPTS[:2]]
    assert "alpha=1.00" in captured.err  # every translated draft accepted


@pytest.mark.parametrize("drafter, message", [
    (["--early-exit", "0"], "--early-exit must be at least 1"),
    (["--drafter", "prompt_lookup", "--drafter-tokenizer", "x"], "needs a drafter model"),
    (["--early-exit", "1", "--drafter", "prompt_lookup"], "not allowed with argument"),
])
def test_early_exit_and_tokenizer_usage_errors(checkpoints, capsys, drafter, message):
    with pytest.raises(SystemExit) as info:
        main(["generate", "--target", str(checkpoints / "target"), *drafter, PROMPTS[0]])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
