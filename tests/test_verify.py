"""verify.py on hand-built distributions: greedy and stochastic acceptance, residual, bonus token."""

import pytest
import torch

from hf_specdec import verify
from stats_util import fits


def _probs(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_greedy_all_none_partial():
    # target argmax per position: 2, 0, 1, then bonus 3
    scores = torch.eye(4)[[2, 0, 1, 3]][None].repeat(3, 1, 1)  # [3, 4, 4]
    drafts = torch.tensor([[2, 0, 1], [1, 0, 1], [2, 0, 3]])
    committed, num_accepted = verify.verify_greedy(drafts, scores)
    assert num_accepted.tolist() == [3, 0, 2]
    assert committed.tolist() == [[2, 0, 1, 3], [2, -1, -1, -1], [2, 0, 1, -1]]


def test_greedy_gamma_one_and_num_drafted():
    scores = torch.eye(4)[[1, 2]][None]  # [1, 2, 4]
    committed, n = verify.verify_greedy(torch.tensor([[1]]), scores)
    assert (committed.tolist(), n.tolist()) == ([[1, 2]], [1])
    # A slot that holds no real draft is never accepted, even if it happens to match.
    committed, n = verify.verify_greedy(torch.tensor([[1]]), scores, num_drafted=torch.tensor([0]))
    assert (committed.tolist(), n.tolist()) == ([[1, -1]], [0])


def test_a_step_without_drafts_commits_the_targets_own_token():
    # Greedy: each row's argmax. Sampled: verify.draw from the generator's state (not generate()'s multinomial, which
    # costs an exponential per vocabulary entry); a different seed (control) draws differently.
    scores = torch.tensor([[[0.1, 2.0, 0.3]], [[5.0, 0.0, 1.0]]])  # [2, 1, 3]
    no_drafts = torch.zeros(2, 0, dtype=torch.long)
    committed, n = verify.verify_greedy(no_drafts, scores)
    assert (committed.tolist(), n.tolist()) == ([[1], [0]], [0, 0])
    probs = torch.full((2, 1, 1000), 1e-3)
    committed, n = verify.verify_stochastic(no_drafts, torch.zeros(2, 0, 1000), probs, torch.Generator().manual_seed(3))
    expected = verify.draw(probs[:, 0], torch.Generator().manual_seed(3))[:, None]
    other = verify.draw(probs[:, 0], torch.Generator().manual_seed(4))[:, None]
    assert torch.equal(committed, expected) and not torch.equal(committed, other) and n.tolist() == [0, 0]


def test_residual_is_normalised_positive_part():
    target = _probs([0.5, 0.3, 0.2, 0.0])
    draft = _probs([0.1, 0.6, 0.1, 0.2])
    expected = torch.tensor([[0.4, 0.0, 0.1, 0.0]]) / 0.5
    assert torch.allclose(verify.residual_probs(target, draft), expected)
    # p == q: no positive part; falls back to p instead of dividing by zero.
    assert torch.allclose(verify.residual_probs(target, target), target)


def test_identical_distributions_accept_everything():
    probs = torch.softmax(torch.randn(64, 4, 10, generator=torch.Generator().manual_seed(0)), dim=-1)
    drafts = torch.multinomial(probs[:, :3].reshape(-1, 10), 1, generator=torch.Generator().manual_seed(1)).view(64, 3)
    _, n = verify.verify_stochastic(drafts, probs[:, :3], probs, torch.Generator().manual_seed(2))
    assert (n == 3).all()


def test_draft_outside_target_support_is_always_rejected():
    # p gives token 0 probability 0 (e.g. cut by top-k, -inf logit); the draft proposes it.
    target = _probs([0.0, 0.7, 0.3])[None].repeat(500, 2, 1)
    draft = _probs([0.9, 0.05, 0.05])[None].repeat(500, 1, 1)
    committed, n = verify.verify_stochastic(torch.zeros(500, 1, dtype=torch.long), draft, target,
                                            torch.Generator().manual_seed(0))
    assert (n == 0).all()
    assert (committed[:, 0] != 0).all()  # the recovered token never has p = 0


def _first_token_distribution(target, draft, n_rows, seed, sampler=verify.verify_stochastic):
    """Empirical distribution of the first committed token, drafts sampled from `draft`."""
    gen = torch.Generator().manual_seed(seed)
    vocab = target.shape[-1]
    drafts = torch.multinomial(draft.expand(n_rows, vocab), 1, generator=gen)  # [n, 1]
    committed, _ = sampler(drafts, draft.expand(n_rows, 1, vocab), target.expand(n_rows, 2, vocab), gen)
    return torch.bincount(committed[:, 0], minlength=vocab)


TARGET = _probs([0.05, 0.4, 0.3, 0.0, 0.25])  # one token with p = 0
DRAFT = _probs([0.3, 0.1, 0.2, 0.3, 0.1])  # mass where p has none, too little where p has much
N = 20_000  # rows; seed 0; threshold: chi-square 0.999 quantile (stats_util)


def test_first_token_follows_target_distribution():
    counts = _first_token_distribution(TARGET, DRAFT, N, seed=0)
    assert fits(counts, TARGET)


def _sampler_with_p_as_residual(drafts, draft_probs, target_probs, generator):
    """Negative control: a classic bug, sampling from p instead of norm(max(0, p - q)) after a rejection."""
    original = verify.residual_probs
    verify.residual_probs = lambda target, draft: target
    try:
        return verify.verify_stochastic(drafts, draft_probs, target_probs, generator)
    finally:
        verify.residual_probs = original


def _sampler_accepting_everything(drafts, draft_probs, target_probs, generator):
    """Negative control: accept every draft (returns the drafter's distribution)."""
    return verify.verify_stochastic(drafts, target_probs[:, :-1], target_probs, generator)


@pytest.mark.parametrize("wrong", [_sampler_with_p_as_residual, _sampler_accepting_everything])
def test_negative_controls_fail_the_same_test(wrong):
    counts = _first_token_distribution(TARGET, DRAFT, N, seed=0, sampler=wrong)
    assert not fits(counts, TARGET)


def test_one_hot_draft_accepts_with_target_probability():
    # A deterministic drafter (prompt lookup) proposes token 1: accepted with probability p(1) = 0.4.
    n_rows = N
    drafts = torch.ones(n_rows, 1, dtype=torch.long)
    one_hot = torch.nn.functional.one_hot(drafts, 5).float()  # [n, 1, 5]
    committed, n = verify.verify_stochastic(drafts, one_hot, TARGET.expand(n_rows, 2, 5), torch.Generator().manual_seed(3))
    accepted = n.float().mean().item()
    assert abs(accepted - 0.4) < 4 * (0.4 * 0.6 / n_rows) ** 0.5
    assert fits(torch.bincount(committed[:, 0], minlength=5), TARGET)


def test_bonus_token_comes_from_the_last_target_distribution():
    # Drafts always accepted (p == q on position 0); the bonus follows p at position 1.
    first = _probs([0.0, 1.0, 0.0])
    last = _probs([0.2, 0.3, 0.5])
    target = torch.stack([first[0], last[0]])[None].expand(N, 2, 3)
    drafts = torch.ones(N, 1, dtype=torch.long)
    committed, n = verify.verify_stochastic(drafts, target[:, :1], target, torch.Generator().manual_seed(4))
    assert (n == 1).all()
    assert fits(torch.bincount(committed[:, 1], minlength=3), last[0])


def test_explicit_generator_makes_results_reproducible():
    probs = torch.softmax(torch.randn(8, 4, 6, generator=torch.Generator().manual_seed(0)), dim=-1)
    drafts = torch.randint(0, 6, (8, 3), generator=torch.Generator().manual_seed(1))
    first = verify.verify_stochastic(drafts, probs[:, :3], probs.flip(0), torch.Generator().manual_seed(7))
    second = verify.verify_stochastic(drafts, probs[:, :3], probs.flip(0), torch.Generator().manual_seed(7))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


# Two rows drawn in one call, each with zero-mass tokens at its ends and inside (the CDF's edge cases).
DRAW_ROWS = _probs([0.0, 0.5, 0.0, 0.3, 0.2, 0.0], [0.0, 0.1, 0.6, 0.0, 0.3, 0.0])


def _drawn_counts(draw, seed):
    """Counts of each row's tokens over N batched draws (seed `seed`), [2, vocab]."""
    tokens = draw(DRAW_ROWS.repeat(N, 1), torch.Generator().manual_seed(seed)).view(N, 2)
    return torch.stack([torch.bincount(tokens[:, r], minlength=DRAW_ROWS.shape[1]) for r in range(2)])


def test_draw_follows_each_rows_distribution_and_never_a_zero_mass_token():
    # N = 20,000 draws per row, seed 5, chi-square at the 0.999 quantile (stats_util).
    counts = _drawn_counts(verify.draw, seed=5)
    assert all(fits(counts[r], DRAW_ROWS[r]) for r in range(2))
    assert (counts[DRAW_ROWS == 0] == 0).all()


def test_draw_negative_control_every_row_from_the_first_rows_distribution_fails():
    counts = _drawn_counts(lambda probs, gen: verify.draw(probs[:1].expand_as(probs), gen), seed=5)
    assert not fits(counts[1], DRAW_ROWS[1])


def test_draw_is_reproducible_with_an_explicit_generator_and_keeps_the_leading_shape():
    probs = torch.softmax(torch.randn(3, 4, 50, generator=torch.Generator().manual_seed(0)), dim=-1)
    first = verify.draw(probs, torch.Generator().manual_seed(1))
    assert first.shape == (3, 4) and torch.equal(first, verify.draw(probs, torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("vocab", [49152, 32000, 50257, 2048, 151])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_argmax_is_torchs_first_maximum(vocab, dtype):
    # The blocked CPU argmax returns torch's index: the first maximum (ties within and across blocks), the first
    # NaN, index 0 of an all -inf row, the first +inf; any leading shape, strided (a sliced vocabulary) or not.
    generator = torch.Generator().manual_seed(vocab)
    scores = torch.randn(8, 3, vocab, generator=generator).to(dtype)
    scores[0, 0, [5, vocab - 2]] = 50.0  # a tie across blocks
    scores[0, 1, [vocab // 2, vocab // 2 + 1]] = 50.0  # a tie inside a block
    scores[1, 0, [vocab - 1, 9]] = float("nan")
    scores[1, 1] = float("-inf")
    scores[1, 2, [vocab // 3, vocab - 1]] = float("inf")
    scores[2] = scores[2].round()  # many ties
    scores[3, 0, -1] = 60.0  # the very last score
    for case in (scores, scores[..., : vocab - 1], scores[:, 0], scores[0, 0], scores[:0]):
        assert torch.equal(verify.argmax(case), case.argmax(dim=-1))
