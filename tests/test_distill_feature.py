"""`hf-specdec distill --kind feature` on a tiny target: continuous-batching data generation equals plain
generate(), Magpie prompts come from the chat template, and the tool saves a head in the EAGLE-3 layout
that decodes exactly, with per-depth agreement and its step cost measured; reruns resume."""

from __future__ import annotations

import json

import pytest
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
    # The on-path acceptance at gamma 1 is stored where the default policy starts from it.
    assert json.loads((out / "config.json").read_text())["hf_specdec_acceptance"] == metrics["alpha_gamma1"]
    assert hf_specdec.load_drafter(out).expected_acceptance == metrics["alpha_gamma1"]
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


def _target_dir(tmp_path):
    """The tiny target and its chat tokenizer saved where the CLI can load them."""
    target_dir = tmp_path / "target"
    tiny_target().save_pretrained(target_dir)
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(target_dir)
    return target_dir


def _as_if_trained(head):
    """Moves every weight of `head` a seeded step away from its initialisation (from the target's rows)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for param in head.parameters():
            param.add_(torch.randn_like(param) * 0.1)


def test_a_trained_head_can_be_trained_further(tmp_path):
    target_dir = _target_dir(tmp_path)
    assert _distill(target_dir, tmp_path / "first") == 0
    assert _distill(target_dir, tmp_path / "second", "--init-from", str(tmp_path / "first")) == 0
    first = hf_specdec.eagle.load_feature_head(tmp_path / "first")
    second = hf_specdec.eagle.load_feature_head(tmp_path / "second")
    assert torch.equal(first.d2t, second.d2t)  # the vocabulary is kept
    assert not torch.equal(first.fc.weight, second.fc.weight)  # and training went on


def test_widening_a_heads_vocabulary_keeps_what_it_learned():
    """widen_vocab: the head's own tokens keep their trained rows (so their scores are unchanged), the new ones
    start from the target's LM-head rows, every other weight is the head's; it never shrinks a vocabulary."""
    from hf_specdec.distill.data import Record
    from hf_specdec.distill.feature_head import build_feature_head, widen_vocab

    target = tiny_target()
    head = build_feature_head(target, "eagle3", draft_vocab=list(range(2, 22)))
    _as_if_trained(head)  # rows differ from the target's
    generator = torch.Generator().manual_seed(2)
    records = [Record(ids=[1, 5] + torch.randint(4, 60, (30,), generator=generator).tolist(), prompt_len=2, greedy=True)
               for _ in range(8)]
    wide = widen_vocab(head, target, records, 40, always=[2])

    own, ids = head.draft_ids().tolist(), wide.draft_ids().tolist()
    assert len(ids) == 40 and ids == sorted(ids) and set(own) <= set(ids)
    state = torch.randn(3, target.config.hidden_size)
    columns = [ids.index(token) for token in own]
    assert torch.equal(wide.scores(state)[:, columns], head.scores(state))
    new = [row for row, token in enumerate(ids) if token not in own]
    assert torch.equal(wide.lm_head.weight[new], target.get_output_embeddings().weight[[ids[row] for row in new]])
    kept = {name: value for name, value in head.state_dict().items() if name not in ("lm_head.weight", "d2t")}
    assert all(torch.equal(value, wide.state_dict()[name]) for name, value in kept.items())
    assert widen_vocab(head, target, records, 20) is head
    with pytest.raises(ValueError, match="drop some"):
        widen_vocab(head, target, records, 10)
    with pytest.raises(ValueError, match="whole vocabulary"):
        widen_vocab(build_feature_head(target, "eagle1"), target, records, 40)


def test_narrowing_a_heads_vocabulary_keeps_the_scores_of_the_tokens_it_keeps(tmp_path):
    """narrow_vocab (and distill-narrow --like): the kept tokens keep their trained rows and every other weight, so
    their scores equal the wide head's; a token outside the head's vocabulary is refused."""
    from hf_specdec.distill.feature_head import build_feature_head, narrow_vocab

    target = tiny_target()
    wide = build_feature_head(target, "eagle3", draft_vocab=list(range(2, 42)))
    _as_if_trained(wide)
    keep = [2, 7, 11, 30, 41]
    narrow = narrow_vocab(wide, keep)
    assert narrow.draft_ids().tolist() == keep and narrow.lm_head.weight.shape[0] == len(keep)
    state = torch.randn(3, wide.config.hidden_size, generator=torch.Generator().manual_seed(3))
    columns = [wide.draft_ids().tolist().index(t) for t in keep]
    assert torch.equal(narrow.lm_head.weight, wide.lm_head.weight[columns])  # the same rows: the same scores
    torch.testing.assert_close(narrow.lm_head(state), wide.lm_head(state)[:, columns], rtol=1e-6, atol=1e-6)
    assert all(torch.equal(narrow.state_dict()[k], v) for k, v in wide.state_dict().items() if k not in ("lm_head.weight", "d2t"))
    with pytest.raises(ValueError, match="not in its"):
        narrow_vocab(wide, [2, 50])  # 50 is no draft token of the head
    with pytest.raises(ValueError, match="eagle1"):
        narrow_vocab(build_feature_head(target, "eagle1"), keep)

    wide.config.hf_specdec_acceptance = 0.6  # measured on the wide head: not the narrowed one's
    hf_specdec.eagle.save_feature_head(wide, tmp_path / "wide")
    hf_specdec.eagle.save_feature_head(narrow, tmp_path / "like")
    assert main(["distill-narrow", "--head", str(tmp_path / "wide"), "--like", str(tmp_path / "like"),
                 "--out", str(tmp_path / "out")]) == 0
    assert hf_specdec.eagle.load_feature_head(tmp_path / "out").draft_ids().tolist() == keep
    assert hf_specdec.load_drafter(tmp_path / "wide").expected_acceptance == 0.6
    assert hf_specdec.load_drafter(tmp_path / "out").expected_acceptance is None
    with pytest.raises(SystemExit, match="not in its"):  # the narrow head lacks most of the wide one's tokens
        main(["distill-narrow", "--head", str(tmp_path / "like"), "--like", str(tmp_path / "wide"),
              "--out", str(tmp_path / "refused")])
    assert not (tmp_path / "refused").exists()


def test_a_trained_head_can_continue_over_a_wider_vocabulary(tmp_path):
    target_dir = _target_dir(tmp_path)
    assert _distill(target_dir, tmp_path / "first", "--vocab-size", "24") == 0
    assert _distill(target_dir, tmp_path / "wide", "--init-from", str(tmp_path / "first"), "--vocab-size", "40") == 0
    first = hf_specdec.eagle.load_feature_head(tmp_path / "first")
    wide = hf_specdec.eagle.load_feature_head(tmp_path / "wide")
    assert len(first.draft_ids()) == 24 and len(wide.draft_ids()) == 40
    assert set(first.draft_ids().tolist()) <= set(wide.draft_ids().tolist())
    with pytest.raises(ValueError, match="drop some"):  # refused before any data is made
        _distill(target_dir, tmp_path / "narrow", "--init-from", str(tmp_path / "first"), "--vocab-size", "12")
    assert not (tmp_path / "narrow-data").exists()
