"""The only module that touches GenerationMixin: the `drafter=` keyword of generate().

Contract: `install()` wraps `GenerationMixin.generate` so that a call with `drafter=` pops our keywords
and runs the speculative loop through generate()'s `custom_generate` (generate() still prepares the
config, processors and stopping criteria); calls without `drafter=` reach the original untouched.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from transformers import GenerationMixin, PreTrainedModel, StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria

from hf_specdec import attention, compat, pipelines, seq2seq
from hf_specdec.drafters import resolve_drafter
from hf_specdec.drafters.translated import for_tokenizers
from hf_specdec.errors import InvalidInputError, UnsupportedModelError
from hf_specdec.loop import speculative_decode

_original_generate = None
_original_validate_model_kwargs = None

#: Our keywords, popped before generate() sees them (it raises on unknown ones).
SPEC_KWARGS = ("gamma", "generator", "stats", "drafter_tokenizer")


def generate_with_drafter(target: PreTrainedModel, drafter: Any, *args, **kwargs):
    """generate() with `drafter=`; the same arguments as generate() plus SPEC_KWARGS."""
    generate = _original_generate or GenerationMixin.generate
    # A model with its own generate() (Whisper's prepares language and task tokens, timestamps, long-form audio)
    # reaches here through it only when it hands our keywords on to GenerationMixin.generate: decode from here.
    gamma = kwargs.pop("gamma", None)  # None: the cost-aware default policy
    compat.check_gamma(gamma)
    spec = {name: kwargs.pop(name) for name in SPEC_KWARGS[1:] if name in kwargs}
    streamer = kwargs.get("streamer")
    if args:  # by name, as generate() would bind them (a model's own generate() may pass several positionally)
        for name, value in zip(_positional_names(generate), args):
            if name in kwargs:
                raise TypeError(f"generate() got multiple values for argument {name!r}")
            kwargs[name] = value
        args = ()
    compat.check_request(target, kwargs, streamer)
    drafter = resolve_drafter(drafter)

    # custom_generate callables do not receive the tokenizer, so stop strings would fail inside
    # generate(); build their criterion here from the same tokenizer instead.
    tokenizer = kwargs.pop("tokenizer", None)
    drafter = for_tokenizers(drafter, tokenizer, spec.get("drafter_tokenizer"))  # another vocabulary: translated
    config = kwargs.get("generation_config") or target.generation_config
    stop_strings = kwargs.pop("stop_strings", None) or config.stop_strings
    if stop_strings is not None:
        if tokenizer is None:
            raise InvalidInputError("stop_strings need `tokenizer=` in the generate() call, as in plain generate().")
        criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
        criteria.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=stop_strings))
        kwargs["stopping_criteria"] = criteria
        kwargs["stop_strings"] = None

    decode = functools.partial(
        speculative_decode, drafter=drafter, gamma=gamma, streamer=streamer, tokenizer=tokenizer, **spec
    )
    if compat.is_seq2seq(target):  # the loop over the decoder, generate() having run the encoder
        decode = functools.partial(
            seq2seq.decode, loop=speculative_decode, encoder_outputs_given=kwargs.get("encoder_outputs") is not None,
            **decode.keywords,
        )
    return generate(target, *args, custom_generate=decode, **kwargs)


@functools.lru_cache(maxsize=None)
def _positional_names(generate) -> tuple[str, ...]:
    """The names generate()'s positional arguments bind to, after `self`."""
    parameters = inspect.signature(generate).parameters.values()
    return tuple(p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD)[1:]


def _own_generate_error(model) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"{type(model).__name__} has its own generate(), which did not hand drafter= on to GenerationMixin.generate; "
        "decode it without drafter=."
    )


def _validate_model_kwargs(self, model_kwargs: dict[str, Any]):
    # Reached only when a model's own generate() got our keywords past GenerationMixin.generate.
    if "drafter" in model_kwargs:
        raise _own_generate_error(self)
    return _original_validate_model_kwargs(self, model_kwargs)


def _generate(self, *args, drafter=None, **kwargs):
    if drafter is None:
        stray = [name for name in SPEC_KWARGS if name in kwargs]
        if stray:
            raise TypeError(f"{', '.join(stray)} only apply with `drafter=`; pass a drafter or drop them.")
        return _original_generate(self, *args, **kwargs)
    return generate_with_drafter(self, drafter, *args, **kwargs)


def install() -> None:
    """Adds the `drafter=` keyword to every model's generate() and text-generation pipeline, and the loop's
    grouped-query packing to transformers' sdpa attention (`hf_specdec.attention`). Idempotent."""
    global _original_generate, _original_validate_model_kwargs
    if _original_generate is not None:
        return
    _original_generate = GenerationMixin.generate
    _original_validate_model_kwargs = GenerationMixin._validate_model_kwargs
    GenerationMixin.generate = functools.wraps(_original_generate)(_generate)
    GenerationMixin._validate_model_kwargs = functools.wraps(_original_validate_model_kwargs)(_validate_model_kwargs)
    pipelines.install()
    attention.install()


def uninstall() -> None:
    """Restores transformers' own generate(), pipelines and sdpa attention."""
    global _original_generate, _original_validate_model_kwargs
    if _original_generate is None:
        return
    GenerationMixin.generate = _original_generate
    GenerationMixin._validate_model_kwargs = _original_validate_model_kwargs
    _original_generate = _original_validate_model_kwargs = None
    pipelines.uninstall()
    attention.uninstall()


def is_installed() -> bool:
    return _original_generate is not None
