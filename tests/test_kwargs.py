"""Every generate() kwarg a user may pass, with `drafter=`: plain generate()'s output (greedy, fp32: token for token;
scores and logits too, where a row still generates), or a typed `SpeculativeError` before the target's first forward
that leaves its generation_config as it was; where plain generate() itself raises, an error too. Never other tokens
and never an untyped error. Chains, trees, prompt lookup, the default with a causal-LM drafter and with an EAGLE-3
head, greedy and sampled, on a left-padded batch of two.

A catalog, so a kwarg that goes through unread shows up here: contrastive search and DoLa decoded greedily,
inputs_embeds alone decoded from no prompt, position_ids were ignored, encoder_repetition_penalty crashed mid-call in
batches, until each was caught by this list."""

import copy

import pytest
import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

import tiny_models
from kwargs_util import check_against_plain
from hf_specdec import FeatureDrafter, errors
from hf_specdec.distill.feature_head import build_feature_head
from hf_specdec.policy import TreeDraftPolicy

IDS, MASK = tiny_models.prompts(2, seed=7, min_len=4, max_len=8)
POSITIONS = (MASK.cumsum(-1) - 1).clamp_min(0)  # generate()'s own


def _shift_scores(ids, scores):  # a processor of the caller's own that reads the tokens so far
    return scores + (ids[:, -1:] % 3 == 0) * torch.linspace(0, 2, scores.shape[-1])


CASES = {
    "plain": {},
    "min_new_tokens": dict(min_new_tokens=10),
    "min_length": dict(min_length=14),
    "max_length": dict(max_length=17, max_new_tokens=None),
    "no_repeat_ngram_size": dict(no_repeat_ngram_size=2),
    "repetition_penalty": dict(repetition_penalty=1.3),
    "encoder_repetition_penalty": dict(encoder_repetition_penalty=1.3),
    "sequence_bias": dict(sequence_bias={(5,): 3.0, (9, 14): -2.0}),
    "bad_words_ids": dict(bad_words_ids=[[5], [9, 14]]),
    "suppress_tokens": dict(suppress_tokens=[5, 9]),
    "begin_suppress_tokens": dict(begin_suppress_tokens=[5, 9]),
    "forced_bos_token_id": dict(forced_bos_token_id=7),
    "forced_eos_token_id": dict(forced_eos_token_id=tiny_models.EOS),
    "exponential_decay_length_penalty": dict(exponential_decay_length_penalty=(4, 1.5)),
    "renormalize_logits": dict(renormalize_logits=True),
    "watermarking_config": dict(watermarking_config={"bias": 2.0, "context_width": 1}),
    "eos_token_id list": dict(eos_token_id=[tiny_models.EOS, 11]),
    "pad_token_id": dict(pad_token_id=3),
    "use_cache False": dict(use_cache=False),
    "static cache": dict(cache_implementation="static"),
    "max_time": dict(max_time=60.0),
    "low_memory": dict(low_memory=True),
    "scores and logits": dict(output_scores=True, output_logits=True, return_dict_in_generate=True),
    "logits_processor": dict(logits_processor=LogitsProcessorList([_shift_scores])),
    "stopping_criteria": dict(stopping_criteria=StoppingCriteriaList([lambda ids, scores, **k: ids[:, -1] == 17])),
    "generation_config": dict(generation_config=GenerationConfig(max_new_tokens=9, no_repeat_ngram_size=3)),
    "position_ids, generate()'s own": dict(position_ids=POSITIONS),
    "ignored sampling flags": dict(temperature=0.5, top_k=3, top_p=0.5),
    # Refused (typed), or an error as in plain generate().
    "num_beams": dict(num_beams=2),
    "contrastive search": dict(penalty_alpha=0.6, top_k=4),
    "dola_layers": dict(dola_layers="low"),
    "guidance_scale": dict(guidance_scale=1.5),
    "output_attentions": dict(output_attentions=True, return_dict_in_generate=True),
    "output_hidden_states": dict(output_hidden_states=True, return_dict_in_generate=True),
    "prefix_allowed_tokens_fn": dict(prefix_allowed_tokens_fn=lambda batch, ids: list(range(3, 40))),
    "prompt_lookup_num_tokens": dict(prompt_lookup_num_tokens=3),
    "stop_strings without tokenizer": dict(stop_strings=["a"]),
    "position_ids of one's own": dict(position_ids=POSITIONS + 5),
    "inputs_embeds": "embeds",
    "right padding": dict(inputs=IDS.flip(1), attention_mask=MASK.flip(1)),
    "empty prompt": dict(inputs=IDS[:, :0], attention_mask=MASK[:, :0]),
    "num_return_sequences greedy": dict(num_return_sequences=2),
    "token_type_ids": dict(token_type_ids=torch.zeros_like(IDS)),  # GPT-2 reads them; Llama refuses in generate()
}

SPECS = {
    "chain": lambda drafters: dict(drafter=drafters["model"], gamma=3),
    "tree": lambda drafters: dict(drafter=drafters["model"], gamma=TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=6)),
    "prompt lookup": lambda drafters: dict(drafter="prompt_lookup", gamma=3),
    "default": lambda drafters: dict(drafter=drafters["model"]),
    "EAGLE-3 head, default": lambda drafters: dict(drafter=drafters["head"]),
}


@pytest.fixture(scope="module")
def drafters(target, partial_drafter):
    """A causal-LM drafter that agrees part of the time, and an untrained EAGLE-3 head (draft vocabulary ids 3-95)
    that reads the target's features: exactness does not depend on how often a drafter is right."""
    torch.manual_seed(0)
    head = build_feature_head(target, "eagle3", draft_vocab=list(range(3, tiny_models.VOCAB)))
    return {"model": partial_drafter, "head": FeatureDrafter(head)}


def _kwargs(target, case, do_sample=False):
    kwargs = dict(inputs=IDS, attention_mask=MASK, max_new_tokens=12, do_sample=do_sample)
    if case == "embeds":  # the prompt as embeddings only
        kwargs.pop("inputs")
        kwargs["inputs_embeds"] = target.get_input_embeddings()(IDS).detach()
        return kwargs
    kwargs.update(copy.copy(case))
    return {name: value for name, value in kwargs.items() if value is not None or name != "max_new_tokens"}


def _same(ours, plain, prompt_len, pad):
    if isinstance(plain, torch.Tensor):
        return torch.equal(ours, plain)
    if not torch.equal(ours.sequences, plain.sequences):
        return False
    for name in ("scores", "logits"):
        mine, theirs = getattr(ours, name), getattr(plain, name)
        if (mine is None) != (theirs is None) or (mine is not None and len(mine) != len(theirs)):
            return False
        for t, (a, b) in enumerate(zip(mine or (), theirs or ())):
            live = plain.sequences[:, prompt_len + t] != pad  # rows still generating at t
            if not torch.allclose(a[live], b[live], atol=1e-4) or a[~live].any():  # past a row's end: 0
                return False
    return True


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("case", CASES)
def test_a_kwarg_gives_plain_generates_output_or_a_typed_error_first(target, drafters, case, spec, sampled):
    # Sampled, the tokens are a draw (the distribution is the target's: test_distribution.py); what is checked is
    # that every kwarg runs to an output, or is refused before the first forward, as greedy.
    _check(target, drafters, case, spec, sampled)


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
@pytest.mark.parametrize("case", CASES)
def test_other_architectures_read_the_kwargs_alike(arch, case):
    # Learned positions (GPT-2, which also reads token_type_ids) and another attention layout (Qwen2): greedy chains.
    target = tiny_models.BUILDERS[arch](seed=0)
    _check(target, {"model": tiny_models.perturbed(target, scale=0.1)}, case, "chain", sampled=False)


def _check(target, drafters, case, spec, sampled):
    kwargs = _kwargs(target, CASES[case], do_sample=sampled)
    pad = kwargs.get("pad_token_id", tiny_models.PAD)
    same = lambda ours, plain: sampled or _same(ours, plain, kwargs["inputs"].shape[1], pad)  # noqa: E731
    check_against_plain(target, kwargs, SPECS[spec](drafters), same)


def test_the_catalog_covers_outputs_refusals_and_errors_of_plain_generate(target, partial_drafter):
    # The catalog is only worth what it exercises: cases of all three outcomes, with the chain drafter.
    outcomes = set()
    for case in CASES.values():
        kwargs = _kwargs(target, case)
        try:
            target.generate(**kwargs, drafter=partial_drafter, gamma=3)
            outcomes.add("output")
        except errors.SpeculativeError:
            outcomes.add("refused")
        except Exception:  # noqa: BLE001
            outcomes.add("plain's error")
    assert outcomes == {"output", "refused", "plain's error"}
