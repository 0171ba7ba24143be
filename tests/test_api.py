"""The public API: the generate() keyword, install/uninstall, speculative_generate, outputs and stats."""

import pytest
import torch
from transformers import GenerationMixin

import hf_specdec
from hf_specdec.costs import StepCosts
import tiny_models


def test_install_is_idempotent_and_uninstall_restores_generate(target):
    patched = GenerationMixin.generate
    hf_specdec.install()
    assert GenerationMixin.generate is patched
    hf_specdec.uninstall()
    try:
        assert not hf_specdec.is_installed()
        assert GenerationMixin.generate.__module__ == "transformers.generation.utils"
        with pytest.raises(ValueError, match="drafter"):  # generate() itself rejects the unknown kwarg
            target.generate(tiny_models.prompts(1)[0], max_new_tokens=2, drafter=target)
        hf_specdec.uninstall()  # idempotent too
    finally:
        hf_specdec.install()
    assert hf_specdec.is_installed() and GenerationMixin.generate is patched


def test_generate_without_drafter_is_untouched(target):
    ids, mask = tiny_models.prompts(2, seed=1)
    torch.manual_seed(0)
    patched = target.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=8)
    hf_specdec.uninstall()
    try:
        torch.manual_seed(0)
        original = target.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=8)
    finally:
        hf_specdec.install()
    assert torch.equal(patched, original)


def test_our_keywords_without_drafter_are_an_error(target):
    with pytest.raises(TypeError, match="only apply with `drafter=`"):
        target.generate(tiny_models.prompts(1)[0], max_new_tokens=2, gamma=3)


def test_speculative_generate_without_patching(target, partial_drafter):
    ids, mask = tiny_models.prompts(2, seed=2)
    expected = target.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False)
    hf_specdec.uninstall()
    try:
        out = hf_specdec.speculative_generate(
            target, partial_drafter, ids, attention_mask=mask, gamma=3, max_new_tokens=10, do_sample=False
        )
    finally:
        hf_specdec.install()
    assert torch.equal(out, expected)


def test_return_dict_with_scores_logits_and_stats(target, partial_drafter):
    ids, mask = tiny_models.prompts(3, seed=3)
    kwargs = dict(attention_mask=mask, max_new_tokens=9, do_sample=False, return_dict_in_generate=True,
                  output_scores=True, output_logits=True, repetition_penalty=1.3)
    expected = target.generate(ids, **kwargs)
    out = target.generate(ids, drafter=partial_drafter, gamma=3, **kwargs)
    assert isinstance(out, hf_specdec.SpeculativeDecoderOnlyOutput)
    assert torch.equal(out.sequences, expected.sequences)
    assert len(out.scores) == len(expected.scores) == len(out.logits) == 9
    for ours, theirs in zip(out.scores, expected.scores):
        assert torch.allclose(ours, theirs, atol=1e-4)  # processed target scores, as generate() reports
    for ours, theirs in zip(out.logits, expected.logits):
        assert torch.allclose(ours, theirs, atol=1e-4)

    stats = out.speculative_stats
    assert stats.emitted.tolist() == [9, 9, 9]
    assert stats.target_forwards < 9 * 1  # fewer target forwards than tokens
    assert int(stats.histogram.sum()) == int(stats.steps.sum())
    assert stats.drafter_forwards > 0 and 0 < stats.acceptance_rate < 1
    assert stats.tokens_per_step == pytest.approx(27 / int(stats.steps.sum()))
    assert "alpha=" in stats.summary()


def test_stats_object_accumulates_rows_across_calls(target, partial_drafter):
    stats = hf_specdec.SpeculativeStats()
    for seed in (0, 1):
        ids, mask = tiny_models.prompts(2, seed=seed)
        target.generate(ids, attention_mask=mask, max_new_tokens=6, drafter=partial_drafter, stats=stats)
    assert stats.emitted.tolist() == [6, 6, 6, 6]
    assert stats.accepted_histogram.shape == (4, 7)  # default policy: max_gamma 6, 0..6 accepted


def test_sampling_is_reproducible_with_a_generator_and_with_the_global_seed(target, partial_drafter):
    """With a fixed gamma, or the default with pinned costs (its shapes then follow no measured time and no record of
    earlier calls: docs/policies.md)."""
    ids, mask = tiny_models.prompts(2, seed=4)
    pinned = hf_specdec.CostAwareDraftPolicy(costs=StepCosts(verify_ms={1: 10.0, 3: 11.0}, draft_ms=1.0))
    for gamma in (3, pinned):
        kwargs = dict(attention_mask=mask, do_sample=True, max_new_tokens=12, drafter=partial_drafter, gamma=gamma)
        first = target.generate(ids, generator=torch.Generator().manual_seed(5), **kwargs)
        second = target.generate(ids, generator=torch.Generator().manual_seed(5), **kwargs)
        other = target.generate(ids, generator=torch.Generator().manual_seed(6), **kwargs)
        assert torch.equal(first, second) and not torch.equal(first, other)
        torch.manual_seed(3)
        third = target.generate(ids, **kwargs)
        torch.manual_seed(3)
        assert torch.equal(third, target.generate(ids, **kwargs))


def test_generation_config_object_and_use_cache_false(target, partial_drafter):
    from transformers import GenerationConfig

    ids = tiny_models.prompts(1, seed=5)[0]
    config = GenerationConfig(max_new_tokens=7, do_sample=False, pad_token_id=0, eos_token_id=2, use_cache=False)
    out = target.generate(ids, generation_config=config, drafter=partial_drafter)
    assert torch.equal(out, target.generate(ids, generation_config=config))


def test_num_return_sequences_samples_independent_rows(target, partial_drafter):
    ids = tiny_models.prompts(1, seed=6)[0]
    out = target.generate(ids, do_sample=True, num_return_sequences=4, max_new_tokens=10, drafter=partial_drafter,
                          generator=torch.Generator().manual_seed(0))
    assert out.shape[0] == 4 and len({tuple(row.tolist()) for row in out}) > 1


def test_every_typed_error_is_exported():
    """A user catches our errors by name from the package: each SpeculativeError subclass is in __all__,
    and every exported name exists."""
    import inspect

    from hf_specdec import errors

    typed = {name for name, obj in inspect.getmembers(errors, inspect.isclass)
             if issubclass(obj, hf_specdec.SpeculativeError) and obj.__module__ == errors.__name__}
    assert typed - set(hf_specdec.__all__) == set()
    assert all(hasattr(hf_specdec, name) for name in hf_specdec.__all__)


def test_a_drafter_of_the_wrong_type_names_every_accepted_kind():
    from hf_specdec.drafters import resolve_drafter

    with pytest.raises(TypeError, match="feature head") as caught:
        resolve_drafter(3)
    assert "prompt_lookup" in str(caught.value) and "causal LM" in str(caught.value)
