"""Prompt lookup drafts trees: several earlier occurrences of the last n-gram give several branches, merged
into a trie. Greedy output equals plain generate() alone and in padded batches; sampled, the 3-token joint
follows the target (chi-square, N = 6000, seed 0, 0.999 quantile)."""

import pytest
import torch

import hf_specdec
import tiny_models
from hf_specdec.drafters.prompt_lookup import lookup_continuations, lookup_ngram, trie
from hf_specdec.policy import TreeDraftPolicy

#        5 6 7 9 | 5 6 8 1 | 5 6 7 2 | 3 | 5 6   (last 3-gram "3 5 6" never occurred; "5 6" three times)
HISTORY = torch.tensor([5, 6, 7, 9, 5, 6, 8, 1, 5, 6, 7, 2, 3, 5, 6])


def test_continuations_come_most_recent_first_and_distinct():
    found = [c.tolist() for c in lookup_continuations(HISTORY, max_ngram_size=3, length=3, max_branches=3)]
    assert found == [[7, 2, 3], [8, 1, 5], [7, 9, 5]]
    assert found[0] == lookup_ngram(HISTORY, 3, 3).tolist()  # the chain's proposal is the first branch
    assert [c.tolist() for c in lookup_continuations(HISTORY, 3, 3, 1)] == [[7, 2, 3]]
    # Shorter n-grams add branches when the longest has too few occurrences: the 2-gram "1 2" occurred once
    # (then 9 2), the 1-gram "2" also at index 3 (then 4 1) and at index 1 (then 9 2 again: not repeated).
    tail = torch.tensor([1, 2, 9, 2, 4, 1, 2])
    assert [c.tolist() for c in lookup_continuations(tail, 2, 2, 3)] == [[9, 2], [4, 1]]


def test_trie_merges_shared_prefixes_and_respects_the_node_budget():
    branches = [torch.tensor(c) for c in ([7, 2, 3], [8, 1, 5], [7, 9, 5])]
    tokens, parents = trie(branches, max_nodes=10)
    assert (tokens, parents) == ([7, 2, 3, 8, 1, 5, 9, 5], [0, 1, 2, 0, 4, 5, 1, 7])  # [7, 9, 5] shares node 1
    assert trie(branches, max_nodes=4) == ([7, 2, 3, 8], [0, 1, 2, 0])  # the first branch whole, then cut


def _repetitive_prompts(batch: int, seed: int):
    """Left-padded prompts that repeat short phrases with variations, so lookups find several branches."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(batch):
        phrase = torch.randint(3, tiny_models.VOCAB, (3,), generator=gen).tolist()
        row = []
        for _ in range(4):
            row += phrase + torch.randint(3, tiny_models.VOCAB, (2,), generator=gen).tolist()
        rows.append(row[: 12 + int(torch.randint(0, 8, (1,), generator=gen))])
    width = max(len(r) for r in rows)
    ids = torch.full((batch, width), tiny_models.PAD)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, width - len(row) :] = torch.tensor(row)
        mask[b, width - len(row) :] = 1
    return ids, mask


@pytest.mark.parametrize("batch", [1, 4])
def test_prompt_lookup_trees_greedy_equal_target(target, batch):
    ids, mask = _repetitive_prompts(batch, seed=batch)
    expected = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=30)
    stats = hf_specdec.SpeculativeStats()
    policy = TreeDraftPolicy(top_k=3, max_depth=4, max_nodes=10)
    out = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=30, drafter="prompt_lookup",
                          gamma=policy, stats=stats)
    assert torch.equal(out, expected)
    assert int(stats.tree_sizes[2:].sum()) > 0  # trees with more than one branch or node were drafted


def test_sampled_prompt_lookup_trees_follow_the_joint_distribution():
    from joint_util import sample_continuations
    from stats_util import fits
    from test_distribution import PROMPT, SETTINGS, VOCAB, _model, exact_joint

    target = _model(0)
    prompt = torch.cat([PROMPT, torch.tensor([[7, 3, 5, 7, 1, 5]])], dim=1)  # "5" and "7" recur: several branches
    kwargs = SETTINGS["top_k"]
    policy = TreeDraftPolicy(top_k=3, max_depth=3, max_nodes=8)
    tokens, stats = sample_continuations(target, prompt, "prompt_lookup", policy, num_samples=6000, num_tokens=3, seed=0, **kwargs)
    assert int(stats.accepted.sum()) >= 200 and int(stats.tree_sizes[2:].sum()) > 0  # drafts accepted, trees branched
    counts = torch.bincount((tokens * torch.tensor([VOCAB**2, VOCAB, 1])).sum(dim=1), minlength=VOCAB**3)
    import test_distribution

    original = test_distribution.PROMPT
    test_distribution.PROMPT = prompt  # exact_joint enumerates after the module's prompt
    try:
        joint = exact_joint(target, kwargs)
    finally:
        test_distribution.PROMPT = original
    assert fits(counts, joint)
