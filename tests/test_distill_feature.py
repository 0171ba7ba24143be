"""`hf-specdec distill --kind feature` on a tiny target: continuous-batching data generation equals plain
generate(), Magpie prompts come from the chat template, and the tool saves a head in the EAGLE-3 layout
that decodes exactly, with per-depth agreement and its step cost measured; reruns resume."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_specdec
import tiny_models
from hf_specdec.cli import main
from hf_specdec.distill.generation import Sampling, magpie_prefix, stream_generate
from test_distill import tiny_target, tiny_tokenizer

CHAT = "{% for m in messages %}<s> {{ m['role'] }} : {{ m['content'] }} </s> {% endfor %}{% if add_generation_prompt %}<s> assistant :{% endif %}"


def test_continuous_batching_gives_each_prompt_what_plain_generate_gives_it():
    target = tiny_models.llama(seed=0)
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 12, (11,), generator=generator).tolist()
    prompts = [torch.randint(3, tiny_models.VOCAB, (n,), generator=generator).tolist() for n in lengths]
    # 11 prompts through 4 rows: rows are refilled while others decode, in shared forwards.
    out = {index: response for index, _, response in stream_generate(
        target, prompts, eos_ids=[tiny_models.EOS], max_new_tokens=20, batch_size=4)}
    for index, prompt in enumerate(prompts):
        expected = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=20)[0, len(prompt) :].tolist()
        if tiny_models.EOS in expected:
            expected = expected[: expected.index(tiny_models.EOS) + 1]
        assert out[index] == expected, index
    assert any(len(response) < 20 for response in out.values())  # some rows finished early and were refilled
    sampled = list(stream_generate(target, prompts, eos_ids=[tiny_models.EOS], max_new_tokens=20, batch_size=4,
                                   sampling=Sampling(0.8, 0.95), generator=torch.Generator().manual_seed(1)))
    assert sorted(index for index, _, _ in sampled) == list(range(11))


def test_magpie_prefix_is_the_chat_template_up_to_the_user_message():
    tokenizer = tiny_models.tokenizer()
    tokenizer.chat_template = (
        "<s> w7 w8 </s> {% for m in messages %}<s> w5 {{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<s> w6{% endif %}"
    )
    assert tokenizer.decode(magpie_prefix(tokenizer)) == "<s> w7 w8 </s> <s> w5"  # its system turn included


def _distill(target_dir, out, *extra):
    return main([
        "distill", "--kind", "feature", "--target", str(target_dir), "--out", str(out), "--num-prompts", "6",
        "--num-magpie", "3", "--num-eval-prompts", "3", "--max-new-tokens", "10", "--gen-batch-size", "4",
        "--vocab-size", "48", "--steps", "6", "--eval-every", "3", "--quiet", *extra,
    ])


def test_distill_feature_saves_an_exact_eagle3_head_and_resumes(tmp_path, capsys):
    target_dir = tmp_path / "target"
    model = tiny_target()
    model.save_pretrained(target_dir)
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(target_dir)
    out = tmp_path / "head"
    assert _distill(target_dir, out) == 0

    weights = __import__("safetensors.torch", fromlist=["load_file"]).load_file(str(out / "model.safetensors"))
    assert {"fc.weight", "midlayer.self_attn.q_proj.weight", "lm_head.weight", "d2t", "t2d"} <= set(weights)
    assert weights["lm_head.weight"].shape[0] == 48 and weights["lm_head.weight"].dtype == torch.bfloat16
    metrics = json.loads((out / "distill_metrics.json").read_text())
    assert len(metrics["per_depth"]) == 4 and metrics["positions"] > 0
    assert [entry["step"] for entry in metrics["history"]] == [3, 6]
    assert 0 < metrics["step_cost_ratio"] and metrics["head_step_ms"] > 0
    data = tmp_path / "head-data"
    corpus = (data / "train.jsonl").read_text().splitlines()
    assert len(json.loads((data / "train.magpie.json").read_text())) == 3
    assert len(corpus) >= 9  # 6 template + 3 magpie prompts, greedy, plus sampled ones

    target = AutoModelForCausalLM.from_pretrained(target_dir)
    prompt = AutoTokenizer.from_pretrained(target_dir)("Write a poem about cats .", return_tensors="pt")
    out_ids = target.generate(**prompt, drafter=str(out), max_new_tokens=12, do_sample=False)
    assert torch.equal(out_ids, target.generate(**prompt, max_new_tokens=12, do_sample=False))

    # A rerun generates no data and computes no features again.
    manifest = (data / "train.jsonl.features" / "manifest.json").read_text()
    assert _distill(target_dir, tmp_path / "head2") == 0
    assert (data / "train.jsonl").read_text().splitlines() == corpus
    assert (data / "train.jsonl.features" / "manifest.json").read_text() == manifest
    capsys.readouterr()


def test_a_trained_head_can_be_trained_further(tmp_path):
    target_dir = tmp_path / "target"
    tiny_target().save_pretrained(target_dir)
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(target_dir)
    assert _distill(target_dir, tmp_path / "first") == 0
    assert _distill(target_dir, tmp_path / "second", "--init-from", str(tmp_path / "first")) == 0
    first = hf_specdec.eagle.load_feature_head(tmp_path / "first")
    second = hf_specdec.eagle.load_feature_head(tmp_path / "second")
    assert torch.equal(first.d2t, second.d2t)  # the vocabulary is kept
    assert not torch.equal(first.fc.weight, second.fc.weight)  # and training went on
