"""pipeline("text-generation") with drafter=: same tokens as the pipeline without it, for strings, batched
lists, chats, construction-time and path drafters; the pipeline's tokenizer reaches the compatibility check."""

import pytest
import torch
from transformers import pipeline

import hf_specdec
import _tiny
import tiny_models
from hf_specdec import CheckpointNotFoundError

PROMPTS = ["w5 w6 w7", "w9", "w10 w11 w12 w13 w14", "w20 w21", "w30 w31 w32"]
GREEDY = {"max_new_tokens": 12, "do_sample": False, "return_tensors": True}


@pytest.fixture(scope="module")
def pipe(target):
    return pipeline("text-generation", model=target, tokenizer=_tiny.chat_tokenizer())


def _ids(outputs) -> list[list[int]]:
    """Token ids of each pipeline result (a list of {generated_token_ids}, or a list of such lists)."""
    flat = [out[0] if isinstance(out, list) else out for out in outputs]
    return [torch.as_tensor(out["generated_token_ids"]).tolist() for out in flat]


def _num_new_tokens(ids: list[int], prompt: str) -> int:
    """Tokens generated after `prompt` in a row padded to its batch (left before, pad after an EOS)."""
    first = next(i for i, token in enumerate(ids) if token != tiny_models.PAD)
    new = ids[first + len(prompt.split()) :]
    return new.index(tiny_models.EOS) + 1 if tiny_models.EOS in new else len(new)


def test_string_prompt_matches_pipeline_without_drafter(pipe, partial_drafter):
    expected = pipe(PROMPTS[0], **GREEDY)
    got = pipe(PROMPTS[0], drafter=partial_drafter, gamma=4, **GREEDY)
    assert _ids(got) == _ids(expected)
    text = pipe(PROMPTS[0], drafter=partial_drafter, gamma=4, max_new_tokens=12, do_sample=False)
    assert text[0]["generated_text"] == pipe(PROMPTS[0], max_new_tokens=12, do_sample=False)[0]["generated_text"]


def test_list_of_prompts_batched_by_batch_size_accumulates_stats(pipe, partial_drafter):
    expected = pipe(PROMPTS, batch_size=2, **GREEDY)
    stats = hf_specdec.SpeculativeStats()
    got = pipe(PROMPTS, drafter=partial_drafter, gamma=3, stats=stats, batch_size=2, **GREEDY)
    assert _ids(got) == _ids(expected)
    # 3 batches (2 + 2 + 1 rows): merge appends one row per prompt, in order.
    assert stats.emitted.shape == (len(PROMPTS),)
    assert stats.emitted.tolist() == [_num_new_tokens(ids, prompt) for ids, prompt in zip(_ids(got), PROMPTS)]
    assert stats.accepted_histogram.shape == (len(PROMPTS), 4)
    assert 0 < stats.acceptance_rate < 1  # a partial drafter: some drafts accepted, some rejected
    assert stats.target_forwards >= int(stats.steps.max())


def test_chat_messages(pipe, partial_drafter):
    chat = [{"role": "user", "content": "w40 w41 w42"}]
    expected = pipe(chat, max_new_tokens=10, do_sample=False)
    got = pipe(chat, drafter=partial_drafter, gamma=4, max_new_tokens=10, do_sample=False)
    assert got == expected
    assert got[0]["generated_text"][-1]["role"] == "assistant"


def test_drafter_at_construction(target, partial_drafter):
    tokenizer = tiny_models.tokenizer()
    plain = pipeline("text-generation", model=target, tokenizer=tokenizer)
    stats = hf_specdec.SpeculativeStats()
    speculative = pipeline("text-generation", model=target, tokenizer=tokenizer, drafter=partial_drafter, gamma=2)
    assert _ids(speculative(PROMPTS[:2], stats=stats, **GREEDY)) == _ids(plain(PROMPTS[:2], **GREEDY))
    assert stats.emitted.shape == (2,) and int(stats.drafted.sum()) > 0


def test_drafter_as_path_is_loaded_once(pipe, partial_drafter, tmp_path, monkeypatch):
    partial_drafter.save_pretrained(tmp_path / "drafter")
    tiny_models.tokenizer().save_pretrained(tmp_path / "drafter")
    loads = []
    real_load = hf_specdec.pipelines.load_drafter
    monkeypatch.setattr(hf_specdec.pipelines, "load_drafter", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    expected = _ids(pipe(PROMPTS, batch_size=2, **GREEDY))
    for _ in range(2):
        assert _ids(pipe(PROMPTS, drafter=str(tmp_path / "drafter"), batch_size=2, **GREEDY)) == expected
    assert len(loads) == 1


def test_pipeline_tokenizer_reaches_the_translation(pipe, partial_drafter, tmp_path, monkeypatch):
    # A drafter tokenizer whose ids mean other words: its drafts are translated only if the pipeline's own
    # tokenizer reaches generate() as `tokenizer=` (given per call, or saved beside a path drafter).
    other = tiny_models.tokenizer()
    other.backend_tokenizer.add_tokens(["w999"])
    made = []
    real = hf_specdec.dispatch.for_tokenizers
    monkeypatch.setattr(hf_specdec.dispatch, "for_tokenizers", lambda *a: made.append(real(*a)) or made[-1])
    expected = _ids(pipe(PROMPTS[0], max_new_tokens=4, do_sample=False, return_tensors=True))
    got = pipe(PROMPTS[0], drafter=partial_drafter, drafter_tokenizer=other, max_new_tokens=4, do_sample=False,
               return_tensors=True)
    partial_drafter.save_pretrained(tmp_path / "drafter")
    other.save_pretrained(tmp_path / "drafter")
    by_path = pipe(PROMPTS[0], drafter=str(tmp_path / "drafter"), max_new_tokens=4, do_sample=False, return_tensors=True)
    assert _ids(got) == _ids(by_path) == expected
    # (the default policy's own scratch calls pass other drafters)
    assert sum(isinstance(drafter, hf_specdec.TranslatedDrafter) for drafter in made) == 2


def test_missing_drafter_path_names_the_fix(pipe, tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="save_pretrained"):
        pipe(PROMPTS[0], drafter=str(tmp_path / "nowhere"), max_new_tokens=4, do_sample=False)


def test_stop_strings_work_with_the_pipelines_tokenizer(pipe, partial_drafter):
    # The pipeline hands its tokenizer to generate() with drafter=; transformers' own pipeline call needs it given.
    with pytest.raises(ValueError, match="tokenizer"):
        pipe(PROMPTS[2], max_new_tokens=12, do_sample=False, stop_strings=["w7"])
    plain = pipe(PROMPTS, max_new_tokens=12, do_sample=False, stop_strings=["w7"], tokenizer=pipe.tokenizer,
                 return_tensors=True)
    ours = pipe(PROMPTS, max_new_tokens=12, do_sample=False, stop_strings=["w7"], drafter=partial_drafter, gamma=3,
                return_tensors=True)
    assert _ids(ours) == _ids(plain)
    unstopped = pipe(PROMPTS, max_new_tokens=12, do_sample=False, return_tensors=True)
    assert _ids(plain) != _ids(unstopped)  # the stop string really cut a row
