"""Encoder-decoder targets (BART, mBART, Marian, Pegasus, T5, Whisper): greedy fp32 output token-identical to plain
generate() for every drafter kind, the decoder's cache rolled back on rejection, batches exact or refused."""

import pytest
import torch

import hf_specdec
import tiny_models
import tiny_seq2seq
from hf_specdec.cache import CachedModel
from hf_specdec.errors import UnsupportedModelError

MAX_NEW = 24


@pytest.fixture(scope="module", params=tiny_seq2seq.TEXT)
def text_target(request):
    return tiny_seq2seq.text(request.param)


def _text_kwargs(target):
    source, mask = tiny_seq2seq.sources(1, seed=3)
    # T5's tiny random decoder repeats one token; a repetition penalty makes its greedy path vary (and runs a
    # processor that reads the decoder's tokens).
    extra = {"repetition_penalty": 1.5} if target.config.model_type == "t5" else {}
    return dict(input_ids=source, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False, **extra)


def _drafters(target):
    return {
        "encoder-decoder": tiny_models.perturbed(target, scale=0.3),
        "prompt lookup": "prompt_lookup",
    }


@pytest.mark.parametrize("gamma", [3, None])
@pytest.mark.parametrize("kind", ["encoder-decoder", "prompt lookup"])
def test_text_targets_greedy_equal_plain_generate(text_target, kind, gamma):
    kwargs = _text_kwargs(text_target)
    plain = text_target.generate(**kwargs)
    stats = hf_specdec.SpeculativeStats()
    out = text_target.generate(**kwargs, drafter=_drafters(text_target)[kind], gamma=gamma, stats=stats)
    assert torch.equal(out, plain)
    if gamma and kind == "encoder-decoder":  # (the default may find drafting with a same-size drafter does not pay)
        assert stats.target_forwards < MAX_NEW


def test_rejected_drafts_are_rolled_back_from_the_decoder_cache(monkeypatch):
    """A drafter that is right only part of the time: drafts get rejected mid-chain, and the output still equals plain
    generate()'s. The control skips the decoder cache's rollback and must then differ, so this test can fail."""
    target = tiny_seq2seq.text("bart")
    drafter = tiny_models.perturbed(target, scale=0.3)
    kwargs = _text_kwargs(target)
    plain = target.generate(**kwargs)
    stats = hf_specdec.SpeculativeStats()
    assert torch.equal(target.generate(**kwargs, drafter=drafter, gamma=4, stats=stats), plain)
    assert int(stats.accepted.sum()) < int(stats.drafted.sum()), "no draft rejected: rollback would not be exercised"

    rollback = CachedModel.rollback

    def skip_decoder_rollback(self, keep, slack):
        if self.feed is None or self.model is not target:
            return rollback(self, keep, slack)

    monkeypatch.setattr(CachedModel, "rollback", skip_decoder_rollback)
    assert not torch.equal(target.generate(**kwargs, drafter=drafter, gamma=4), plain)


def test_text_batches_are_refused_before_any_forward(text_target):
    """BART-type decoders place tokens by their cache's length (T5's relative bias too): rows that accept different
    numbers of drafts cannot share a cache, so a batch is refused, the model and its generation config unchanged."""
    source, mask = tiny_seq2seq.sources(3, seed=1)
    config_before = text_target.generation_config.to_dict()
    calls = []
    handle = text_target.register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        with pytest.raises(UnsupportedModelError, match="decoder_position_ids"):
            text_target.generate(input_ids=source, attention_mask=mask, max_new_tokens=4, drafter="prompt_lookup")
    finally:
        handle.remove()
    assert not calls
    assert text_target.generation_config.to_dict() == config_before


@pytest.fixture(scope="module")
def whisper():
    return tiny_seq2seq.whisper()


WHISPER_OPTIONS = {
    "default": {},
    "language and task": dict(language="de", task="translate"),
    "timestamps": dict(return_timestamps=True),
}


@pytest.mark.parametrize("options", WHISPER_OPTIONS.values(), ids=WHISPER_OPTIONS.keys())
@pytest.mark.parametrize("kind", ["reads the encoder output", "encoder-decoder", "prompt lookup"])
def test_whisper_through_its_own_generate_equals_plain(whisper, kind, options):
    drafter = {
        "reads the encoder output": lambda: tiny_seq2seq.whisper_reader(whisper, layers=1),
        "encoder-decoder": lambda: tiny_seq2seq.shallow(whisper, layers=1),
        "prompt lookup": lambda: "prompt_lookup",
    }[kind]()
    features = tiny_seq2seq.audio(1, seed=2)
    plain = whisper.generate(features, max_new_tokens=MAX_NEW, **options)
    out = whisper.generate(features, max_new_tokens=MAX_NEW, drafter=drafter, gamma=3, **options)
    assert torch.equal(out, plain)


@pytest.mark.parametrize("gamma", [3, None])
def test_whisper_batches_equal_plain(whisper, gamma):
    """Whisper takes decoder_position_ids, so rows that accept different numbers of drafts stay exact in a batch."""
    features = tiny_seq2seq.audio(4, seed=5)
    drafter = tiny_seq2seq.whisper_reader(whisper, layers=1)
    plain = whisper.generate(features, max_new_tokens=MAX_NEW, language="en")
    out = whisper.generate(features, max_new_tokens=MAX_NEW, language="en", drafter=drafter, gamma=gamma)
    assert torch.equal(out, plain)


def test_prompt_lookup_copies_from_the_source_text():
    """Over an encoder-decoder call's source ids: the decoder's last token found in the source proposes what followed
    it there (summaries and translations copy spans of their source)."""
    from hf_specdec import seq2seq
    from hf_specdec.drafters import DraftContext, PromptLookupDrafter

    target = tiny_seq2seq.text("bart")
    source_ids = torch.tensor([[20, 21, 22, 23, 24, 25, 0, 0]])
    mask = (source_ids != 0).long()
    from transformers.modeling_outputs import BaseModelOutput

    encoded = BaseModelOutput(last_hidden_state=torch.zeros(1, 8, 32))
    source = seq2seq.Source(target, encoded, mask, {"input_ids": source_ids}, source_ids)
    sequences = torch.tensor([[2, 40, 22, 0, 0, 0, 0]])  # the decoder's tokens so far end in 22
    ctx = DraftContext(sequences, torch.zeros(1, dtype=torch.long), torch.tensor([3]), torch.tensor([True]), 96, False,
                       None, lambda scores, lengths, rows: scores)
    with seq2seq._current(source):
        session = PromptLookupDrafter().start(target, 1, torch.device("cpu"))
    draft = session.propose(ctx, torch.tensor([3]))
    assert draft.tokens[0, : int(draft.num_drafted[0])].tolist() == [23, 24, 25]
    assert PromptLookupDrafter().propose(ctx, torch.tensor([3])).num_drafted.tolist() == [0]  # the control: no source
    # A tree (where the decoder takes positions): the same continuation is its first branch.
    tree = session.propose_tree(ctx, hf_specdec.TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=6), torch.tensor([3]))
    assert tree.tokens[0].tolist()[:4] == [22, 23, 24, 25] and tree.parents[0].tolist()[1:4] == [0, 1, 2]
    assert not PromptLookupDrafter().propose_tree(ctx, hf_specdec.TreeDraftPolicy(), torch.tensor([3])).valid[0, 1:].any()


def test_drafters_that_cannot_serve_an_encoder_decoder_target_are_refused_before_any_forward(whisper):
    from transformers import WhisperForCausalLM

    from hf_specdec.errors import VocabMismatchError

    features = tiny_seq2seq.audio(1)
    narrow = tiny_seq2seq.whisper(d_model=16)  # a reader of another width than the target's encoder output
    reader = WhisperForCausalLM(narrow.config)
    reader.generation_config = whisper.generation_config
    calls = []
    handle = whisper.register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        with pytest.raises(UnsupportedModelError, match="width 16"):
            GenerationMixin_generate(whisper, features, drafter=reader)
        bart = tiny_seq2seq.text("bart")
        with pytest.raises(UnsupportedModelError, match="reads input_ids"):
            GenerationMixin_generate(whisper, features, drafter=bart)
    finally:
        handle.remove()
    assert not calls

    target = tiny_seq2seq.text("bart")
    other_vocab = tiny_seq2seq.text("bart", vocab=128)
    source, mask = tiny_seq2seq.sources(1)
    with pytest.raises(VocabMismatchError):
        target.generate(input_ids=source, attention_mask=mask, max_new_tokens=4, drafter=other_vocab)


def GenerationMixin_generate(model, features, **kwargs):
    """GenerationMixin.generate on a Whisper: the loop's checks without Whisper's own generate() around them."""
    from transformers import GenerationMixin

    prefix = [tiny_seq2seq.WHISPER_TOKENS[name] for name in ("sot", "en", "transcribe", "no_timestamps")]
    return GenerationMixin.generate(model, features, decoder_input_ids=torch.tensor([prefix]), max_new_tokens=4,
                                    **kwargs)


def test_an_encoder_decoder_drafter_needs_the_source_when_encoder_outputs_are_given():
    target = tiny_seq2seq.text("bart")
    source, mask = tiny_seq2seq.sources(1)
    encoder_outputs = target.get_encoder()(input_ids=source, attention_mask=mask)
    plain = target.generate(encoder_outputs=encoder_outputs, attention_mask=mask, max_new_tokens=MAX_NEW)
    # A drafter that reads the target's encoder output or none: the given encoder output is all it needs.
    out = target.generate(encoder_outputs=encoder_outputs, attention_mask=mask, max_new_tokens=MAX_NEW,
                          drafter="prompt_lookup", gamma=3)
    assert torch.equal(out, plain)
    calls = []
    handle = target.register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        with pytest.raises(UnsupportedModelError, match="encoder_outputs"):  # the default: before its calibration too
            target.generate(encoder_outputs=encoder_outputs, attention_mask=mask, max_new_tokens=4,
                            drafter=tiny_seq2seq.shallow(target, layers=1))
    finally:
        handle.remove()
    assert not calls


@pytest.fixture(scope="module")
def asr(whisper):
    from transformers import pipeline

    return pipeline("automatic-speech-recognition", model=whisper, tokenizer=tiny_seq2seq.whisper_tokenizer(),
                    feature_extractor=tiny_seq2seq.whisper_feature_extractor())


ASR_CASES = {
    "short": dict(),
    "chunked": dict(chunk_length_s=0.32, ignore_warning=True),
    "chunked with timestamps": dict(chunk_length_s=0.32, ignore_warning=True, return_timestamps=True),
    "chunked in batches": dict(chunk_length_s=0.32, ignore_warning=True, batch_size=3),
}


@pytest.mark.parametrize("options", ASR_CASES.values(), ids=ASR_CASES.keys())
def test_speech_recognition_pipeline_returns_what_it_returns_without_a_drafter(whisper, asr, options):
    """fp32, greedy (num_beams=1: the pipeline's default of 5 beams is refused with drafter=, as beams are)."""
    import numpy as np

    seconds = 0.25 if not options else 1.0  # the chunked cases span 4 windows of 0.32 s
    audio = np.random.default_rng(0).standard_normal(int(16000 * seconds)).astype(np.float32)
    plain = asr(audio, max_new_tokens=12, num_beams=1, **options)
    stats = hf_specdec.SpeculativeStats()
    drafter = tiny_seq2seq.whisper_reader(whisper, layers=1)
    assert asr(audio, max_new_tokens=12, num_beams=1, drafter=drafter, gamma=3, stats=stats, **options) == plain
    assert stats.target_forwards > 0


def test_speech_recognition_pipeline_loads_a_path_drafter_once(whisper, asr, tmp_path, monkeypatch):
    import numpy as np

    from hf_specdec import pipelines

    tiny_seq2seq.whisper_reader(whisper, layers=1).save_pretrained(tmp_path)
    loads = []
    load = pipelines.load_drafter
    monkeypatch.setattr(pipelines, "load_drafter", lambda *args, **kwargs: loads.append(1) or load(*args, **kwargs))
    audio = np.random.default_rng(1).standard_normal(4000).astype(np.float32)
    plain = asr(audio, max_new_tokens=8, num_beams=1)
    for _ in range(2):
        assert asr(audio, max_new_tokens=8, num_beams=1, drafter=str(tmp_path), gamma=3) == plain
    assert len(loads) == 1


TREE = hf_specdec.TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=6)


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("kind", ["reads the encoder output", "encoder-decoder", "prompt lookup"])
def test_whisper_draft_trees_equal_plain(whisper, kind, batch):
    """Whisper's decoder takes decoder_position_ids, so a tree's siblings share a position there: trees are exact, and
    a row's rejected branches leave its decoder cache (the cross-attention cache is the call's, untouched)."""
    drafter = {
        "reads the encoder output": lambda: tiny_seq2seq.whisper_reader(whisper, layers=1),
        "encoder-decoder": lambda: tiny_seq2seq.shallow(whisper, layers=1),
        "prompt lookup": lambda: "prompt_lookup",
    }[kind]()
    features = tiny_seq2seq.audio(batch, seed=5)
    plain = whisper.generate(features, max_new_tokens=MAX_NEW, language="en")
    stats = hf_specdec.SpeculativeStats()
    out = whisper.generate(features, max_new_tokens=MAX_NEW, language="en", drafter=drafter, gamma=TREE, stats=stats)
    assert torch.equal(out, plain)
    if kind != "prompt lookup":  # (lookup drafts only where the output repeats itself)
        assert int(stats.tree_size_histogram[:, 1:].sum()) > 0  # tree steps drafted


def test_whisper_draft_trees_differ_when_the_decoder_is_not_told_the_positions(whisper, monkeypatch):
    """The control of the test above: with decoder_position_ids withheld, Whisper places a tree's nodes by its cache's
    length (siblings one after another), and the output differs from plain generate()'s."""
    from hf_specdec import seq2seq

    inputs = seq2seq.DecoderFeed.inputs
    monkeypatch.setattr(seq2seq.DecoderFeed, "inputs",
                        lambda self, fed: {k: v for k, v in inputs(self, fed).items() if k != "decoder_position_ids"})
    features, drafter = tiny_seq2seq.audio(4, seed=5), tiny_seq2seq.whisper_reader(whisper, layers=1)
    plain = whisper.generate(features, max_new_tokens=MAX_NEW, language="en")
    assert not torch.equal(whisper.generate(features, max_new_tokens=MAX_NEW, language="en", drafter=drafter, gamma=TREE),
                           plain)


def test_draft_trees_are_refused_before_any_forward_where_the_decoder_takes_no_positions(text_target):
    """BART, T5 and the rest place a decoder's tokens by its cache's length: a tree's siblings cannot share a position
    there. An explicit tree is refused before any forward; the default drafts chains."""
    kwargs = _text_kwargs(text_target)
    drafter = tiny_models.perturbed(text_target, scale=0.3)
    calls = []
    handle = text_target.register_forward_pre_hook(lambda *args: calls.append(1))
    try:
        with pytest.raises(UnsupportedModelError, match="decoder_position_ids"):
            text_target.generate(**kwargs, drafter=drafter, gamma=TREE)
    finally:
        handle.remove()
    assert not calls
    stats = hf_specdec.SpeculativeStats()
    assert torch.equal(text_target.generate(**kwargs, drafter=drafter, stats=stats), text_target.generate(**kwargs))
    assert int(stats.tree_size_histogram.sum()) == 0  # chains only


def test_command_line_decodes_with_an_encoder_decoder_target(tmp_path, capsys):
    """`hf-specdec generate --target BART_DIR`: summarization / translation models load with AutoModelForSeq2SeqLM and
    print what plain generate() decodes (the decoder's tokens, not the source)."""
    from hf_specdec.cli import main

    target, tokenizer = tiny_seq2seq.text("bart"), tiny_models.tokenizer()
    for name, model in (("target", target), ("drafter", tiny_seq2seq.shallow(target, layers=1))):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    prompt = "w10 w11 w12 w13 w14 w15"
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    expected = tokenizer.decode(target.generate(ids, max_new_tokens=10, do_sample=False)[0], skip_special_tokens=True)
    for drafter in ("prompt_lookup", str(tmp_path / "drafter")):
        code = main(["generate", "--target", str(tmp_path / "target"), "--drafter", drafter, "--gamma", "3",
                     "--max-new-tokens", "10", "--no-progress", prompt])
        assert code == 0
        assert capsys.readouterr().out.splitlines() == [expected]


def test_threads_sharing_a_target_and_drafter_each_decode_their_own_source(whisper, monkeypatch):
    """The call's source is per thread: threads that share the model and the encoder-decoder drafter each get plain
    generate()'s output, and every decoder fed during a call (target's and drafter's) attends to that call's audio.
    (A tiny random Whisper's tokens hardly depend on the audio, so what the decoders were fed is checked directly.)"""
    import threading

    from hf_specdec import seq2seq
    from test_threads import NUM_THREADS, _run_concurrently

    drafter = tiny_seq2seq.shallow(whisper, layers=1)
    audios = {job: tiny_seq2seq.audio(1, seed=10 + job) for job in range(2 * NUM_THREADS)}
    plain = {job: whisper.generate(audio, language="en", max_new_tokens=MAX_NEW) for job, audio in audios.items()}
    fed = threading.local()  # this thread's decoder feeds: (model, the encoder output it attends to)
    make_feed = seq2seq.DecoderFeed.__init__

    def recording(self, model, source):
        make_feed(self, model, source)
        fed.__dict__.setdefault("feeds", []).append((model, self.outputs.last_hidden_state))

    monkeypatch.setattr(seq2seq.DecoderFeed, "__init__", recording)

    def call(job):
        fed.feeds = []
        out = whisper.generate(audios[job], language="en", max_new_tokens=MAX_NEW, drafter=drafter, gamma=3)
        with torch.no_grad():
            own = {id(model): model.get_encoder()(audios[job]).last_hidden_state for model in (whisper, drafter)}
        assert fed.feeds and all(torch.allclose(hidden, own[id(model)]) for model, hidden in fed.feeds)
        return out

    jobs = [list(range(thread, 2 * NUM_THREADS, NUM_THREADS)) for thread in range(NUM_THREADS)]
    outputs = _run_concurrently(call, jobs)
    assert all(torch.equal(outputs[job], plain[job]) for job in audios)


def test_a_reader_with_more_decoder_layers_than_the_encoder_has():
    """distil-whisper's shape inverted in size: WhisperConfig counts the encoder's layers as num_hidden_layers, so a
    cache sized by the config would have too few layers for the decoder (it crashed mid-call)."""
    target = tiny_seq2seq.whisper(layers=1, decoder_layers=3)
    reader = tiny_seq2seq.whisper_reader(target, layers=2)
    features = tiny_seq2seq.audio(1, seed=6)
    plain = target.generate(features, language="en", max_new_tokens=MAX_NEW)
    assert torch.equal(target.generate(features, language="en", max_new_tokens=MAX_NEW, drafter=reader, gamma=3), plain)


@pytest.mark.parametrize("options", [
    dict(prompt_ids=torch.tensor([12, 13, 14])),
    dict(long_form=True, return_timestamps=True),
    dict(long_form=True, return_timestamps=True, condition_on_prev_tokens=True),
], ids=["prompt_ids", "long-form", "long-form conditioned on the previous segment"])
def test_whisper_prompt_ids_and_long_form_audio_equal_plain(whisper, options):
    """Long-form: 100 frames, more than the tiny Whisper's window of 32, decoded in sequential segments by Whisper's own
    generate(), which calls GenerationMixin.generate per segment (each handing drafter= on)."""
    options = dict(options)
    if options.pop("long_form", False):
        features = torch.randn(1, 8, 100, generator=torch.Generator().manual_seed(0))
        options["attention_mask"] = torch.ones(1, 100, dtype=torch.long)
    else:
        features = tiny_seq2seq.audio(1, seed=8)
    drafter = tiny_seq2seq.whisper_reader(whisper, layers=1)
    plain = whisper.generate(features, language="en", max_new_tokens=10, **options)
    assert torch.equal(whisper.generate(features, language="en", max_new_tokens=10, drafter=drafter, gamma=3, **options),
                       plain)


def test_a_reader_drafts_each_row_of_a_batch_as_it_drafts_that_row_alone():
    """Rows of a batch accept different numbers of drafts, which leaves holes in the reader's cache; the reader is
    told each row's positions (its decoder takes them), so a row's drafts, and what it accepts, do not depend on the
    rows beside it. (Placed by its cache's length, it drafted past the holes and accepted less in batches.)"""
    target = tiny_seq2seq.quiet_late_layers(tiny_seq2seq.whisper(decoder_layers=3), first=1, share=0.3)
    reader = tiny_seq2seq.whisper_reader(target, layers=1)
    features = tiny_seq2seq.audio(4, seed=11)
    kwargs = dict(language="en", max_new_tokens=MAX_NEW, drafter=reader, gamma=3)
    batched = hf_specdec.SpeculativeStats()
    target.generate(features, stats=batched, **kwargs)
    alone = hf_specdec.SpeculativeStats()
    for row in range(4):
        target.generate(features[row : row + 1], stats=alone, **kwargs)
    assert len(set(batched.accepted.tolist())) > 1, "every row accepted alike: no holes to test"
    assert torch.equal(batched.drafted, alone.drafted) and torch.equal(batched.accepted, alone.accepted)


@pytest.mark.parametrize("batch", [1, 3])
def test_cross_attention_keys_and_values_are_computed_once_per_call(batch):
    """The source does not change during a call: each decoder layer's cross-attention projects the encoder output once
    (the target's and the reader's), whatever the drafts, rollbacks and compactions in between."""
    target = tiny_seq2seq.quiet_late_layers(tiny_seq2seq.whisper(decoder_layers=3), first=1, share=0.3)
    reader = tiny_seq2seq.whisper_reader(target, layers=1)
    projections = []
    handles = [layer.encoder_attn.k_proj.register_forward_hook(lambda *args, model=model, i=i: projections.append((model, i)))
               for model in (target, reader) for i, layer in enumerate(model.model.decoder.layers)]
    try:
        stats = hf_specdec.SpeculativeStats()
        target.generate(tiny_seq2seq.audio(batch, seed=12), language="en", max_new_tokens=MAX_NEW, drafter=reader,
                        gamma=3, stats=stats)
    finally:
        for handle in handles:
            handle.remove()
    assert int(stats.drafted.sum()) > int(stats.accepted.sum()) > 0  # drafts accepted and rejected
    assert sorted(projections, key=lambda p: (id(p[0]), p[1])) == sorted(
        [(target, i) for i in range(3)] + [(reader, 0)], key=lambda p: (id(p[0]), p[1]))


@pytest.mark.parametrize("target", ["bart", "whisper"])
def test_return_dict_in_generate_gives_plain_generates_encoder_decoder_output(target, whisper):
    """generate()'s encoder-decoder output type and fields (encoder_* included, None unless asked for, as plain
    generate() leaves them), the same sequences and scores, plus speculative_stats; past_key_values is None, as for
    decoder-only targets (the loop's cache holds rolled-back columns)."""
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    if target == "bart":
        model = tiny_seq2seq.text("bart")
        kwargs, drafter = _text_kwargs(model), tiny_models.perturbed(model, scale=0.3)
    else:
        model, drafter = whisper, tiny_seq2seq.whisper_reader(whisper, layers=1)
        kwargs = dict(input_features=tiny_seq2seq.audio(2, seed=4), language="en", max_new_tokens=MAX_NEW)
    kwargs.update(return_dict_in_generate=True, output_scores=True, output_logits=True)
    plain = model.generate(**kwargs)
    out = model.generate(**kwargs, drafter=drafter, gamma=3)
    assert isinstance(plain, GenerateEncoderDecoderOutput)
    assert isinstance(out, GenerateEncoderDecoderOutput) and isinstance(out, hf_specdec.SpeculativeEncoderDecoderOutput)
    if target == "bart":  # (Whisper's generate() splits the output by row and rebuilds it from the fields it knows)
        assert out.speculative_stats is not None and int(out.speculative_stats.drafted.sum()) > 0
    for name in plain.__dataclass_fields__:
        if name == "past_key_values":
            continue
        mine, theirs = getattr(out, name), getattr(plain, name)
        if name == "sequences":
            assert torch.equal(mine, theirs)
        elif theirs is None:
            assert mine is None, name
        else:
            assert len(mine) == len(theirs) and all(torch.allclose(a, b, atol=1e-4) for a, b in zip(mine, theirs)), name
