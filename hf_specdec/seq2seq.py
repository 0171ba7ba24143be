"""Encoder-decoder targets: the call's encoder output, and how a decoder is fed from it.

Contract: `decode` runs the one decoding loop (`loop.speculative_decode`) for a target with an encoder, after
generate() ran that encoder once: while the loop runs, the call's `Source` (encoder output, its padding mask, what
the encoder read) is current in this thread and context (`current()`), and every `CachedModel` built meanwhile of an
encoder-decoder model or of a decoder that reads an encoder output feeds that decoder from it (`DecoderFeed`): the
decoder's self-attention cache is the one `CachedModel` rolls back per row, the cross-attention cache is computed at
its first forward and kept. The loop itself sees a decoder-only problem: the decoder's prompt as `input_ids`.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, EncoderDecoderCache, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import ModelOutput

from hf_specdec import compat
from hf_specdec.errors import UnsupportedModelError
from hf_specdec.output import SpeculativeDecoderOnlyOutput, SpeculativeEncoderDecoderOutput

_CURRENT: contextvars.ContextVar["Source | None"] = contextvars.ContextVar("hf_specdec_source", default=None)

#: generate()'s model kwargs that describe the encoder side; the loop gets the rest (and the decoder's mask).
_ENCODER_KWARGS = ("encoder_outputs", "attention_mask", "decoder_attention_mask")


@dataclass
class Source:
    """One generate() call's encoder side, over the call's rows (after num_return_sequences' expansion).

    `outputs` is the target encoder's output (a ModelOutput, as the model returned it: some decoders read more of it
    than `last_hidden_state`), `mask` its padding mask (None: no padding), `inputs` what that encoder
    read (`input_ids` of a text encoder, `input_features` of an audio one), for a drafter with an encoder of its own;
    `token_ids` the source's token ids (text encoders only), for prompt lookup over the source.
    """

    target: PreTrainedModel
    outputs: ModelOutput  # last_hidden_state [batch, source_len, d_model], ...
    mask: torch.Tensor | None  # [batch, source_len]
    inputs: dict[str, torch.Tensor]  # [batch, ...] the encoder's main input
    token_ids: torch.Tensor | None  # [batch, source_len] long
    _encoded: dict = field(default_factory=dict)  # id(drafter model) -> its encoder's output over `inputs`

    @property
    def batch_size(self) -> int:
        return self.outputs.last_hidden_state.shape[0]

    def encoder_output(self, model: PreTrainedModel) -> ModelOutput:
        """What `model`'s decoder attends to (last_hidden_state [batch, source_len', d]): the target's encoder output,
        or, for an encoder-decoder drafter with an encoder of its own, that encoder's output, computed once per
        call."""
        if model is self.target or not compat.is_seq2seq(model) or model.get_encoder() is self.target.get_encoder():
            return self.outputs  # (a drafter built on the target's own encoder module: no second pass)
        if id(model) not in self._encoded:  # (`check_drafter_encoder` refused calls without `inputs`)
            inputs = {name: value.to(model.device) for name, value in self.inputs.items()}
            if self.mask is not None:
                inputs["attention_mask"] = self.mask.to(model.device)
            with torch.no_grad():
                self._encoded[id(model)] = model.get_encoder()(**inputs)
        return self._encoded[id(model)]


def take_rows(outputs: ModelOutput, index: torch.Tensor) -> ModelOutput:
    """`outputs` (an encoder's) with the rows `index` ([n] long) of every tensor over the batch (tuples of them too)."""
    batch = outputs.last_hidden_state.shape[0]

    def take(value):
        if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == batch:
            return value.index_select(0, index.to(value.device))
        if isinstance(value, tuple):
            return tuple(take(item) for item in value)
        return value

    return type(outputs)(**{name: take(value) for name, value in outputs.items()})


def current() -> Source | None:
    """The Source of the generate() call running in this thread (and context), or None outside one."""
    return _CURRENT.get()


@contextlib.contextmanager
def _current(source: Source):
    token = _CURRENT.set(source)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def source_of(model: PreTrainedModel, batch_size: int, inputs_tensor: torch.Tensor | None, model_kwargs: dict) -> Source:
    """The call's Source from what generate() prepared: `encoder_outputs` and the encoder's `attention_mask` in its
    model kwargs, and `inputs_tensor` (the encoder's input, once per prompt: repeated here over
    num_return_sequences' rows as generate() repeats the encoder output; None where the caller gave encoder_outputs,
    and generate()'s inputs_tensor is a placeholder)."""
    mask = model_kwargs.get("attention_mask")
    inputs, token_ids = {}, None
    name = model.main_input_name
    if inputs_tensor is not None:
        repeat = batch_size // inputs_tensor.shape[0]
        inputs = {name: inputs_tensor.repeat_interleave(repeat, dim=0)}
        if name == "input_ids":
            token_ids = inputs[name]
    return Source(target=model, outputs=model_kwargs["encoder_outputs"], mask=mask, inputs=inputs, token_ids=token_ids)


def decode(model: PreTrainedModel, input_ids: torch.LongTensor, logits_processor, stopping_criteria, generation_config,
           synced_gpus: bool = False, streamer=None, inputs_tensor: torch.Tensor | None = None, *, loop,
           encoder_outputs_given: bool = False, **kwargs):
    """generate()'s `custom_generate` for an encoder-decoder target: `loop.speculative_decode` over the decoder, with
    the call's Source current. `input_ids` [batch, decoder_prompt_len] is the decoder's prompt (the start token, or
    the caller's decoder_input_ids, e.g. Whisper's language and task tokens); `inputs_tensor` what the encoder read;
    `loop` is `loop.speculative_decode` (passed in: the loop's modules import this one)."""
    model_kwargs = {name: kwargs.pop(name) for name in list(kwargs) if name not in _LOOP_KEYWORDS}
    source = source_of(model, input_ids.shape[0], None if encoder_outputs_given else inputs_tensor, model_kwargs)
    loop_kwargs = {name: value for name, value in model_kwargs.items() if name not in _ENCODER_KWARGS}
    if model_kwargs.get("decoder_attention_mask") is not None:  # a padded decoder prompt: the loop's own mask
        loop_kwargs["attention_mask"] = model_kwargs["decoder_attention_mask"]
    drafter = kwargs["drafter"]
    if drafter.feature_layers(model):
        raise UnsupportedModelError(
            f"{type(drafter).__name__} reads the target's hidden states, which hf_specdec takes from decoder-only "
            f"targets only; draft for {type(model).__name__} with a model or prompt lookup."
        )
    with _current(source):
        out = loop(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus, streamer,
                   **kwargs, **loop_kwargs)
    if not isinstance(out, SpeculativeDecoderOnlyOutput):
        return out
    # generate()'s encoder-decoder output type, its encoder fields from the encoder output (None unless asked for,
    # as in plain generate(); `check_generation_config` refuses asking).
    return SpeculativeEncoderDecoderOutput(
        sequences=out.sequences, scores=out.scores, logits=out.logits, speculative_stats=out.speculative_stats,
        encoder_attentions=source.outputs.get("attentions"), encoder_hidden_states=source.outputs.get("hidden_states"),
    )


#: speculative_decode's own keywords (bound by dispatch); every other keyword is a model kwarg of generate()'s.
_LOOP_KEYWORDS = ("drafter", "gamma", "generator", "stats", "tokenizer", "drafter_tokenizer")


class DecoderFeed:
    """How one CachedModel feeds a decoder that attends to an encoder output: the loop's decoder inputs renamed for
    an encoder-decoder model's forward (`decoder_input_ids`, ...), the encoder output and its mask added, and the
    model's cache given as an EncoderDecoderCache over the CachedModel's self-attention cache and a cross-attention
    cache of its own (filled by the first forward, kept after: the source does not change during a call)."""

    def __init__(self, model: PreTrainedModel, source: Source):
        self.seq2seq = compat.is_seq2seq(model)
        parameters = compat.forward_parameters(model)
        self.outputs = source.encoder_output(model)  # last_hidden_state [batch, source_len, d]
        self.mask = source.mask  # [batch, source_len]
        # Layers are added as the decoder uses them: the config of an encoder-decoder model (or of a reader built from
        # one, such as distil-whisper's) may count the encoder's layers in the field a cache would size itself by.
        self.self_attention = DynamicCache()
        self.cache = EncoderDecoderCache(self.self_attention, DynamicCache())
        self._mask_kwarg = "encoder_attention_mask" if "encoder_attention_mask" in parameters else None
        self._hidden_kwarg = "encoder_outputs" if "encoder_outputs" in parameters else "encoder_hidden_states"
        # Each row's positions, where the decoder takes them: an encoder-decoder model's decoder_position_ids, or a
        # reader's position_ids handed on to its decoder (distil-whisper's WhisperForCausalLM takes **kwargs). A
        # decoder placing tokens by its cache's length counts the holes rows of a batch leave after rollbacks.
        if self.seq2seq:
            self.feeds_positions = "decoder_position_ids" in parameters
        else:
            self.feeds_positions = "position_ids" in parameters or (
                any(p.kind is p.VAR_KEYWORD for p in parameters.values())
                and "position_ids" in compat.forward_parameters(model.get_decoder())
            )

    def inputs(self, inputs: dict) -> dict:
        """The model's inputs for a forward that CachedModel prepared as a causal LM's."""
        device = self.outputs.last_hidden_state.device
        if self.seq2seq:
            fed = {
                "decoder_input_ids": inputs.pop("input_ids"),
                "decoder_attention_mask": inputs.pop("attention_mask"),
                "encoder_outputs": self.outputs,
                "attention_mask": None if self.mask is None else self.mask.to(device),
            }
            if "position_ids" in inputs:
                fed["decoder_position_ids"] = inputs.pop("position_ids")
        else:
            hidden = self.outputs.last_hidden_state
            if self._hidden_kwarg == "encoder_outputs":
                hidden = BaseModelOutput(last_hidden_state=hidden)
            fed = {"input_ids": inputs.pop("input_ids"), "attention_mask": inputs.pop("attention_mask"),
                   self._hidden_kwarg: hidden}
            if self._mask_kwarg and self.mask is not None:
                fed[self._mask_kwarg] = self.mask.to(device)
        inputs.pop("logits_to_keep", None)
        for name, value in inputs.items():
            fed[name] = self.cache if isinstance(value, DynamicCache) else value
        return fed

    def select_rows(self, index: torch.Tensor) -> None:
        """Keeps the rows `index` of the encoder output, its mask and the cross-attention cache."""
        self.outputs = take_rows(self.outputs, index)
        if self.mask is not None:
            self.mask = self.mask.index_select(0, index.to(self.mask.device))
        for layer in self.cache.cross_attention_cache.layers:
            for name in ("keys", "values"):
                value = getattr(layer, name, None)
                if isinstance(value, torch.Tensor) and value.dim() == 4:
                    setattr(layer, name, value.index_select(0, index.to(value.device)))


def check_drafter_encoder(model: PreTrainedModel) -> None:
    """Before any forward: a drafter with an encoder of its own needs the encoder's input, which a call given
    encoder_outputs instead does not have."""
    source = current()
    if source is not None and compat.is_seq2seq(model) and model is not source.target and not source.inputs:
        raise UnsupportedModelError(
            f"the drafter {type(model).__name__} has an encoder of its own, which needs the encoder's input, and this "
            "call gave generate() encoder_outputs instead; pass the input ids (or features), or a drafter that reads "
            "the target's encoder output."
        )


def feed_for(model: PreTrainedModel) -> DecoderFeed | None:
    """The DecoderFeed of a CachedModel of `model` in this call (over the call's rows): None for a model that attends
    to no encoder output (or a decoder that could, outside an encoder-decoder call); UnsupportedModelError for an
    encoder-decoder model outside a call (its decoder has nothing to attend to)."""
    source = current()
    if source is None:
        if compat.is_seq2seq(model):
            raise UnsupportedModelError(
                f"{type(model).__name__} is an encoder-decoder model; hf_specdec feeds its decoder inside generate() "
                "only, where the encoder ran."
            )
        return None
    if not (compat.is_seq2seq(model) or compat.reads_encoder_output(model)):
        return None
    return DecoderFeed(model, source)
