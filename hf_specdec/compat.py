"""Checks that a request and a drafter/target pair can decode exactly, before any forward pass.

Contract: every function here only reads; each raises a typed error from `hf_specdec.errors` naming
what differs and the fix, and returns what the loop needs (the shared vocabulary width, paddings).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from hf_specdec.errors import (
    InvalidGammaError,
    InvalidInputError,
    MaxLengthError,
    SpecialTokenMismatchError,
    TokenizerMismatchError,
    UnsupportedGenerationError,
    UnsupportedModelError,
    VocabMismatchError,
)
from hf_specdec.policy import CostAwareDraftPolicy, DraftPolicy, HeuristicDraftPolicy

#: What transformers calls the cache a forward takes and generate() keeps in its model kwargs: `past_key_values`
#: up to 5.23, `cache` from 5.24 (which still takes the old name, deprecated, on its own models until 5.40).
CACHE_KWARG = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

#: generate() kwargs that pick another decoding strategy and cannot be combined with drafter=.
CONFLICTING_KWARGS = ("assistant_model", "assistant_tokenizer", "prompt_lookup_num_tokens", "assistant_early_exit")


#: What to pass instead of transformers' assisted-decoding keywords, where hf_specdec has its own.
_OUR_NAME = {
    "assistant_tokenizer": "pass the drafter's tokenizer as `drafter_tokenizer=` (with the target's as `tokenizer=`), "
                           "which translates drafts between the two vocabularies.",
    "assistant_early_exit": "draft with the target's first k layers as `drafter=hf_specdec.EarlyExit(k)`.",
}


def check_gamma(gamma: Any) -> DraftPolicy:
    """The DraftPolicy that `gamma=` stands for: None (not given: CostAwareDraftPolicy()), a positive int,
    "auto" or a DraftPolicy instance."""
    if gamma is None:
        return CostAwareDraftPolicy()
    if isinstance(gamma, DraftPolicy):
        return gamma
    if isinstance(gamma, str) and gamma == "auto":
        return HeuristicDraftPolicy()
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise InvalidGammaError(
            "gamma must be a positive int (tokens drafted per step), 'auto', or a policy such as "
            f"hf_specdec.HeuristicDraftPolicy(max_gamma=8); got {gamma!r}."
        )
    return DraftPolicy(max_gamma=gamma)


def check_request(target: PreTrainedModel, kwargs: dict[str, Any], streamer: Any) -> None:
    """Checks what can be checked from generate()'s raw arguments."""
    if target.config.is_encoder_decoder and not is_seq2seq(target):
        raise UnsupportedModelError(
            f"{type(target).__name__} is an encoder-decoder model whose forward takes no decoder_input_ids; hf_specdec "
            "drives a decoder through them (or decoder-only causal LMs). Decode it without drafter=."
        )
    for name in CONFLICTING_KWARGS:
        if kwargs.get(name) is not None:
            raise UnsupportedGenerationError(
                f"`{name}` selects transformers' own assisted decoding and cannot be combined with `drafter=`; "
                f"{_OUR_NAME.get(name, 'pass one of them.')}"
            )
    inputs = kwargs.get("input_ids", kwargs.get("inputs"))
    if streamer is not None and isinstance(inputs, torch.Tensor) and inputs.dim() == 2 and inputs.shape[0] > 1:
        raise UnsupportedGenerationError(
            f"streamers support batch size 1, got {inputs.shape[0]} rows; stream one prompt at a time or drop "
            "`streamer=`."
        )


#: generate()'s modes besides greedy and sampling that a config can ask for (beam search and assisted decoding have
#: errors of their own): plain generate() runs these from their hub repositories.
_OTHER_MODES = {
    "CONTRASTIVE_SEARCH": "contrastive search (penalty_alpha > 0 with top_k > 1)",
    "DOLA_GENERATION": "DoLa decoding (dola_layers)",
}


def check_generation_config(
    config: GenerationConfig, synced_gpus: bool, batch_size: int, streamer: Any
) -> None:
    """Checks the generation config generate() resolved (user kwargs merged into the model's defaults)."""
    if config.num_beams > 1:
        raise UnsupportedGenerationError(
            f"beam search (num_beams={config.num_beams}) cannot be combined with `drafter=`; use num_beams=1."
        )
    if config.output_attentions or config.output_hidden_states:
        raise UnsupportedGenerationError(
            "output_attentions / output_hidden_states are not available with `drafter=`; "
            "output_scores and output_logits are."
        )
    if config.prompt_lookup_num_tokens is not None or getattr(config, "assistant_early_exit", None) is not None:
        raise UnsupportedGenerationError(
            "the generation config asks for transformers' assisted decoding (prompt_lookup_num_tokens / "
            "assistant_early_exit); unset it, and use drafter='prompt_lookup' or drafter=hf_specdec.EarlyExit(k)."
        )
    mode = config.get_generation_mode()
    if mode.name not in ("GREEDY_SEARCH", "SAMPLE"):  # the loop would decode greedily instead of what was asked
        what = _OTHER_MODES.get(mode.name, f"generation mode {mode.value!r}")
        raise UnsupportedGenerationError(
            f"{what} cannot be combined with `drafter=`; unset it to decode greedily or sample."
        )
    if config.token_healing:
        raise UnsupportedGenerationError("token_healing cannot be combined with `drafter=`.")
    if synced_gpus:
        raise UnsupportedGenerationError("synced_gpus (ZeRO-3 / FSDP) is not supported with `drafter=`.")
    if streamer is not None and batch_size > 1:
        raise UnsupportedGenerationError(
            f"streamers support batch size 1, got {batch_size} rows; stream one prompt at a time."
        )


def check_processors(processors, batch_size: int) -> None:
    """Processors the loop cannot apply exactly: ones that run a model of their own (classifier-free
    guidance keeps its own cache), or that identify rows by their index in the batch."""
    for processor in processors:
        name = type(processor).__name__
        if name == "UnbatchedClassifierFreeGuidanceLogitsProcessor":
            raise UnsupportedGenerationError("guidance_scale (classifier-free guidance) cannot be combined with `drafter=`.")
        if name == "PrefixConstrainedLogitsProcessor" and batch_size > 1:
            raise UnsupportedGenerationError(
                "prefix_allowed_tokens_fn receives batch indices, which speculative decoding cannot keep at batch "
                "size > 1; generate one prompt at a time."
            )


#: The model inputs generate() passes on that the loop's forwards feed (or make themselves): any other given is refused.
_FED = {"attention_mask", "position_ids", CACHE_KWARG, "use_cache", "logits_to_keep"}

#: Why an input the loop does not feed changes what plain generate() returns, where there is more to say than that.
_TOKEN_TYPES_WHY = (
    "generate() feeds them, repeating a row's last one for new tokens, and a model that reads them (GPT-2 adds their "
    "embedding to every token) decodes otherwise; drop them (a tokenizer that returns them: "
    "return_token_type_ids=False)"
)
_UNFED_WHY = {
    "inputs_embeds": "the drafter and the loop read the prompt's token ids, and without input_ids generate() hands the "
                     "loop an empty prompt; pass input_ids instead",
    "token_type_ids": _TOKEN_TYPES_WHY,
    "mm_token_type_ids": _TOKEN_TYPES_WHY,
    "moe_mm_token_type_ids": _TOKEN_TYPES_WHY,
    "mm_encoder_outputs": "generate() encodes images (pixel_values) into them for the model's prefill; the loop's "
                          "forwards feed tokens only; decode image prompts without drafter=",
}


def check_model_inputs(model_kwargs: dict, input_ids: torch.Tensor) -> None:
    """Model inputs generate() passes on that the loop would not read: any besides the tokens, attention mask,
    positions and cache (prompts as embeddings, token type ids, images: `_UNFED_WHY`), an empty prompt, and position
    ids other than generate()'s own (the loop derives each row's positions from its attention mask as generate() does
    by default; a model with learned positions decodes differently from others). Runs after
    `cache.check_starts_empty`: the cache given holds no tokens."""
    unread = sorted(name for name, value in model_kwargs.items()
                    if name not in _FED and value is not None and not (isinstance(value, dict) and not value))
    if unread:  # (`mm_encoder_outputs` is {} without images)
        why = next((_UNFED_WHY[name] for name in unread if name in _UNFED_WHY),
                   "the loop's forwards feed the tokens, the attention mask and positions only; drop them or decode "
                   "without drafter=")
        raise UnsupportedGenerationError(f"model inputs {', '.join(unread)} cannot be combined with `drafter=`: {why}.")
    if input_ids.shape[1] == 0:
        raise InvalidInputError("the prompt is empty; give every row at least one token (e.g. the BOS token).")
    position_ids = model_kwargs.get("position_ids")
    if position_ids is not None and not _generates_own_positions(position_ids, model_kwargs.get("attention_mask")):
        raise UnsupportedGenerationError(
            "position_ids other than the ones generate() counts from each row's attention mask (given by the caller, "
            "or made by the model's own input preparation, e.g. multimodal rotary positions) cannot be combined with "
            "`drafter=`: the loop counts positions from the mask; drop position_ids."
        )


def _generates_own_positions(position_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> bool:
    """Whether `position_ids` are the ones generate() makes for an empty cache when none are given
    (`_prepare_position_ids_for_generation`): counted from the attention mask, or 0, 1, 2, ... over the prompt where
    generate() dropped an all-ones mask (or had none)."""
    if attention_mask is not None:
        return torch.equal(position_ids, (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0))
    return bool((position_ids == torch.arange(position_ids.shape[-1], device=position_ids.device)).all())


def left_padding(attention_mask: torch.Tensor | None, input_ids: torch.Tensor) -> torch.Tensor:
    """[batch] number of left-padding columns per row; raises on any other padding layout."""
    batch, length = input_ids.shape
    if attention_mask is None:
        return torch.zeros(batch, dtype=torch.long, device=input_ids.device)
    pad_lens = (attention_mask == 0).sum(dim=1)
    expected = torch.arange(length, device=attention_mask.device)[None, :] >= pad_lens[:, None]
    if not torch.equal(attention_mask.bool(), expected):
        raise InvalidInputError(
            "hf_specdec needs left-padded prompts (padding only before each row's tokens); "
            "set `tokenizer.padding_side = 'left'`."
        )
    return pad_lens.to(input_ids.device)


def _eos_set(value) -> set[int] | None:
    if value is None:
        return None
    return {int(v) for v in (value if isinstance(value, (list, tuple)) else [value])}


def check_special_tokens(target: PreTrainedModel, drafter: PreTrainedModel) -> None:
    """bos/eos/pad of both generation configs must agree wherever both declare them."""
    t_config, d_config = target.generation_config, drafter.generation_config
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        t_value, d_value = getattr(t_config, name, None), getattr(d_config, name, None)
        if name == "eos_token_id":
            t_value, d_value = _eos_set(t_value), _eos_set(d_value)
        if t_value is not None and d_value is not None and t_value != d_value:
            raise SpecialTokenMismatchError(
                f"{name} differs: target {t_value}, drafter {d_value}. If the drafter uses another tokenizer, pass "
                "it as `drafter_tokenizer=` (with the target's as `tokenizer=`), and its drafts are translated; if "
                f"it uses the target's, set drafter.generation_config.{name} to the target's value."
            )


def _plain_vocab(tokenizer) -> dict[str, int]:
    """The tokenizer's token -> id map without added special tokens (chat markers and the like)."""
    special = {token.content for token in tokenizer.added_tokens_decoder.values() if token.special}
    return {token: index for token, index in tokenizer.get_vocab().items() if token not in special}


def check_tokenizers(tokenizer, drafter_tokenizer) -> None:
    if type(tokenizer).__name__ != type(drafter_tokenizer).__name__:
        raise TokenizerMismatchError(
            f"tokenizer classes differ: target {type(tokenizer).__name__}, drafter "
            f"{type(drafter_tokenizer).__name__}; use a drafter trained with the target's tokenizer."
        )
    target_vocab, drafter_vocab = _plain_vocab(tokenizer), _plain_vocab(drafter_tokenizer)
    if target_vocab != drafter_vocab:
        differing = sorted(set(target_vocab.items()) ^ set(drafter_vocab.items()), key=lambda item: item[1])[:5]
        raise TokenizerMismatchError(
            f"vocabulary maps differ ({len(target_vocab)} vs {len(drafter_vocab)} tokens; e.g. {differing}); "
            "a drafter must share the target's token ids. Use a drafter from the same model family, or "
            "distill one with `hf-specdec distill`."
        )


def _head_width(model: PreTrainedModel) -> int:
    return model.config.get_text_config().vocab_size


def _model_width(config) -> int | None:
    """The width of a model's hidden states by its config (d_model / hidden_size), None where it names none."""
    config = config.get_text_config(decoder=True)
    return getattr(config, "d_model", None) or getattr(config, "hidden_size", None)


def check_encoder_side(target: PreTrainedModel, drafter: PreTrainedModel) -> None:
    """For an encoder-decoder target: the drafter is an encoder-decoder model whose encoder reads what the target's
    reads (text ids, audio features), a decoder that reads the target's encoder output at its width
    (distil-whisper's shape), or a plain causal LM (it drafts from the decoder's tokens alone)."""
    name, target_name = type(drafter).__name__, type(target).__name__
    if is_seq2seq(drafter):
        if drafter.main_input_name != target.main_input_name:
            raise UnsupportedModelError(
                f"the drafter {name}'s encoder reads {drafter.main_input_name}, the target {target_name}'s reads "
                f"{target.main_input_name}; use a drafter of the target's kind (or one that reads its encoder output)."
            )
        return
    if not reads_encoder_output(drafter):
        return
    expected = getattr(drafter.config, "cross_attention_hidden_size", None) or _model_width(drafter.config)
    given = _model_width(target.config)
    if expected is not None and given is not None and expected != given:
        raise UnsupportedModelError(
            f"the drafter {name}'s cross-attention reads encoder states of width {expected}, and the target "
            f"{target_name}'s encoder writes width {given}; use a drafter made for this target's encoder (the same "
            "d_model), or an encoder-decoder drafter with an encoder of its own."
        )


def check_model_pair(
    target: PreTrainedModel,
    drafter: PreTrainedModel,
    generation_config: GenerationConfig,
    tokenizer=None,
    drafter_tokenizer=None,
) -> int:
    """Checks a (target, drafter model) pair and returns the vocabulary width both are scored on."""
    if is_seq2seq(target):
        check_encoder_side(target, drafter)
    elif drafter.config.is_encoder_decoder or is_seq2seq(drafter):
        raise UnsupportedModelError(
            f"the drafter {type(drafter).__name__} has an encoder, and the target {type(target).__name__} has none to "
            "give it input; use a decoder-only causal LM as drafter."
        )
    check_model_interface(drafter, "drafter")
    check_special_tokens(target, drafter)
    if tokenizer is not None and drafter_tokenizer is not None:
        check_tokenizers(tokenizer, drafter_tokenizer)

    target_width, drafter_width = _head_width(target), _head_width(drafter)
    shared = min(target_width, drafter_width)
    if target_width != drafter_width:
        if tokenizer is None:
            raise VocabMismatchError(
                f"LM head widths differ (target {target_width}, drafter {drafter_width}). If one head is only "
                "padded, pass `tokenizer=` so hf_specdec can check that both cover every token id; if the drafter "
                "uses another vocabulary, pass its tokenizer as `drafter_tokenizer=` with the target's as "
                "`tokenizer=`, and its drafts are translated."
            )
        if len(tokenizer) > shared:
            raise VocabMismatchError(
                f"the tokenizer has {len(tokenizer)} ids but the smaller LM head scores only {shared} "
                f"(target {target_width}, drafter {drafter_width}): different vocabularies. Pass the drafter's "
                "tokenizer as `drafter_tokenizer=`, and its drafts are translated."
            )
    elif tokenizer is not None and len(tokenizer) > shared:
        raise VocabMismatchError(
            f"the tokenizer has {len(tokenizer)} ids but both LM heads score only {shared}; "
            "pass the tokenizer that belongs to these models."
        )

    limit = getattr(drafter.config.get_text_config(), "max_position_embeddings", None)
    if limit is None:
        limit = getattr(drafter.config.get_text_config(), "n_positions", None)
    limit = None if limit is not None and limit < 0 else limit  # -1 (XLNet): no limit
    if limit is not None and generation_config.max_length is not None and generation_config.max_length > limit:
        raise MaxLengthError(
            f"the request needs {generation_config.max_length} positions (prompt + max_new_tokens) but the "
            f"drafter's max_position_embeddings is {limit}; shorten the prompt or max_new_tokens, or use a "
            "drafter with longer context."
        )
    return shared


def forward_parameters(module: torch.nn.Module) -> dict[str, inspect.Parameter]:
    """The parameters of the forward that `module`'s class defines, bound to `module` (no `self`).

    Asked of the class, never of the instance: users replace `model.forward` with wrappers that count,
    log or time calls (`lambda *a, **k: orig(*a, **k)`), which still take whatever the class's forward
    takes but whose own signature says nothing. Decorators on the class's forward that keep
    `__wrapped__` (functools.wraps, as transformers' own do) are followed by `inspect.signature`. The
    loop still calls the model as usual (`model(...)`), so an instance wrapper sees every call.
    """
    cls = type(module)
    key = (cls, cls.forward)  # every instance's class forward binds to the same parameters
    parameters = _FORWARD_PARAMETERS.get(key)
    if parameters is None:  # inspect.signature costs ~0.1 ms, and every call builds several CachedModels
        parameters = _FORWARD_PARAMETERS[key] = dict(inspect.signature(cls.forward.__get__(module, cls)).parameters)
    return dict(parameters)


_FORWARD_PARAMETERS: dict[tuple, dict[str, inspect.Parameter]] = {}  # (class, its forward) -> parameters


def feeds_positions(model: torch.nn.Module) -> bool:
    """Whether the loop feeds `model` position_ids, matching what plain generate() makes of it. generate()
    passes them only when the *instance's* forward signature names them (transformers 5.x), so behind a
    wrapper that hides them (`lambda *a, **k: ...`) the model places tokens itself, counting from its cache
    (padding included) or from its input_ids. Fed anyway when the class takes them and its positions are
    rotary only: generate()'s own then shift each row's by a constant, which rotary attention does not see.
    Otherwise the loop leaves them out too (exact alone; `check_target` refuses batches)."""
    forward = model.forward  # the instance's: a user's wrapper may hide position_ids
    own = getattr(forward, "__func__", None) is type(model).forward  # the class's own forward, bound
    if "position_ids" in (forward_parameters(model) if own else inspect.signature(forward).parameters):
        return True
    return "position_ids" in forward_parameters(model) and not _has_absolute_positions(model)


def _position_kinds(model: PreTrainedModel) -> set[str]:
    """How the model encodes positions itself: "rotary" and/or "absolute" (learned or sinusoidal position
    embeddings), by its modules' class and attribute names; empty for ALiBi and position-free models."""
    kinds = set()
    for name, module in model.named_modules():
        kind, attribute = type(module).__name__.lower(), name.rsplit(".", 1)[-1].lower()
        if "rotary" in kind or "rope" in kind:
            kinds.add("rotary")
        elif "position" in kind or "sinusoidal" in kind or any(w in attribute for w in ("position", "wpe", "pos_emb")):
            kinds.add("absolute")
    return kinds


def _has_absolute_positions(model: PreTrainedModel) -> bool:
    """Whether the model adds position embeddings of its own (learned, sinusoidal), not rotary ones only."""
    return "absolute" in _position_kinds(model)


def _has_positional_weights(model: PreTrainedModel) -> bool:
    """Whether the model encodes positions itself (position embeddings, sinusoids, rotary): what a model
    that takes no position_ids must then derive from its cache. ALiBi and position-free models have none."""
    return bool(_position_kinds(model))


def _built_as_encoder(model: PreTrainedModel) -> bool:
    """Whether a BERT-style model is configured or built as an encoder (`is_decoder=False`, the default of
    BERT-like configs and of encoder checkpoints): its decoder's layers copy `config.is_decoder` when built
    and its masks read it at every call, and either way False means bidirectional attention. Configs that
    declare `is_decoder` but never read it (GPT-NeoX) have no layer that copies it; their forward stays
    causal. Encoders beside the decoder (an audio tower) may attend both ways: only the decoder is asked."""
    if any(getattr(module, "is_decoder", None) is False for module in model.get_decoder().modules()):
        return True
    if getattr(model.config, "is_decoder", None) is not False:
        return False
    try:
        return "is_decoder" in inspect.getsource(type(model).__init__)  # it warns or asserts on the flag
    except (OSError, TypeError):
        return False


def is_seq2seq(model: torch.nn.Module) -> bool:
    """Whether `model` is an encoder-decoder model with a language-model head: its forward takes the decoder's tokens
    as `decoder_input_ids` (BART, T5, Marian, Whisper, ...), its own input being the encoder's."""
    return "decoder_input_ids" in forward_parameters(model)


def reads_encoder_output(model: torch.nn.Module) -> bool:
    """Whether `model` is a decoder that attends to an encoder output given to its forward (distil-whisper's
    WhisperForCausalLM, BartForCausalLM, TrOCR): it could draft for an encoder-decoder target from that target's
    encoder output."""
    parameters = forward_parameters(model)
    return not is_seq2seq(model) and ("encoder_hidden_states" in parameters or "encoder_outputs" in parameters)


def cache_argument(module: torch.nn.Module) -> str | None:
    """The keyword `module`'s forward takes its cache by: this transformers' name (CACHE_KWARG), else
    `past_key_values` (remote code and our own heads written for 5.23 and earlier), else None."""
    parameters = forward_parameters(module)
    return next((name for name in (CACHE_KWARG, "past_key_values") if name in parameters), None)


def check_model_interface(model: PreTrainedModel, role: str = "target") -> None:
    """Refuses models whose forward the loop cannot drive exactly, asking their forward signatures and
    config: it must keep its state in a transformers cache (`cache_argument`: the loop feeds only uncached
    tokens and rolls the cache back), honour `attention_mask` (padding and rejected drafts are masked
    columns) and attend causally (a verification forward feeds several tokens at once)."""
    name = type(model).__name__
    if cache_argument(model) is None:
        raise UnsupportedModelError(
            f"{name} keeps its decoding state outside `{CACHE_KWARG}` (its forward takes none), so speculative "
            f"decoding cannot roll it back; decode it without drafter= (or use another {role})."
        )
    if is_seq2seq(model):
        if "decoder_attention_mask" not in forward_parameters(model):
            raise UnsupportedModelError(
                f"{name} takes no decoder_attention_mask, so the rejected drafts the loop masks would be attended "
                f"to; decode it without drafter= (or use another {role})."
            )
    else:
        inner = model.base_model
        if all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in forward_parameters(inner).values()):
            inner = model.get_decoder()  # a wrapper that passes everything on to the decoder it holds
        if "attention_mask" not in forward_parameters(inner):
            raise UnsupportedModelError(
                f"{name}'s {type(inner).__name__} takes no attention_mask, so the padding and rejected drafts the "
                f"loop masks would be attended to; decode it without drafter= (or use another {role})."
            )
    # (An encoder-decoder model's config says is_decoder=False of the whole; its decoder modules are asked alone.)
    if _built_as_encoder(model) and not (is_seq2seq(model) and any(
            getattr(module, "is_decoder", None) for module in model.get_decoder().modules())):
        raise UnsupportedModelError(
            f"{name} is built as an encoder (config.is_decoder=False): it attends bidirectionally, so in a "
            "verification forward every token would see the drafts after it, while plain generate() feeds one "
            "token at a time. If it is a causal decoder, load it with is_decoder=True (transformers warns the "
            f"same); otherwise decode it without drafter= (or use another {role})."
        )
    if getattr(model.config, "ngram", None):
        raise UnsupportedModelError(
            f"{name} decodes {model.config.ngram} n-gram streams that give every token of a cached multi-token "
            f"forward the same position, so drafts cannot be verified in one forward; decode it without drafter=."
        )


#: Config fields naming the placeholder token a vision-language model puts in input_ids for each image token.
IMAGE_PLACEHOLDERS = ("image_token_id", "image_token_index")


def check_target(model: PreTrainedModel, batch_size: int) -> None:
    """The target-side checks: the interface (`check_model_interface`), and a batch-size limit for models
    that place tokens themselves. One kind takes no `position_ids` but encodes positions, deriving them
    from how many columns its cache holds; another takes images (`pixel_values`) without placeholder
    tokens in input_ids, keeps them in its cache and widens the padding mask over them on every cached
    call. In a batch, rows accept different numbers of drafts and the cache gets masked columns, which
    neither can see, so only a single row is exact."""
    check_model_interface(model, "target")
    if batch_size == 1:
        return
    name = type(model).__name__
    parameters = forward_parameters(model)
    if is_seq2seq(model):
        if "decoder_position_ids" not in parameters:
            raise UnsupportedModelError(
                f"{name}'s decoder takes no decoder_position_ids: it places tokens (learned positions, or a relative "
                "bias) by its cache's length, which the masked columns of rejected drafts would shift in a batch of "
                f"{batch_size}, where rows accept different numbers of drafts; generate the batch without drafter= "
                "(measured faster than evening the rows out, docs/encoder-decoder.md) or one input at a time with it."
            )
        return
    if not feeds_positions(model) and _has_positional_weights(model):
        hidden = " (its forward is wrapped in one whose signature hides them from generate())" if "position_ids" in parameters else ""
        raise UnsupportedModelError(
            f"{name} takes no position_ids{hidden} and derives positions from its cache length, which masked cache "
            f"columns would shift in a batch of {batch_size}; generate one prompt at a time with drafter="
            + (", or wrap forward with functools.wraps so generate() sees its parameters." if hidden else ".")
        )
    config = model.config
    if "pixel_values" in parameters and not any(getattr(config, field, None) is not None for field in IMAGE_PLACEHOLDERS):
        raise UnsupportedModelError(
            f"{name} keeps image tokens in its cache without placeholders in input_ids and widens the padding mask "
            f"over them, which the masked cache columns of a batch of {batch_size} would misalign; generate one "
            "prompt at a time with drafter=."
        )
