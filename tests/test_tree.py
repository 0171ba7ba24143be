"""tree.py: EAGLE-2 tree construction on hand-built drafter probabilities, ancestors, depths, positions and
the tree attention mask, each against a naive per-node definition."""


import pytest
import torch

from hf_specdec import tree as trees
from hf_specdec.tree import DraftTree, build_tree
from tree_util import node_paths

VOCAB = 5


def table_expand(table):
    """An `Expand` whose drafter probabilities are looked up by (row, path from the root)."""

    def expand(candidates, frontier):
        probs = torch.zeros(*frontier.shape, VOCAB)
        for row in range(frontier.shape[0]):
            paths = node_paths(candidates, row)
            for slot, node in enumerate(frontier[row].tolist()):
                if node >= 0:
                    probs[row, slot] = torch.tensor(table(row, paths[node]))
        return probs

    return expand


# Hand-built drafter: at the root 0.5 / 0.25 / 0.15 / 0.1 / 0; after token 0: token 2 (0.6), token 1 (0.2); after
# token 1: token 0 (0.9), token 1 (0.06). Scores: [0] .5, [0, 2] .3, [1] .25, [1, 0] .225, [0, 1] .1, [1, 1] .015.
HAND = {
    (): [0.5, 0.25, 0.15, 0.1, 0.0],
    (0,): [0.1, 0.2, 0.6, 0.1, 0.0],
    (1,): [0.9, 0.06, 0.04, 0.0, 0.0],
}


def test_best_first_tree_on_hand_built_probabilities():
    expand = table_expand(lambda row, path: HAND[path])
    tree = build_tree(torch.tensor([7]), expand, top_k=2, max_depth=2, max_nodes=4)
    # Kept: [0], [1], [0, 2], [1, 0] (not [0, 1], .1, nor [1, 1]); in the order they were made.
    assert tree.tokens.tolist() == [[7, 0, 1, 2, 0]]
    assert tree.parents.tolist() == [[-1, 0, 0, 1, 2]]
    assert tree.depths().tolist() == [[0, 1, 1, 2, 2]]
    # With room for 3 the best three are [0] .5, [0, 2] .3, [1] .25.
    tree = build_tree(torch.tensor([7]), expand, top_k=2, max_depth=2, max_nodes=3)
    assert tree.tokens.tolist() == [[7, 0, 1, 2]] and tree.parents.tolist() == [[-1, 0, 0, 1]]


def test_frontier_is_the_best_top_k_of_a_depth_not_every_node():
    # top_k = 1: only [0] is expanded at depth 1 although [1] is kept; depth 3 is never reached below [1].
    table = {(): [0.5, 0.45, 0.05, 0, 0], (0,): [0, 0, 0.9, 0.1, 0], (0, 2): [0.2, 0.8, 0, 0, 0]}
    tree = build_tree(torch.tensor([3]), table_expand(lambda row, path: table[path]), top_k=1, max_depth=3, max_nodes=8)
    assert tree.tokens.tolist() == [[3, 0, 2, 1]] and tree.parents.tolist() == [[-1, 0, 1, 2]]


def naive_eagle2(table, row, top_k, max_depth, max_nodes, row_depth):
    """EAGLE-2 written out per row with Python lists: [(path, parent path)] of the kept nodes, in the
    order they were made."""
    made = [((), 1.0)]  # (path, score), in the order made
    frontier = [()] if row_depth > 0 else []
    for depth in range(1, max_depth + 1):
        if not frontier:
            break
        new = []
        for path in frontier:
            probs = torch.tensor(table(row, path)).double()
            values, tokens = probs.topk(min(top_k, VOCAB))
            score = dict(made)[path]
            new += [(path + (t,), score * v) for v, t in zip(values.tolist(), tokens.tolist()) if v > 0]
        made += new
        frontier = [path for path, _ in sorted(new, key=lambda item: -item[1])[:top_k]] if depth < row_depth else []
    best = sorted(range(1, len(made)), key=lambda i: -made[i][1])[:max_nodes]
    return [made[i][0] for i in sorted(best)]


def random_table(seed, one_hot_every=0):
    """Drafter probabilities per (row, path), seeded; every `one_hot_every`-th path a one-point distribution
    (a child as likely as its parent: ties in the score that must keep parents first)."""

    def table(row, path):
        key = hash((seed, row, path)) % (2**31)
        gen = torch.Generator().manual_seed(key)
        if one_hot_every and key % one_hot_every == 0:
            return torch.nn.functional.one_hot(torch.tensor(key % VOCAB), VOCAB).float().tolist()
        logits = torch.randn(VOCAB, generator=gen) * 2
        logits[torch.randint(VOCAB, (1,), generator=gen)] = -float("inf")  # some token without mass
        return logits.softmax(-1).tolist()

    return table


@pytest.mark.parametrize("top_k, max_depth, max_nodes", [(1, 4, 4), (2, 3, 5), (3, 3, 8), (4, 2, 20), (2, 5, 3)])
def test_batched_construction_equals_naive_per_row_construction(top_k, max_depth, max_nodes):
    table = random_table(seed=top_k * 100 + max_depth, one_hot_every=3)
    row_depth = torch.tensor([max_depth, 1, 0, max_depth - 1])  # rows near max_length, an inactive row
    roots = torch.tensor([4, 3, 2, 1])
    tree = build_tree(roots, table_expand(table), top_k, max_depth, max_nodes, row_depth=row_depth)
    assert tree.valid[:, 0].all() and tree.tokens[:, 0].tolist() == roots.tolist()
    for row in range(4):
        expected = naive_eagle2(table, row, top_k, max_depth, max_nodes, int(row_depth[row]))
        num = int(tree.num_nodes[row])
        assert tree.valid[row].tolist() == [True] * num + [False] * (tree.valid.shape[1] - num)
        assert node_paths(tree, row)[1:num] == expected, row
        parents = tree.parents[row, 1:num]
        assert (parents < torch.arange(1, num)).all() and (parents >= 0).all()  # parents before children
        assert (tree.depths()[row, :num] <= int(row_depth[row])).all()
        assert (tree.tokens[row, num:] == -1).all() and (tree.parents[row, num:] == -1).all()


def test_chain_is_a_tree_with_one_child_per_node():
    tree = DraftTree.chain(torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]]), lengths=torch.tensor([4, 2]))
    assert tree.parents.tolist() == [[-1, 0, 1, 2], [-1, 0, -1, -1]]
    assert tree.tokens.tolist() == [[5, 6, 7, 8], [1, 2, -1, -1]]


# A hand tree: 0 -> 1, 2; 1 -> 3, 4; 2 -> 5; 4 -> 6; node 7 is padding.
PARENTS = torch.tensor([[-1, 0, 0, 1, 1, 2, 4, -1]])
VALID = torch.tensor([[True] * 7 + [False]])


def naive_ancestors(parents: list[int], node: int) -> set[int]:
    found = {node}
    while parents[node] >= 0:
        node = parents[node]
        found.add(node)
    return found


def test_ancestors_depths_and_positions_of_a_hand_tree():
    matrix = trees.ancestors(PARENTS)[0]
    for node in range(8):
        assert set(matrix[node].nonzero().squeeze(1).tolist()) == naive_ancestors(PARENTS[0].tolist(), node)
    assert trees.depths(PARENTS).tolist() == [[0, 1, 1, 2, 2, 2, 3, 0]]
    assert trees.positions(torch.tensor([10]), PARENTS).tolist() == [[10, 11, 11, 12, 12, 12, 13, 10]]


def test_tree_mask_sees_valid_cache_ancestors_and_itself_only():
    cache_valid = torch.tensor([[False, True, True, False, True]])
    mask = trees.tree_mask(cache_valid, trees.ancestors(PARENTS), VALID)[0]  # [8, 5 + 8]
    assert mask.shape == (8, 13)
    for node in range(8):
        if node == 7:  # padding: only itself
            expected = {5 + 7}
        else:
            expected = {1, 2, 4} | {5 + a for a in naive_ancestors(PARENTS[0].tolist(), node)}
        assert set(mask[node].nonzero().squeeze(1).tolist()) == expected, node


def test_visible_keys_with_a_cache_of_committed_tokens_is_the_tree_mask():
    # Keys: 5 cached committed columns (positions 0..4, one dead), then the 8 tree nodes of this forward.
    cache_valid = torch.tensor([[True, True, False, True, True]])
    tree_pos = trees.positions(torch.tensor([4]), PARENTS)  # the root is position 4... after 4 live tokens
    node_ids = torch.arange(8)[None]
    key_valid = torch.cat([cache_valid, VALID], dim=1)
    key_positions = torch.cat([torch.tensor([[0, 1, 2, 2, 3]]), tree_pos], dim=1)
    key_nodes = torch.cat([torch.full((1, 5), -1), node_ids], dim=1)
    visible = trees.visible_keys(key_valid, key_positions, key_nodes, tree_pos, node_ids, trees.ancestors(PARENTS))
    expected = trees.tree_mask(cache_valid, trees.ancestors(PARENTS), VALID)
    assert torch.equal(visible[:, :7], expected[:, :7])  # valid nodes; padding is the caller's business


def test_visible_keys_committed_queries_are_causal_in_position_space():
    # A committed chunk (catch-up tokens, node -1) next to a dead column: causal by position, blind to tree keys.
    key_valid = torch.tensor([[True, False, True, True, True]])
    key_positions = torch.tensor([[0, 1, 1, 2, 3]])
    key_nodes = torch.tensor([[-1, -1, -1, -1, 1]])
    visible = trees.visible_keys(
        key_valid, key_positions, key_nodes, torch.tensor([[1, 2]]), torch.tensor([[-1, -1]]), torch.ones(1, 2, 2, dtype=torch.bool)
    )
    assert visible[0].tolist() == [[True, False, True, False, False], [True, False, True, True, False]]
