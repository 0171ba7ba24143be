"""Kwargs combined, batch shapes and drafters drawn at random (seeded): greedy fp32 output equal to plain generate()'s
(sequences token for token; scores where asked), or a typed error before the target's first forward (Whisper's own
language detection may run first: docs/encoder-decoder.md), and the model's generation_config unchanged, for
decoder-only, text encoder-decoder and Whisper targets, on the call and its repeat (which starts from what the first
call's default learned); sampled draws: an output or a typed refusal first, alike.

The catalog (test_kwargs.py) passes one kwarg at a time on one batch; these draw up to three together, on batches of
1 to 5 rows of mixed lengths, with every policy kind."""

import copy
import random

import pytest
import torch
from transformers import StoppingCriteriaList, WhisperForConditionalGeneration

import tiny_models
import tiny_seq2seq
from kwargs_util import check_against_plain
from hf_specdec import CostAwareDraftPolicy, DraftPolicy, FeatureDrafter, TreeDraftPolicy
from hf_specdec.distill.feature_head import build_feature_head

EOS = tiny_models.EOS
KWARGS = {  # each draws its values from the trial's random source
    "min_new_tokens": lambda r: dict(min_new_tokens=r.randint(1, 12)),
    "min_length": lambda r: dict(min_length=r.randint(5, 20)),
    "no_repeat_ngram_size": lambda r: dict(no_repeat_ngram_size=r.randint(1, 3)),
    "repetition_penalty": lambda r: dict(repetition_penalty=r.choice([0.8, 1.3, 2.0])),
    "sequence_bias": lambda r: dict(sequence_bias={(5,): 3.0, (9, 14): -2.0}),
    "bad_words_ids": lambda r: dict(bad_words_ids=[[5], [9, 14]]),
    "suppress_tokens": lambda r: dict(suppress_tokens=[5, 9]),
    "begin_suppress_tokens": lambda r: dict(begin_suppress_tokens=[5, 9]),
    "forced_eos_token_id": lambda r: dict(forced_eos_token_id=EOS),
    "exponential_decay_length_penalty": lambda r: dict(exponential_decay_length_penalty=(4, 1.5)),
    "eos_token_id list": lambda r: dict(eos_token_id=[EOS, r.randint(3, 90)]),
    "static cache": lambda r: dict(cache_implementation="static"),
    "scores": lambda r: dict(output_scores=True, return_dict_in_generate=True),
    "stopping_criteria": lambda r: dict(
        stopping_criteria=StoppingCriteriaList([lambda ids, scores, **k: ids[:, -1] == 17])),
    "ignored sampling flags": lambda r: dict(temperature=0.5, top_k=3),
    "num_return_sequences": lambda r: dict(num_return_sequences=2),
}
SEQ2SEQ_KWARGS = ("min_new_tokens", "no_repeat_ngram_size", "repetition_penalty", "eos_token_id list", "scores",
                  "suppress_tokens", "num_return_sequences")
WHISPER_KWARGS = ("no_repeat_ngram_size", "repetition_penalty", "scores", "suppress_tokens")
WHISPER_OPTIONS = ({}, dict(language="en"), dict(task="translate", language="de"), dict(return_timestamps=True))


def _policy(r: random.Random):
    """None (the default), or a fixed chain, a tree, transformers' heuristic, a confidence stop, a tuned default."""
    return r.choice([
        lambda: None,
        lambda: r.randint(1, 7),
        lambda: TreeDraftPolicy(top_k=r.randint(1, 4), max_depth=r.randint(1, 5), max_nodes=r.randint(1, 12)),
        lambda: "auto",
        lambda: DraftPolicy(max_gamma=r.randint(1, 6), min_confidence=r.random()),
        lambda: CostAwareDraftPolicy(max_gamma=r.randint(1, 6), trees=r.random() < 0.5,
                                     exploration=r.choice([0.0, 0.08, 1.0])),
    ])()


@pytest.fixture(scope="module")
def models(target, partial_drafter, unrelated_drafter):
    torch.manual_seed(0)
    head = FeatureDrafter(build_feature_head(target, "eagle3", draft_vocab=list(range(3, tiny_models.VOCAB))))
    text = {family: tiny_seq2seq.quiet_late_layers(tiny_seq2seq.text(family, seed=3)) for family in tiny_seq2seq.TEXT}
    whisper = tiny_seq2seq.quiet_late_layers(tiny_seq2seq.whisper(seed=2))
    return dict(
        decoder=(target, [partial_drafter, unrelated_drafter, head, "prompt_lookup"]),
        **{family: (model, [tiny_seq2seq.shallow(model), "prompt_lookup"]) for family, model in text.items()},
        whisper=(whisper, [tiny_seq2seq.whisper_reader(whisper), tiny_seq2seq.shallow(whisper), "prompt_lookup"]),
    )


def _trial(r: random.Random, models, sampled: bool = False) -> tuple:
    """(target, generate() kwargs, drafter keywords) of one random call."""
    kind = r.choice(["decoder"] * 3 + ["text", "whisper"])
    batch, seed = r.randint(1, 5), r.randrange(1000)
    kwargs = dict(max_new_tokens=r.randint(1, 24), do_sample=sampled)
    if kind == "decoder":
        ids, mask = tiny_models.prompts(batch, seed=seed, min_len=r.randint(1, 6), max_len=r.randint(6, 20))
        kwargs.update(inputs=ids, attention_mask=mask)
        names = r.sample(list(KWARGS), r.randint(0, 3))
    elif kind == "text":
        kind, batch = r.choice(tiny_seq2seq.TEXT), 1 if r.random() < 0.6 else batch  # (batches: refused, typed)
        ids, mask = tiny_seq2seq.sources(batch, seed=seed)
        kwargs.update(input_ids=ids, attention_mask=mask)
        names = r.sample(SEQ2SEQ_KWARGS, r.randint(0, 2))
    else:
        kwargs.update(input_features=tiny_seq2seq.audio(batch, seed=seed), **r.choice(WHISPER_OPTIONS))
        names = r.sample(WHISPER_KWARGS, r.randint(0, 2))
    for name in names:
        kwargs.update(KWARGS[name](r))
    target, drafters = models[kind]
    return target, kwargs, dict(drafter=r.choice(drafters), gamma=_policy(r))


def _same(ours, plain) -> bool:
    """Equal tokens, and equal scores within float error (-inf where plain has it), through Whisper's segments; scores
    of the rows that ran to the end only (past a row's end ours are 0, as test_kwargs.py checks)."""
    if isinstance(plain, torch.Tensor):
        return isinstance(ours, torch.Tensor) and ours.shape == plain.shape and (
            torch.equal(ours, plain) if not plain.is_floating_point() else torch.allclose(ours, plain, atol=1e-4))
    if isinstance(plain, list | tuple):
        return isinstance(ours, list | tuple) and len(ours) == len(plain) and all(map(_same, ours, plain))
    if isinstance(plain, dict):  # (transformers' outputs too: ours adds speculative_stats, leaves past_key_values out)
        keys = set(plain) - {"past_key_values"}
        if not keys <= set(ours):
            return False
        if "scores" in keys and "sequences" in keys:
            tokens = plain["sequences"]  # [batch, length] (a Whisper segment's: [length], one row)
            full = tokens.reshape(-1, tokens.shape[-1])[:, -1] != tiny_models.PAD  # [batch] rows that ran to the end
            rows = lambda scores: [step.reshape(len(full), -1)[full] for step in scores]  # noqa: E731
            keys.remove("scores")
            if not _same(rows(ours["scores"]), rows(plain["scores"])):
                return False
        return all(_same(ours[key], plain[key]) for key in keys)
    return ours == plain


@pytest.mark.parametrize("sampled, seed", [(False, seed) for seed in range(6)] + [(True, 6), (True, 7)])
def test_random_combinations_equal_plain_generate_or_are_refused_first(models, sampled, seed):
    # Sampled, the tokens are a draw (test_distribution.py checks their law): what is checked is an output or a
    # typed refusal first, as greedy.
    r, outputs = random.Random(seed), 0
    for _ in range(8):
        target, kwargs, spec = _trial(r, models, sampled)
        drafter = spec["drafter"] if isinstance(spec["drafter"], str) else type(spec["drafter"]).__name__
        said = f"{type(target).__name__}, {sorted(kwargs)}, drafter {drafter}, gamma {spec['gamma']}"
        detecting = isinstance(target, WhisperForConditionalGeneration) and "language" not in kwargs  # (its own
        outputs += check_against_plain(target, kwargs, spec, lambda ours, plain: sampled or _same(ours, plain), said,
                                       calls=2, forwards_allowed=int(detecting))  # generate() detects it first)
    assert outputs >= 4, "a quarter of the calls at least must decode, or the comparison checks little"


def test_the_comparison_tells_a_different_token_and_a_different_score():
    # The negative control for `_same`: a token changed anywhere, or a score beyond float error, is told apart.
    tokens = torch.tensor([[5, 6, 7]])
    scores = (torch.tensor([[0.5, -float("inf")]]),)
    result = {"sequences": tokens, "scores": scores}
    output = {"sequences": tokens, "segments": [[{"tokens": tokens[0], "result": result}]]}
    assert _same(copy.deepcopy(output), output)
    changed = copy.deepcopy(output)
    changed["segments"][0][0]["tokens"][1] = 9
    assert not _same(changed, output)
    shifted = copy.deepcopy(output)
    shifted["segments"][0][0]["result"]["scores"] = (torch.tensor([[0.51, -float("inf")]]),)
    assert not _same(shifted, output)
