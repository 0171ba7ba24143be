"""Every incompatibility is a typed error raised before decoding, and changes nothing."""

import copy

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import hf_specdec
import tiny_models
from hf_specdec import errors


def _ids():
    return tiny_models.prompts(1, seed=0)[0]


def _snapshot(model):
    return copy.deepcopy(model.generation_config.to_dict()), {k: v.clone() for k, v in model.state_dict().items()}


def assert_unchanged(model, snapshot):
    config, weights = snapshot
    assert model.generation_config.to_dict() == config
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def _raises(error, target, drafter, **kwargs):
    snapshot = _snapshot(target), _snapshot(drafter) if hasattr(drafter, "generation_config") else None
    forwards = []
    hook = target.register_forward_hook(lambda *a: forwards.append(1))
    try:
        with pytest.raises(error) as info:
            target.generate(**{"inputs": _ids(), **kwargs}, max_new_tokens=5, drafter=drafter)
    finally:
        hook.remove()
    assert not forwards, "the target ran before the error"
    assert_unchanged(target, snapshot[0])
    if snapshot[1] is not None:
        assert_unchanged(drafter, snapshot[1])
    return str(info.value)


@pytest.mark.parametrize("gamma", [0, -1, 1.5, True, "4"])
def test_gamma_must_be_a_positive_int(target, gamma):
    message = _raises(errors.InvalidGammaError, target, target, gamma=gamma)
    assert "positive int" in message
    assert isinstance(errors.InvalidGammaError(), ValueError)


def test_different_vocabulary_without_tokenizer(target):
    drafter = tiny_models.llama(seed=1, vocab=120)
    message = _raises(errors.VocabMismatchError, target, drafter)
    assert "96" in message and "120" in message and "tokenizer=" in message


def test_padded_head_is_accepted_with_the_tokenizer(target, tokenizer):
    # Same tokenizer (96 ids), drafter head padded to 128 columns: verified on the shared 96.
    drafter = tiny_models.llama(seed=0, vocab=128)
    with torch.no_grad():
        drafter.lm_head.weight[:96] = target.lm_head.weight
        drafter.model.embed_tokens.weight[:96] = target.model.embed_tokens.weight
        for name, param in target.named_parameters():
            if "lm_head" not in name and "embed_tokens" not in name:
                drafter.get_parameter(name).copy_(param)
    ids = _ids()
    out = target.generate(ids, max_new_tokens=12, do_sample=False, drafter=drafter, tokenizer=tokenizer)
    assert torch.equal(out, target.generate(ids, max_new_tokens=12, do_sample=False))


def test_tokenizer_larger_than_a_head_is_rejected(target):
    drafter = tiny_models.llama(seed=1, vocab=128)
    small = tiny_models.tokenizer(vocab=110)
    message = _raises(errors.VocabMismatchError, target, drafter, tokenizer=small)
    assert "110" in message


def test_special_tokens_must_agree(target):
    drafter = tiny_models.llama(seed=1)
    drafter.generation_config.eos_token_id = 7
    message = _raises(errors.SpecialTokenMismatchError, target, drafter)
    assert "eos_token_id" in message and "7" in message


def _translated(target, tokenizer, drafter_tokenizer):
    """(output, plain output, acceptance, drafter type used) of the target drafting itself behind `drafter_tokenizer`."""
    used = []
    real = hf_specdec.dispatch.for_tokenizers
    hf_specdec.dispatch.for_tokenizers = lambda *a: used.append(real(*a)) or used[-1]
    try:
        stats = hf_specdec.SpeculativeStats()
        out = target.generate(_ids(), max_new_tokens=12, do_sample=False, drafter=target, gamma=3, stats=stats,
                              tokenizer=tokenizer, drafter_tokenizer=drafter_tokenizer)
    finally:
        hf_specdec.dispatch.for_tokenizers = real
    return out, target.generate(_ids(), max_new_tokens=12, do_sample=False), stats.acceptance_rate, type(used[0])


def test_differing_tokenizer_maps_are_translated(target, tokenizer):
    # Same size and class, two ids swapped: a different vocabulary map, so drafts go through text (once refused).
    words = dict(tokenizer.get_vocab())
    words["w3"], words["w4"] = 4, 3
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    swapped = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    out, plain, _, kind = _translated(target, tokenizer, swapped)
    assert torch.equal(out, plain) and kind is hf_specdec.TranslatedDrafter


def test_differing_tokenizer_classes_are_translated(target, tokenizer):
    from transformers import GPT2TokenizerFast

    other = GPT2TokenizerFast(tokenizer_object=tokenizer.backend_tokenizer)
    out, plain, acceptance, kind = _translated(target, tokenizer, other)
    assert torch.equal(out, plain) and kind is hf_specdec.TranslatedDrafter and acceptance == 1.0


def test_drafter_context_too_short(target):
    drafter = tiny_models.llama(seed=1, max_positions=16)
    message = _raises(errors.MaxLengthError, target, drafter)
    assert "16" in message


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(num_beams=2), errors.UnsupportedGenerationError),
        (dict(output_attentions=True, return_dict_in_generate=True), errors.UnsupportedGenerationError),
        (dict(output_hidden_states=True, return_dict_in_generate=True), errors.UnsupportedGenerationError),
        (dict(prompt_lookup_num_tokens=3), errors.UnsupportedGenerationError),
        (dict(guidance_scale=1.5), errors.UnsupportedGenerationError),
        # Modes plain generate() runs from hub repositories; without the check the loop decoded greedily.
        (dict(penalty_alpha=0.6, top_k=4), errors.UnsupportedGenerationError),
        (dict(dola_layers="low"), errors.UnsupportedGenerationError),
    ],
)
def test_unsupported_generation_options(target, kwargs, error):
    message = _raises(error, target, target, **kwargs)
    assert "drafter" in message


def test_assistant_model_with_drafter(target, unrelated_drafter):
    message = _raises(errors.UnsupportedGenerationError, target, target, assistant_model=unrelated_drafter)
    assert "assistant_model" in message


def test_encoder_decoder_drafter_of_a_decoder_only_target_is_rejected(target):
    """(Encoder-decoder targets are tests/test_seq2seq.py's.) A drafter with an encoder has no input for it here."""
    from transformers import T5Config, T5ForConditionalGeneration

    t5 = T5ForConditionalGeneration(T5Config(vocab_size=96, d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16))
    with pytest.raises(errors.UnsupportedModelError, match="has an encoder"):
        target.generate(_ids(), max_new_tokens=3, drafter=t5)


def test_right_padding_is_rejected(target):
    ids = torch.tensor([[5, 6, 7], [5, 6, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    message = _raises(errors.InvalidInputError, target, target, inputs=ids, attention_mask=mask)
    assert "padding_side = 'left'" in message
    assert issubclass(errors.InvalidInputError, ValueError)


def test_prompt_embeddings_are_refused(target, partial_drafter):
    # With inputs_embeds alone generate() hands the loop an empty input_ids: it decoded as if from no prompt.
    ids = _ids()
    embeds = target.get_input_embeddings()(ids).detach()
    for kwargs in (dict(inputs=None, inputs_embeds=embeds), dict(inputs=ids, inputs_embeds=embeds)):
        message = _raises(errors.UnsupportedGenerationError, target, partial_drafter, **kwargs)
        assert "input_ids" in message


def test_position_ids_of_the_callers_own_are_refused_and_generates_own_pass():
    # A model with learned positions decodes differently from shifted positions; the loop counted its own and
    # ignored them (the same tokens as without them: silently not what plain generate() returns).
    model = tiny_models.gpt2(seed=0)
    drafter = tiny_models.perturbed(model, scale=0.1)
    ids, mask = tiny_models.prompts(2, seed=4)
    default = (mask.cumsum(-1) - 1).clamp_min(0)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=10)
    shifted = model.generate(ids, position_ids=default + 7, **kwargs)
    assert not torch.equal(shifted, model.generate(ids, **kwargs))  # plain generate() reads them
    message = _raises(errors.UnsupportedGenerationError, model, drafter, inputs=ids, position_ids=default + 7,
                      attention_mask=mask)
    assert "position_ids" in message
    ours = model.generate(ids, position_ids=default, drafter=drafter, gamma=3, **kwargs)
    assert torch.equal(ours, model.generate(ids, position_ids=default, **kwargs))


def test_token_type_ids_are_refused():
    # GPT-2 adds their embedding to every token (generate() repeats a row's last type for new tokens); the loop's
    # forwards did not feed them, so a GPT-2 returned other tokens than plain generate() with them.
    model = tiny_models.gpt2(seed=0)
    ids, mask = tiny_models.prompts(2, seed=4)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=10)
    types = torch.zeros_like(ids)
    assert not torch.equal(model.generate(ids, token_type_ids=types, **kwargs), model.generate(ids, **kwargs))
    message = _raises(errors.UnsupportedGenerationError, model, tiny_models.perturbed(model, scale=0.1), inputs=ids,
                      attention_mask=mask, token_type_ids=types)
    assert "token_type_ids" in message


def test_empty_prompt_is_refused(target):
    message = _raises(errors.InvalidInputError, target, target, inputs=torch.zeros(1, 0, dtype=torch.long))
    assert "empty" in message


def test_stop_strings_without_tokenizer(target):
    message = _raises(errors.InvalidInputError, target, target, stop_strings=["a"])
    assert "tokenizer=" in message


def test_drafter_of_the_wrong_type(target):
    with pytest.raises(TypeError, match="drafter must be"):
        target.generate(_ids(), max_new_tokens=3, drafter=42)


# Models are judged by their class, never by an instance attribute a user replaced: wrapping `forward` to
# count, log or time calls is common, and such a wrapper's `*args, **kwargs` signature says nothing.

GREEDY = {"do_sample": False, "max_new_tokens": 12}


def _count_calls(model) -> list:
    """Wraps `model.forward` the way users count calls; returns the list that grows by one per call."""
    calls = []
    original = model.forward
    model.forward = lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs)
    return calls


@pytest.mark.parametrize("wrapped", ["drafter", "target", "both"])
def test_a_wrapped_forward_decodes_like_plain_generate_and_sees_every_call(wrapped):
    target = tiny_models.llama(seed=0)
    drafter = tiny_models.perturbed(target, scale=0.1)
    input_ids, mask = tiny_models.prompts(3, seed=1)
    expected = target.generate(input_ids, attention_mask=mask, **GREEDY)  # before any wrapping
    target_calls = _count_calls(target) if wrapped in ("target", "both") else None
    drafter_calls = _count_calls(drafter) if wrapped in ("drafter", "both") else None
    stats = hf_specdec.SpeculativeStats()
    out = target.generate(input_ids, attention_mask=mask, drafter=drafter, gamma=3, stats=stats, **GREEDY)
    assert torch.equal(out, expected)
    assert stats.target_forwards > 0 and stats.drafter_forwards > 0
    if target_calls is not None:
        assert len(target_calls) == stats.target_forwards
    if drafter_calls is not None:
        assert len(drafter_calls) == stats.drafter_forwards


def test_a_wrapped_drafter_with_another_vocabulary_gets_the_vocabulary_error(target):
    drafter = tiny_models.llama(seed=1, vocab=120)
    calls = _count_calls(drafter)
    message = _raises(errors.VocabMismatchError, target, drafter)
    assert "96" in message and "120" in message
    assert not calls


@pytest.mark.parametrize("compiled", ["drafter", "target"])
def test_a_torch_compiled_forward_decodes_like_plain_generate(compiled):
    target = tiny_models.llama(seed=0)
    drafter = tiny_models.perturbed(target, scale=0.1)
    input_ids, mask = tiny_models.prompts(3, seed=1)
    expected = target.generate(input_ids, attention_mask=mask, **GREEDY)
    model = drafter if compiled == "drafter" else target
    model.forward = torch.compile(model.forward, backend="eager")  # as transformers' docs suggest, without a C compiler
    out = target.generate(input_ids, attention_mask=mask, drafter=drafter, gamma=3, **GREEDY)
    assert torch.equal(out, expected)


def _tiny_bert(is_decoder: bool, family: str = "Bert"):
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(
        vocab_size=tiny_models.VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, is_decoder=is_decoder, **tiny_models.SPECIAL,
    )
    head = {"Bert": "BertLMHeadModel", "Roberta": "RobertaForCausalLM"}[family]
    return tiny_models._finish(getattr(transformers, head)(config))


def test_a_bert_built_as_an_encoder_is_refused_as_target_and_as_drafter(target):
    # BertConfig's default is_decoder=False: bidirectional attention, which a verification forward cannot match.
    encoder = _tiny_bert(is_decoder=False)
    assert "is_decoder=True" in _raises(errors.UnsupportedModelError, encoder, _tiny_bert(is_decoder=True))
    assert "is_decoder=True" in _raises(errors.UnsupportedModelError, target, encoder)
    switched = _tiny_bert(is_decoder=True)
    switched.config.is_decoder = False  # after building: its masks read the flag at every call
    assert "is_decoder=True" in _raises(errors.UnsupportedModelError, switched, _tiny_bert(is_decoder=True))


@pytest.mark.parametrize("family, batch", [("Bert", 3), ("Roberta", 1)])
def test_a_forward_wrapper_that_hides_position_ids_is_exact_or_refused(family, batch):
    """generate() passes position_ids only when `model.forward`'s signature names them. Behind a wrapper
    that hides them, plain decoding lets the model place tokens itself: BERT counts padding (positions from
    the cache length), RoBERTa starts at padding_idx + 1 even alone; hf_specdec's loop passes per-row
    positions from 0. Whatever decides wrapped models must keep this exact or refused."""
    model = _tiny_bert(is_decoder=True, family=family)
    ids, mask = tiny_models.prompts(batch, seed=0)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=16)
    unwrapped = model.generate(ids, **kwargs)
    original = model.forward
    model.forward = lambda *args, **kw: original(*args, **kw)
    plain = model.generate(ids, **kwargs)
    assert not torch.equal(plain, unwrapped), "premise: the wrapper changes plain generate()'s positions"
    forwards = []
    hook = model.register_forward_hook(lambda *a: forwards.append(1))
    try:
        spec = model.generate(ids, drafter=_tiny_bert(is_decoder=True, family=family), gamma=3, **kwargs)
    except errors.UnsupportedModelError:
        assert not forwards, "refused after the target ran"
    else:
        assert torch.equal(spec, plain)
    finally:
        hook.remove()


def test_the_cache_keyword_follows_the_installed_transformers():
    """transformers 5.24 renamed the forward's `past_key_values` to `cache`: compat asks the installed release,
    and a module written to the old name (remote code, our own heads) is still driven by it."""
    from hf_specdec import compat

    assert compat.CACHE_KWARG in compat.forward_parameters(tiny_models.llama())

    class Old(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None):
            return input_ids

    class New(torch.nn.Module):
        def forward(self, input_ids, cache=None):
            return input_ids

    class Stateless(torch.nn.Module):
        def forward(self, input_ids, state=None):
            return input_ids

    assert compat.cache_argument(Old()) == "past_key_values"
    assert compat.cache_argument(New()) == ("cache" if compat.CACHE_KWARG == "cache" else None)
    assert compat.cache_argument(Stateless()) is None


def test_a_cache_holding_part_of_the_prompt_is_refused_for_what_it_is(target):
    # Prefix caching: plain generate() feeds only the uncached tokens; the loop starts from an empty cache. The
    # position ids generate() makes then cover the whole prompt, which must not read as the caller's own.
    from transformers import DynamicCache

    ids = torch.tensor([[1, 5, 9, 14, 3, 7, 11, 12]])
    cache = DynamicCache(config=target.config)
    with torch.no_grad():
        target(ids[:, :5], past_key_values=cache, use_cache=True)
    message = _raises(errors.UnsupportedModelError, target, target, inputs=ids, past_key_values=cache)
    assert "empty cache" in message


def test_images_are_refused_not_dropped():
    # generate() encodes pixel_values into `mm_encoder_outputs` ({} without images) for the model's prefill; the loop's
    # forwards fed tokens only, so an image-text model decoded as if the image were not there.
    import arch_zoo

    config = arch_zoo.config("gemma3")
    vocab = config.text_config.vocab_size
    config.mm_tokens_per_image, config.image_token_id = 4, vocab - 1  # a 2x2 pooled image in the tiny vocabulary
    torch.manual_seed(0)
    model = arch_zoo.model_class("gemma3")(config).eval()
    ids = torch.tensor([[2] + [vocab - 1] * 4 + [5, 9, 14, 3]])
    pixels = torch.randn(1, 3, config.vision_config.image_size, config.vision_config.image_size)
    kwargs = dict(max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True)
    seen, unseen = model.generate(ids, pixel_values=pixels, **kwargs), model.generate(ids, **kwargs)
    assert not torch.allclose(seen.logits[0], unseen.logits[0])  # plain generate() reads the image
    message = _raises(errors.UnsupportedGenerationError, model, model, inputs=ids, pixel_values=pixels)
    assert "mm_encoder_outputs" in message
    ours = model.generate(ids, drafter=model, gamma=2, **kwargs)  # without an image it decodes as plain
    assert torch.equal(ours.sequences, unseen.sequences)
