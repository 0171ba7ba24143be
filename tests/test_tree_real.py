"""Draft trees on the real SmolLM2-135M-Instruct with the shipped model drafter and the shipped EAGLE-3 head:
greedy output (fp32) equals the target's own, alone and in a padded batch, and a tree commits more tokens
per target forward than the best chain of those tried (marked `real`: `make test-real`)."""

from __future__ import annotations

import pytest
import torch

import hf_specdec
from test_real_speculative import CHATS, _chats, feature_drafter, pair  # noqa: F401  (the fixtures)

pytestmark = pytest.mark.real

TREE = hf_specdec.TreeDraftPolicy(top_k=4, max_depth=6, max_nodes=16)


def test_tree_greedy_equality_alone_and_in_a_padded_batch(pair):  # noqa: F811
    target, drafter, tokenizer = pair
    for texts in ([CHATS[0]], [CHATS[1]], CHATS):
        inputs = _chats(tokenizer, texts)
        expected = target.generate(**inputs, max_new_tokens=40, do_sample=False)
        out = target.generate(**inputs, max_new_tokens=40, do_sample=False, drafter=drafter, gamma=TREE)
        assert torch.equal(out, expected), texts


def test_a_tree_commits_more_tokens_per_target_forward_than_chains(pair):  # noqa: F811
    # Measured (fp32, 4 chats x 48 tokens alone): chains gamma 1 / 2 / 4: 1.39 / 1.58 / 1.69 tokens per target
    # forward; this tree 2.08. Tokens per forward only: whether the wider forward pays is the CPU's business.
    target, drafter, tokenizer = pair
    rates = {}
    for gamma in (2, 4, TREE):
        stats = hf_specdec.SpeculativeStats()
        for text in CHATS:
            target.generate(**_chats(tokenizer, [text]), max_new_tokens=48, do_sample=False, drafter=drafter,
                            gamma=gamma, stats=stats)
        rates[gamma] = stats.tokens_per_step
    assert rates[TREE] > 1.15 * max(rates[2], rates[4])


def test_feature_head_trees_greedy_equality_and_gain(pair, feature_drafter):  # noqa: F811
    # Measured (fp32, 6 chats x 48 tokens alone): chains gamma 1 / 2 / 4: 1.42 / 1.54 / 1.62 tokens per target
    # forward; TreeDraftPolicy(top_k=4, max_depth=4, max_nodes=16) 2.02, (top_k=8, max_depth=6, max_nodes=32) 2.19.
    target, _, tokenizer = pair
    tree = hf_specdec.TreeDraftPolicy(top_k=4, max_depth=4, max_nodes=16)
    for texts in ([CHATS[0]], CHATS):
        inputs = _chats(tokenizer, texts)
        expected = target.generate(**inputs, max_new_tokens=40, do_sample=False)
        out = target.generate(**inputs, max_new_tokens=40, do_sample=False, drafter=feature_drafter, gamma=tree)
        assert torch.equal(out, expected), texts
    rates = {}
    for gamma in (4, tree):
        stats = hf_specdec.SpeculativeStats()
        for text in CHATS:
            target.generate(**_chats(tokenizer, [text]), max_new_tokens=48, do_sample=False, drafter=feature_drafter,
                            gamma=gamma, stats=stats)
        rates[gamma] = stats.tokens_per_step
    assert rates[tree] > 1.15 * rates[4]
