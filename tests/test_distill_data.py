"""Magpie data generation: every item is a function of (seed, item), so a run interrupted
anywhere and resumed writes the same file, byte for byte, as one that never stopped; requests come after
the chat template's user prefix; settings that would change the items are refused on resume."""

from __future__ import annotations

import json

import pytest
import torch

from hf_specdec.distill.data import read_records
from hf_specdec.cpu import computes_bf16
from hf_specdec.distill.magpie_data import DataSettings, generate_data, summarize
import tiny_models

# A system turn, then each message behind its role's word; the assistant's opening ends the prompt.
CHAT = ("<s> w7 w8 </s> {% for m in messages %}<s> {{ 'w5' if m['role'] == 'user' else 'w6' }} {{ m['content'] }} "
        "</s> {% endfor %}{% if add_generation_prompt %}<s> w6{% endif %}")


def chat_tokenizer():
    tokenizer = tiny_models.tokenizer()
    tokenizer.chat_template = CHAT
    return tokenizer

SETTINGS = DataSettings(seed=3, chunk=5, max_new_tokens=12, max_request_tokens=16, min_request_chars=1,
                        template_fraction=0.3)


def make(path, items, settings=SETTINGS):
    torch.set_num_threads(1)
    return generate_data(tiny_models.llama(seed=0), chat_tokenizer(), path, items, settings=settings, batch_size=3, progress=False)


def test_resumed_generation_writes_the_same_file_as_an_uninterrupted_run(tmp_path):
    whole = make(tmp_path / "whole.jsonl", 20).read_bytes()
    lines = [json.loads(line) for line in whole.decode().splitlines()]
    assert [line["item"] for line in lines] == list(range(20)) and {line["seed"] for line in lines} == {3}
    kinds = {line["kind"] for line in lines}
    assert "template" in kinds and len(kinds - {"template"}) >= 3
    assert any("ids" in line and line["kind"] != "template" for line in lines)  # requests the target wrote
    summary = summarize(tmp_path / "whole.jsonl")
    assert summary["total"]["kept"] + summary["total"]["skipped"] == 20
    assert summary["total"]["response_tokens"] == sum(len(l["ids"]) - l["prompt_len"] for l in lines if "ids" in l)
    records = read_records(tmp_path / "whole.jsonl")
    assert {r.greedy for r in records} == {True, False} and len(records) == sum("ids" in line for line in lines)

    part = tmp_path / "part.jsonl"
    make(part, 10)  # stopped after two chunks
    # ...then killed while writing the third: one whole line and a torn one.
    with open(part, "ab") as f:
        f.write(whole.splitlines(keepends=True)[10] + whole.splitlines(keepends=True)[11][:7])
    make(part, 20)
    assert part.read_bytes() == whole
    make(part, 20)  # nothing left to do: nothing changes
    assert part.read_bytes() == whole
    # A time budget spent before the first chunk writes nothing; the next sitting goes on from there.
    budget = tmp_path / "budget.jsonl"
    generate_data(tiny_models.llama(seed=0), chat_tokenizer(), budget, 20, settings=SETTINGS, batch_size=3,
                  max_minutes=0, progress=False)
    assert budget.read_bytes() == b""
    assert make(budget, 20).read_bytes() == whole


def test_other_settings_are_refused_on_resume_and_another_seed_makes_other_items(tmp_path):
    path = make(tmp_path / "data.jsonl", 5)
    with pytest.raises(ValueError, match="seed"):
        make(path, 10, DataSettings(**{**SETTINGS.__dict__, "seed": 4}))
    other = make(tmp_path / "other.jsonl", 5, DataSettings(**{**SETTINGS.__dict__, "seed": 4}))
    assert other.read_bytes() != path.read_bytes()


def test_requests_only_writes_magpie_requests_without_answers(tmp_path):
    settings = DataSettings(**{**SETTINGS.__dict__, "requests_only": True, "seed": 1000})
    lines = [json.loads(line) for line in make(tmp_path / "heldout.jsonl", 5, settings).read_text().splitlines()]
    assert all("ids" not in line for line in lines) and any(line.get("prompt") for line in lines)
    assert {line["kind"] for line in lines}.isdisjoint({"template", "follow-up"})


def test_bf16_detection_reads_the_cpu_flags(tmp_path):
    with_bf16, without = tmp_path / "a", tmp_path / "b"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n")
    assert computes_bf16(with_bf16) and not computes_bf16(without)
    assert not computes_bf16(tmp_path / "missing")


def test_items_whose_prompt_would_leak_into_the_held_out_requests_are_skipped(tmp_path):
    # The tiny tokenizer reads every English word as id 0, so a hand-written request is a run of zeros (the
    # shortest, "Why do we have leap years?", 6 of them) and a template prompt of 6 or more words leaks it;
    # the same items are kept when the filter is off.
    kept = DataSettings(**{**SETTINGS.__dict__, "exclude_heldout": False, "template_fraction": 1.0})
    filtered = DataSettings(**{**SETTINGS.__dict__, "template_fraction": 1.0})
    on = [json.loads(line) for line in make(tmp_path / "on.jsonl", 10, filtered).read_text().splitlines()]
    off = [json.loads(line) for line in make(tmp_path / "off.jsonl", 10, kept).read_text().splitlines()]
    leaked = [i for i, line in enumerate(on) if line.get("skipped") == "shares a token run with a held-out request"]
    assert 0 < len(leaked) < 10 and all("ids" in off[i] for i in leaked)
    assert all(len(off[i]["prompt"].split()) >= 6 for i in leaked)
    assert all(len(off[i]["prompt"].split()) < 6 for i in range(10) if i not in leaked)


def test_a_growing_stream_with_per_prompt_options_decodes_each_prompt_as_if_alone():
    from hf_specdec.distill.generation import RowOptions, Sampling, stream_generate

    torch.set_num_threads(1)
    target = tiny_models.llama(seed=0)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, tiny_models.VOCAB, (n,), generator=generator).tolist() for n in (4, 9, 6, 5, 11, 7)]

    def options(index):  # even: greedy, 10 tokens; odd: sampled from the prompt's own generator, 15 tokens
        if index % 2 == 0:
            return RowOptions(Sampling(), 10)
        return RowOptions(Sampling(0.9, 0.95), 15, torch.Generator().manual_seed(100 + index))

    queue = prompts[:3]  # the consumer adds prompt i + 3 when prompt i finishes, as magpie_data does
    stream = _Growing(queue)
    out = {}
    for index, _, response in stream_generate(target, stream, eos_ids=[tiny_models.EOS], max_new_tokens=15,
                                              batch_size=2, options=options):
        out[index] = response
        if index < 3:
            queue.append(prompts[index + 3])
    assert sorted(out) == list(range(6))
    for index, prompt in enumerate(prompts):
        alone = next(stream_generate(target, [prompt], eos_ids=[tiny_models.EOS], max_new_tokens=15, batch_size=1,
                                     options=lambda _: options(index)))[2]
        assert out[index] == alone, index
        if index % 2 == 0:
            expected = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=10)[0, len(prompt) :].tolist()
            expected = expected[: expected.index(tiny_models.EOS) + 1] if tiny_models.EOS in expected else expected
            assert out[index] == expected, index
    greedy_odd = [target.generate(torch.tensor([prompts[i]]), do_sample=False, max_new_tokens=15)[0, len(prompts[i]) :]
                  .tolist() for i in range(1, 6, 2)]
    assert any(out[i][:5] != g[:5] for i, g in zip(range(1, 6, 2), greedy_odd))  # the odd rows really sampled
    assert max(len(out[i]) for i in range(0, 6, 2)) <= 10 < max(len(out[i]) for i in range(1, 6, 2))  # own caps


class _Growing:
    """An iterator over a list that may grow after it has run dry."""

    def __init__(self, items):
        self.items, self.next = items, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.next == len(self.items):
            raise StopIteration
        self.next += 1
        return self.items[self.next - 1]
