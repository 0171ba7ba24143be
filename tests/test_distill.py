"""Drafter distillation on a tiny in-memory target: the tool saves a loadable drafter, its data is
resumable, the teacher and the head are exact, and the acceptance simulation counts right."""

from __future__ import annotations

import json
import re

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from hf_specdec.distill import build_drafter, distill, head_logits, vocab_subset_of
from hf_specdec.drafters import resolve_drafter
from hf_specdec.distill.model import grow_drafter
from hf_specdec.distill.data import TEMPLATES, TOPICS, Record, read_records
from hf_specdec.distill.evaluate import simulate_acceptance
from hf_specdec.distill.teacher import compute_topk
from hf_specdec.distill.train import train_drafter

VOCAB = 256
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    words = sorted({w for text in TEMPLATES + TOPICS for w in re.findall(r"\w+|[^\w\s]", text)})
    vocab = {tok: i for i, tok in enumerate((SPECIALS + words)[:VOCAB])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def tiny_target(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=3,
    )
    model = LlamaForCausalLM(config).eval()
    # Random layer norm gains, so that tests of the projection see them folded in.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layernorm" in name:
                param.uniform_(0.5, 1.5)
    return model


@pytest.fixture
def target_dir(tmp_path):
    path = tmp_path / "target"
    tiny_target().save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def run_distill(target_dir, out, **overrides):
    args = dict(
        num_prompts=6, num_eval_prompts=2, max_new_tokens=8, gen_batch_size=4, hidden_size=32,
        vocab_size=48, topk=8, steps=3, batch_size=4, progress=False,
    )
    args.update(overrides)
    return distill(target_dir, out, **args)


def test_distill_saves_a_drafter_that_auto_model_loads(target_dir, tmp_path):
    out = tmp_path / "drafter"
    metrics = run_distill(target_dir, out)

    drafter = AutoModelForCausalLM.from_pretrained(out)
    target = AutoModelForCausalLM.from_pretrained(target_dir)
    assert (out / "model.safetensors").is_file()
    assert drafter.get_input_embeddings().weight.dtype == torch.bfloat16
    assert drafter.config.vocab_size == target.config.vocab_size
    assert drafter.config.max_position_embeddings >= target.config.max_position_embeddings
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert getattr(drafter.generation_config, name) == getattr(target.generation_config, name)
    subset = drafter.config.hf_specdec_vocab_subset
    assert isinstance(subset, list) and 0 < len(subset) <= 48 and 2 in subset
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(target_dir).get_vocab()

    ids = torch.tensor([[1, 5, 6, 7]])
    hidden = drafter.float().model(input_ids=ids).last_hidden_state
    logits = head_logits(drafter, hidden)
    assert logits.shape == (1, 4, VOCAB) and torch.isfinite(logits[..., subset]).all()
    assert 0.0 <= metrics["agreement"] <= 1.0 and metrics["drafter_step_ms"] > 0
    assert metrics["train_steps"] == 3
    assert json.loads((out / "distill_metrics.json").read_text())["train_records"] == metrics["train_records"]
    # The on-path acceptance of one draft per step is stored where the default policy starts from it.
    assert drafter.config.hf_specdec_acceptance == metrics["alpha_gamma1"]
    assert 0.0 <= metrics["alpha_gamma1"] <= 1.0
    assert resolve_drafter(AutoModelForCausalLM.from_pretrained(out)).expected_acceptance == metrics["alpha_gamma1"]


def test_second_run_reuses_data_and_generates_only_new_prompts(target_dir, tmp_path):
    data = tmp_path / "corpus" / "train.jsonl"
    run_distill(target_dir, tmp_path / "a", data=data)
    first = data.read_text().splitlines()
    teacher_cache = list(data.parent.glob("train.jsonl.teacher-k8.safetensors"))
    assert first and len(teacher_cache) == 1
    stamp = teacher_cache[0].stat().st_mtime_ns

    run_distill(target_dir, tmp_path / "b", data=data)
    assert data.read_text().splitlines() == first  # nothing regenerated
    assert teacher_cache[0].stat().st_mtime_ns == stamp  # soft labels reused

    run_distill(target_dir, tmp_path / "c", data=data, num_prompts=8)
    grown = data.read_text().splitlines()
    assert grown[: len(first)] == first and len(grown) > len(first)
    keys = [(json.loads(line)["prompt"], json.loads(line)["greedy"]) for line in grown]
    assert len(keys) == len(set(keys))
    assert len(read_records(data)) == len(grown)


def test_drafter_built_from_all_target_layers_at_full_width_reproduces_the_target():
    # hidden_size == target width makes the PCA basis a rotation, so the projection must be exact
    # (the tiny target's final norm gain is uniform; a rotation cannot carry a non-uniform one).
    target = tiny_target()
    drafter = build_drafter(target, hidden_size=64, init_layers=[0, 1])
    ids = torch.tensor([[1, 9, 4, 30, 17, 2]])
    with torch.no_grad():
        torch.testing.assert_close(drafter(input_ids=ids).logits, target(input_ids=ids).logits, atol=1e-4, rtol=1e-4)
        partial = build_drafter(target, hidden_size=64, init_layers=[0])
        assert not torch.allclose(partial(input_ids=ids).logits, target(input_ids=ids).logits, atol=1e-3)


def test_grown_drafter_computes_what_it_did_until_trained():
    drafter = build_drafter(tiny_target(), hidden_size=32, num_layers=1)
    with torch.no_grad():  # a trained-looking layer, so a copy that still wrote would show
        for param in drafter.model.layers[0].parameters():
            param.normal_(0, 0.2)
    ids = torch.tensor([[1, 9, 4, 30, 17, 2]])
    with torch.no_grad():
        before = drafter(input_ids=ids).logits
        grow_drafter(drafter, 3)
        assert len(drafter.model.layers) == drafter.config.num_hidden_layers == 3
        torch.testing.assert_close(drafter(input_ids=ids).logits, before, atol=0, rtol=0)
    losses = train_drafter(drafter, [Record([1, 9, 4, 30, 17, 2], 3, True)] * 4, None, steps=2, batch_size=2,
                           soft_weight=0, hard_weight=1, warmup=1, progress=False)
    assert len(losses) == 2
    with torch.no_grad():  # training moved the new layers' writing projections off zero
        assert drafter.model.layers[2].mlp.down_proj.weight.abs().sum() > 0
        assert not torch.equal(drafter(input_ids=ids).logits, before)


def test_init_from_continues_a_drafter_and_grows_it(target_dir, tmp_path):
    data = tmp_path / "corpus" / "train.jsonl"
    run_distill(target_dir, tmp_path / "a", data=data, num_layers=1)
    first = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    metrics = run_distill(target_dir, tmp_path / "b", data=data, init_from=tmp_path / "a", num_layers=2,
                          hidden_size=64, vocab_size=None)
    second = AutoModelForCausalLM.from_pretrained(tmp_path / "b")
    assert second.config.num_hidden_layers == 2 and second.config.hidden_size == first.config.hidden_size
    assert second.config.hf_specdec_vocab_subset == first.config.hf_specdec_vocab_subset
    assert metrics["config"]["init_from"] == str(tmp_path / "a")
    assert metrics["config"]["hidden_size"] == first.config.hidden_size


def test_head_logits_are_minus_inf_outside_the_subset():
    target = tiny_target()
    subset = [2, 7, 40, 41]
    drafter = build_drafter(target, hidden_size=32, num_layers=1, vocab_subset=subset)
    assert vocab_subset_of(drafter).tolist() == subset
    hidden = torch.randn(3, 32)
    logits = head_logits(drafter, hidden)  # [3, vocab]
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[subset] = False
    assert torch.isinf(logits[:, outside]).all() and torch.isfinite(logits[:, subset]).all()
    full = hidden @ drafter.get_output_embeddings().weight.T
    torch.testing.assert_close(logits[:, subset], full[:, subset])
    assert set(logits.argmax(-1).tolist()) <= set(subset)


def test_teacher_topk_top1_is_the_target_argmax():
    target = tiny_target()
    records = [Record([1, 5, 6, 7, 8, 9], 3, True), Record([1, 4, 4, 2], 2, False)]
    teacher = compute_topk(target, records, k=4, body_dtype=torch.float32, progress=False)
    assert teacher["topk_ids"].shape == (3 + 2, 4)
    expected = []
    for record in records:
        logits = target(input_ids=torch.tensor([record.ids])).logits[0]
        expected += logits[record.prompt_len - 1 : len(record.ids) - 1].argmax(-1).tolist()
    assert teacher["topk_ids"][:, 0].tolist() == expected


def test_training_on_soft_labels_lowers_the_loss():
    target = tiny_target()
    generator = torch.Generator().manual_seed(0)
    records = [Record(torch.randint(4, VOCAB, (24,), generator=generator).tolist(), 4, True) for _ in range(8)]
    teacher = compute_topk(target, records, k=8, body_dtype=torch.float32, progress=False)
    drafter = build_drafter(target, hidden_size=32, num_layers=1)
    losses = train_drafter(drafter, records, teacher, steps=40, batch_size=8, lr=1e-2, warmup=5, progress=False)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


def test_simulated_acceptance_counts_blocks_like_greedy_speculative_decoding():
    # gamma=4: block at 0 accepts 4 (then the bonus token at 4), block at 5 rejects at once,
    # block at 6 drafts the last position and accepts it.
    flags = [torch.tensor([1, 1, 1, 1, 1, 0, 1], dtype=torch.bool)]
    result = simulate_acceptance(flags, gamma=4)
    assert result.agreement == pytest.approx(6 / 7)
    assert result.acceptance_rate == pytest.approx(5 / 7)
    assert result.mean_accepted == pytest.approx(5 / 3)
    assert simulate_acceptance([torch.zeros(5, dtype=torch.bool)], gamma=4).acceptance_rate == 0.0


def test_cli_distill_runs_end_to_end_and_documents_every_option(target_dir, tmp_path, capsys):
    import argparse

    from hf_specdec.distill.cli import add_parser, main

    parser = add_parser(argparse.ArgumentParser().add_subparsers())
    undocumented = [a.dest for a in parser._actions if a.dest != "help" and not a.help]
    assert undocumented == []

    out = tmp_path / "cli-drafter"
    main([
        "distill", "--target", str(target_dir), "--out", str(out), "--num-prompts", "3",
        "--num-eval-prompts", "1", "--max-new-tokens", "4", "--hidden-size", "32", "--vocab-size", "0",
        "--init-layers", "1", "--steps", "2", "--batch-size", "2", "--topk", "4", "--quiet",
    ])
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["train_steps"] == 2 and metrics["config"]["init_layers"] == [1]
    drafter = AutoModelForCausalLM.from_pretrained(out)
    assert drafter.config.num_hidden_layers == 1
    assert getattr(drafter.config, "hf_specdec_vocab_subset", None) is None  # --vocab-size 0: full head
