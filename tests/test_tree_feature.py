"""The feature head (EAGLE-1 / EAGLE-3) drafts trees: a node's head entry pairs the state the head predicted
at its parent with the node's token (the root's: the target's state, exact). Greedy output equals plain
generate() alone and in padded batches; sampled, the 3-token joint follows the target (chi-square, N = 6000,
seed 0, 0.999 quantile, with test_feature_drafter's control against another target's joint)."""

import pytest
import torch

import hf_specdec
import tiny_models
from hf_specdec.distill.feature_head import build_feature_head
from hf_specdec.drafters.feature import FeatureDrafter
from hf_specdec.policy import TreeDraftPolicy
from joint_util import exact_joint, joint_chi_square, sample_continuations
from test_feature_drafter import LAYERS, feature_target, heads  # noqa: F401  (fixtures)

TREE = TreeDraftPolicy(top_k=3, max_depth=4, max_nodes=12)


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_feature_head_trees_greedy_equal_target(feature_target, heads, kind, batch):  # noqa: F811
    ids, mask = tiny_models.prompts(batch, seed=3)
    expected = feature_target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=30)
    stats = hf_specdec.SpeculativeStats()
    out = feature_target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=30,
                                  drafter=FeatureDrafter(heads[kind]), gamma=TREE, stats=stats)
    assert torch.equal(out, expected)
    assert stats.acceptance_rate > 0.2 and int(stats.tree_sizes[2:].sum()) > 0  # the trained head's trees work


def test_a_one_child_tree_drafts_what_the_chain_drafts(feature_target, heads):  # noqa: F811
    # Alone, top_k = 1 grows the head's chain: the same acceptances step by step as gamma = 3.
    ids, _ = tiny_models.prompts(1, seed=3)
    histograms = []
    for gamma in (3, TreeDraftPolicy(top_k=1, max_depth=3, max_nodes=3)):
        stats = hf_specdec.SpeculativeStats()
        feature_target.generate(ids, do_sample=False, max_new_tokens=30, drafter=FeatureDrafter(heads["eagle3"]),
                                gamma=gamma, stats=stats)
        histograms.append(stats.histogram.tolist())
    assert histograms[0] == histograms[1]


def test_sampled_feature_head_trees_follow_the_joint_distribution():
    vocab = 10
    target = tiny_models.llama(seed=0, vocab=vocab, hidden=32, layers=LAYERS)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.15)
    target.generation_config.eos_token_id = None
    head = build_feature_head(target, "eagle3", draft_vocab=[0, 1, 3, 4, 5, 7, 9])
    prompt = torch.tensor([[1, 5, 7, 3, 5]])
    samples, stats = sample_continuations(
        target, prompt, FeatureDrafter(head), TreeDraftPolicy(top_k=3, max_depth=3, max_nodes=8), num_samples=6000,
        temperature=1.2, top_k=6,
    )
    assert 0.05 < stats.acceptance_rate < 0.95
    statistic, threshold = joint_chi_square(samples, exact_joint(target, prompt, 3, 1.2, 6))
    assert statistic < threshold, (statistic, threshold)
    other = tiny_models.llama(seed=3, vocab=vocab, hidden=32, layers=LAYERS)
    with torch.no_grad():
        other.lm_head.weight.mul_(0.15)
    statistic, threshold = joint_chi_square(samples, exact_joint(other, prompt, 3, 1.2, 6))
    assert statistic > threshold, (statistic, threshold)


def test_the_target_states_reach_the_drafter_at_their_tokens_buffer_index():
    # Row: committed tokens up to buffer index 9 (lens = 10, the root at 9; index 8 was caught up too); nodes
    # 1 and 2 at depth 1, node 3 (child of 1) at depth 2; the accepted path is 1 -> 3: its tokens now sit at
    # buffer indices 10 and 11, node 2's column is no token of the row.
    from hf_specdec.cache import TreeColumns
    from hf_specdec.tree import DraftTree
    from hf_specdec.steps import _path_features

    tree = DraftTree(tokens=torch.tensor([[7, 4, 5, 6]]), parents=torch.tensor([[-1, 0, 0, 1]]), valid=torch.ones(1, 4, dtype=torch.bool))
    columns = TreeColumns(hidden=torch.arange(5.0).view(1, 5, 1), index=torch.tensor([[8, 9, -1, -1, -1]]),
                          nodes=torch.tensor([[-1, -1, 1, 2, 3]]), positions=torch.tensor([[8, 9, 10, 10, 11]]),
                          fed=torch.ones(1, 5, dtype=torch.bool))
    features = _path_features(columns, torch.tensor([[1, 3, -1, -1]]), torch.tensor([10]), tree)
    assert features.fed.tolist() == [[True, True, True, False, True]]
    assert features.index[features.fed].tolist() == [8, 9, 10, 11]


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_one_child_tree_drafts_what_the_chain_drafts_on_more_prompts(feature_target, heads, seed):  # noqa: F811
    ids, _ = tiny_models.prompts(1, seed=seed)
    histograms = []
    for gamma in (2, TreeDraftPolicy(top_k=1, max_depth=2, max_nodes=2)):
        stats = hf_specdec.SpeculativeStats()
        feature_target.generate(ids, do_sample=False, max_new_tokens=40, drafter=FeatureDrafter(heads["eagle1"]),
                                gamma=gamma, stats=stats)
        histograms.append(stats.histogram.tolist())
    assert histograms[0] == histograms[1]
