"""streamer= with drafter=: tokens arrive as they are accepted, in order, never a rejected draft, and the
streamed text is the returned text."""

import threading

import pytest
import torch
from transformers import TextIteratorStreamer, TextStreamer
from transformers.generation.streamers import BaseStreamer

import hf_specdec
import tiny_models

PROMPT = torch.tensor([[5, 17, 42, 8, 23]])
GAMMA = 4


class RecordingStreamer(BaseStreamer):
    """Keeps every put() (the prompt first, as generate() sends it) and whether end() came."""

    def __init__(self):
        self.puts: list[list[int]] = []
        self.ended = False

    def put(self, value: torch.Tensor) -> None:
        assert not self.ended, "put() after end()"
        self.puts.append(value.reshape(-1).tolist())

    def end(self) -> None:
        self.ended = True


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampling"])
def test_streamed_tokens_are_the_accepted_tokens_in_order(target, partial_drafter, do_sample):
    streamer = RecordingStreamer()
    stats = hf_specdec.SpeculativeStats()
    out = target.generate(
        PROMPT, drafter=partial_drafter, gamma=GAMMA, max_new_tokens=40, do_sample=do_sample, streamer=streamer,
        stats=stats, generator=torch.Generator().manual_seed(0), eos_token_id=None,
    )
    assert streamer.ended
    assert streamer.puts[0] == PROMPT[0].tolist()
    chunks = streamer.puts[1:]
    # Appending chunks rebuilds the output exactly: a rejected draft, once streamed, could never be taken back.
    assert sum(chunks, []) == out[0, PROMPT.shape[1] :].tolist()
    # One chunk per verification step: what that step committed (accepted drafts + the target's token).
    assert len(chunks) == int(stats.steps[0])
    assert all(1 <= len(chunk) <= GAMMA + 1 for chunk in chunks)
    # The drafter was rejected in some steps and accepted in others, so the test saw both.
    histogram = stats.histogram
    assert histogram[:GAMMA].sum() > 0 and histogram[1:].sum() > 0
    assert max(len(chunk) for chunk in chunks) > 1


def test_greedy_stream_matches_target_alone(target, unrelated_drafter):
    # An unrelated drafter is rejected almost every step: the stream is still the target's own output.
    streamer = RecordingStreamer()
    expected = target.generate(PROMPT, max_new_tokens=20, do_sample=False)
    target.generate(
        PROMPT, drafter=unrelated_drafter, gamma=GAMMA, max_new_tokens=20, do_sample=False, streamer=streamer
    )
    assert sum(streamer.puts, []) == expected[0].tolist()


def test_text_streamer_prints_returned_text(target, partial_drafter, tokenizer, capsys):
    out = target.generate(
        PROMPT, drafter=partial_drafter, gamma=GAMMA, max_new_tokens=25, do_sample=False,
        streamer=TextStreamer(tokenizer, skip_prompt=True),
    )
    printed = capsys.readouterr().out
    assert printed.strip() == tokenizer.decode(out[0, PROMPT.shape[1] :]).strip()
    assert printed.strip()


def test_text_iterator_streamer_in_a_thread(target, partial_drafter, tokenizer):
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, timeout=60)
    result = {}

    def run():
        result["out"] = target.generate(
            PROMPT, drafter=partial_drafter, gamma=GAMMA, max_new_tokens=25, do_sample=False, streamer=streamer
        )

    thread = threading.Thread(target=run)
    thread.start()
    pieces = list(streamer)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(pieces) > 1  # text arrived in several pieces, not all at the end
    assert "".join(pieces).strip() == tokenizer.decode(result["out"][0, PROMPT.shape[1] :]).strip()


def test_streamer_with_a_batch_fails_before_decoding(target, partial_drafter):
    streamer = RecordingStreamer()
    input_ids, attention_mask = tiny_models.prompts(batch=2)
    with pytest.raises(hf_specdec.UnsupportedGenerationError, match="batch size 1"):
        target.generate(
            input_ids, attention_mask=attention_mask, drafter=partial_drafter, max_new_tokens=5, streamer=streamer
        )
    assert streamer.puts == []
