"""The data tool's engine seam: `magpie_data` drives any `generation.Engine`; the engine that made a
file is recorded in `<out>.meta.json` and on every line, and a resume with another one is refused. The
llama.cpp engine's numpy sampler draws from HF's temperature -> top-p distribution, and the CLI refuses what
it cannot run before any work. None of this needs llama-cpp-python; the one test that does is skipped
without it (and marked `real`: it runs the SmolLM2 wheel's GGUF)."""

from __future__ import annotations

import argparse
import json
import random
import sys

import numpy as np
import pytest
import torch
from transformers import GenerationConfig, TemperatureLogitsWarper, TopPLogitsWarper

from hf_specdec.distill.cli import add_data_parser
from hf_specdec.distill.llama_engine import pick_tokens, top_p_draw
from hf_specdec.distill.generation import Sampling
from hf_specdec.distill.magpie_data import DataSettings, generate_data
from hf_specdec.errors import EngineBackendError, EngineWeightsError
import tiny_models
from test_distill_data import SETTINGS, chat_tokenizer, make


class FakeEngine:
    """Decodes without a model, one prompt at a time in stream order: a response of random words from the
    row's own generator's seed (or from the prompt, for greedy rows), ended by EOS within half its cap."""

    name = "fake"

    def __init__(self):
        self.generation_config = GenerationConfig(eos_token_id=tiny_models.EOS)
        self.seeds: list[int | None] = []

    def stream(self, prompts, *, eos_ids, max_new_tokens, batch_size, options):
        for index, ids in enumerate(prompts):  # a consumer may extend `prompts` while we yield
            row = options(index)
            seed = row.generator.initial_seed() if row.sampling.temperature > 0 else hash(tuple(ids))
            self.seeds.append(seed)
            rng = random.Random(seed)
            cap = min(row.max_new_tokens, max_new_tokens)
            length = rng.randint(2, max(2, cap // 2))
            response = [rng.randrange(3, tiny_models.VOCAB - 1) for _ in range(length - 1)] + [tiny_models.EOS]
            yield index, list(ids), response


def make_fake(path, items, engine=None):
    return generate_data(None, chat_tokenizer(), path, items, settings=SETTINGS, batch_size=3, progress=False,
                         engine=engine or FakeEngine())


def test_another_engine_decodes_the_job_stream_and_is_recorded_in_the_meta_and_on_every_line(tmp_path):
    engine = FakeEngine()
    path = make_fake(tmp_path / "fake.jsonl", 10, engine)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["item"] for line in lines] == list(range(10)) and {line["engine"] for line in lines} == {"fake"}
    assert json.loads((tmp_path / "fake.jsonl.meta.json").read_text())["engine"] == "fake"
    assert any("ids" in line and line["kind"] not in ("template", "follow-up") for line in lines)  # request, answer
    assert any("ids" in line and line["kind"] == "follow-up" for line in lines)  # two turns through the engine
    assert len(set(engine.seeds)) == len(engine.seeds)  # every job has its own seed
    torch_lines = [json.loads(line) for line in make(tmp_path / "torch.jsonl", 5).read_text().splitlines()]
    assert {line["engine"] for line in torch_lines} == {"torch"}
    assert json.loads((tmp_path / "torch.jsonl.meta.json").read_text())["engine"] == "torch"


def test_a_resumed_file_equals_an_uninterrupted_one_with_another_engine(tmp_path):
    whole = make_fake(tmp_path / "whole.jsonl", 20).read_bytes()
    part = tmp_path / "part.jsonl"
    make_fake(part, 10)
    with open(part, "ab") as f:  # killed while writing the third chunk
        f.write(whole.splitlines(keepends=True)[10] + whole.splitlines(keepends=True)[11][:7])
    assert make_fake(part, 20).read_bytes() == whole


def test_resuming_with_another_engine_is_refused(tmp_path):
    fake = make_fake(tmp_path / "fake.jsonl", 5)
    with pytest.raises(ValueError, match="engine"):
        make(fake, 10)  # the torch engine
    made_by_torch = make(tmp_path / "torch.jsonl", 5)
    with pytest.raises(ValueError, match="engine"):
        make_fake(made_by_torch, 10)
    assert len(fake.read_text().splitlines()) == len(made_by_torch.read_text().splitlines()) == 5


def test_a_file_from_before_engines_were_recorded_resumes_with_torch_only(tmp_path):
    path = make(tmp_path / "old.jsonl", 5)
    meta = tmp_path / "old.jsonl.meta.json"
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "engine"}))
    make(path, 10)
    assert len(path.read_text().splitlines()) == 10
    with pytest.raises(ValueError, match="engine"):
        make_fake(path, 15)


def _hf_probs(logits: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    scores = torch.from_numpy(logits)[None]
    scores = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(temperature)(None, scores))
    return scores.softmax(-1)[0].double().numpy()


@pytest.mark.parametrize("temperature,top_p", [(0.8, 0.95), (1.0, 0.95), (0.5, 0.5), (1.3, 1.0)])
def test_the_numpy_sampler_draws_from_hf_temperature_then_top_p(temperature, top_p):
    # A uniform's [0, 1) is cut into one interval per token: the interval lengths are the probabilities.
    generator = np.random.default_rng(0)
    for peaked in (0.0, 4.0):
        logits = generator.standard_normal(500).astype(np.float32)
        logits[:3] += peaked  # a few likely tokens and a long tail, or a flat distribution
        expected = _hf_probs(logits, temperature, top_p)
        probs = np.exp((logits / np.float32(temperature)) - (logits / np.float32(temperature)).max())
        probs = (probs / probs.sum()).astype(np.float32)
        grid = (np.arange(4000) + 0.5) / 4000
        drawn = np.bincount([top_p_draw(probs, top_p, u) for u in grid], minlength=len(logits)) / len(grid)
        assert set(np.flatnonzero(drawn)) <= set(np.flatnonzero(expected))  # within the same nucleus
        assert np.abs(drawn - expected).max() <= 2 / len(grid)  # an interval's ends each move at most a cell


def test_pick_tokens_takes_the_argmax_for_greedy_rows_and_draws_for_sampled_ones():
    logits = np.random.default_rng(1).standard_normal((4, 50)).astype(np.float32)
    samplings = [Sampling(), Sampling(0.8, 0.95), Sampling(), Sampling(0.8, 0.95)]
    tokens = pick_tokens(logits, samplings, [None, 0.0, None, 0.999999])
    assert tokens[0] == logits[0].argmax() and tokens[2] == logits[2].argmax()
    assert tokens[1] == logits[1].argmax()  # the lowest uniform picks the most probable token
    assert tokens[3] == top_p_draw(_softmax(logits[3] / np.float32(0.8)), 0.95, 0.999999)


def _softmax(x):
    x = np.exp(x - x.max())
    return x / x.sum()


def _data_args(*argv):
    parser = argparse.ArgumentParser()
    add_data_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["distill-data", "--items", "4", *argv])


def test_llama_cpp_without_a_gguf_is_refused_for_a_target_other_than_smollm2(tmp_path):
    args = _data_args("--target", str(tmp_path / "not-a-model"), "--out", str(tmp_path / "d.jsonl"),
                      "--engine", "llama-cpp")
    with pytest.raises(EngineWeightsError, match="--gguf"):
        args.handler(args)
    assert not (tmp_path / "d.jsonl.meta.json").exists()


def test_llama_cpp_not_installed_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    args = _data_args("--target", "smollm2", "--out", str(tmp_path / "d.jsonl"), "--engine", "llama-cpp")
    with pytest.raises(EngineBackendError, match=r"hf_specdec\[llama-cpp\]"):
        args.handler(args)


@pytest.mark.real
def test_llama_cpp_engine_makes_items_and_resumes_them_to_the_byte(tmp_path):
    pytest.importorskip("llama_cpp")
    from hf_specdec.distill.cli import _load_llama_engine

    engine, tokenizer, _ = _load_llama_engine(_data_args("--target", "smollm2", "--out", "x", "--engine", "llama-cpp",
                                                         "--threads", "1"))
    settings = DataSettings(seed=900, chunk=4, max_new_tokens=16, template_fraction=0.25)

    def run(path, items):
        return generate_data(None, tokenizer, path, items, settings=settings, batch_size=3, progress=False,
                             engine=engine)

    whole = run(tmp_path / "whole.jsonl", 8).read_bytes()
    lines = [json.loads(line) for line in whole.decode().splitlines()]
    assert {line["engine"] for line in lines} == {"llama-cpp"} and sum("ids" in line for line in lines) >= 4
    assert {line["greedy"] for line in lines if "ids" in line} == {True, False}
    part = tmp_path / "part.jsonl"
    run(part, 4)
    engine.close()  # a new process: the resumed chunk is decoded in a fresh context, the whole run's in a cleared one
    engine, tokenizer, _ = _load_llama_engine(_data_args("--target", "smollm2", "--out", "x", "--engine", "llama-cpp",
                                                         "--threads", "1"))
    assert run(part, 8).read_bytes() == whole
    # A greedy row decoded with others equals the same prompt decoded alone.
    from hf_specdec.distill.generation import RowOptions
    from hf_specdec.distill.magpie_data import _prompt_ids

    prompts = [_prompt_ids(tokenizer, [{"role": "user", "content": text}])
               for text in ("Name three rivers.", "What is 2 + 2?", "Write a haiku about rain.")]
    greedy = RowOptions(Sampling(), 16)
    together = {i: out for i, _, out in engine.stream(prompts, eos_ids=[2], max_new_tokens=16, batch_size=3,
                                                      options=lambda _: greedy)}
    for i, prompt in enumerate(prompts):
        alone = next(engine.stream([prompt], eos_ids=[2], max_new_tokens=16, batch_size=1, options=lambda _: greedy))
        assert alone[2][:4] == together[i][:4], i  # kernels may round a batch otherwise: the first tokens agree
