"""CachedModel.forward_tree / keep_paths against the oracle: a naive forward per path.

fp32 tiny seeded models, a batch of 2 left-padded rows (plus a third with a root-only tree in the ragged
test). The logits at every tree node must equal those of a plain forward over the row's committed tokens
plus that node's path (atol 1e-5); after keeping an accepted path (its columns not adjacent) and
committing the next token, the next tree's logits must equal plain forwards over prefix + path + token +
each new path, step after step, across compaction.
"""

import pytest
import torch

import tiny_models
from hf_specdec.cache import CachedModel
from hf_specdec.tree import DraftTree, build_tree
from tree_util import node_paths

ATOL = 1e-5


@torch.no_grad()
def naive_logits(model, tokens: list[int]) -> torch.Tensor:
    return model(torch.tensor([tokens])).logits[0, -1].float()


def random_tree(roots: torch.Tensor, seed: int, top_k=3, max_depth=3, max_nodes=7, row_depth=None) -> DraftTree:
    """An EAGLE-2 tree on random drafter probabilities (its shape is what matters here)."""
    gen = torch.Generator().manual_seed(seed)

    def expand(candidates, frontier):
        return torch.softmax(torch.randn(*frontier.shape, tiny_models.VOCAB, generator=gen) * 3, dim=-1)

    return build_tree(roots, expand, top_k, max_depth, max_nodes, row_depth)


def _check_tree_logits(model, logits, sequences, pad, lens, tree):
    for row in range(sequences.shape[0]):
        prefix = sequences[row, pad[row] : lens[row]].tolist()
        for node, path in enumerate(node_paths(tree, row)):
            if tree.valid[row, node]:
                expected = naive_logits(model, prefix + list(path))
                assert torch.allclose(logits[row, node], expected, atol=ATOL), (row, node, path)


MODELS = {
    "llama": lambda: tiny_models.llama(seed=0),
    "gpt2": lambda: tiny_models.gpt2(seed=0),  # learned absolute positions: a wrong position shows at once
    "mistral_window4": lambda: tiny_models.windowed("mistral", window=4),  # the window cuts prompts and paths
}


@pytest.mark.parametrize("name", MODELS)
def test_tree_logits_and_rollback_to_a_path_equal_naive_forwards(name):
    model = MODELS[name]()
    gen = torch.Generator().manual_seed(1)
    pad = torch.tensor([0, 3])
    sequences = torch.full((2, 64), tiny_models.PAD)
    lens = torch.tensor([7, 7])  # row 1: 4 real tokens after 3 pads
    for row in range(2):
        sequences[row, pad[row] : lens[row]] = torch.randint(3, tiny_models.VOCAB, (int(lens[row] - pad[row]),), generator=gen)
    state = CachedModel(model, 2, torch.device("cpu"))
    holes = 0
    for step in range(4):
        tree = random_tree(sequences[torch.arange(2), lens - 1], seed=step)
        logits = state.forward_tree(sequences, pad, lens, tree)
        assert logits.shape[:2] == tree.tokens.shape
        _check_tree_logits(model, logits, sequences, pad, lens, tree)
        # Accept, per row, the path to a node chosen at random (often not the first child: holes).
        path = torch.full_like(tree.tokens, -1)
        num_accepted = torch.zeros(2, dtype=torch.long)
        for row in range(2):
            node = int(torch.randint(int(tree.num_nodes[row]), (1,), generator=gen))
            chain = []
            while node > 0:
                chain.append(node)
                node = int(tree.parents[row, node])
            chain.reverse()
            path[row, : len(chain)] = torch.tensor(chain, dtype=torch.long)
            num_accepted[row] = len(chain)
            holes += chain != list(range(1, len(chain) + 1))
        state.keep_paths(path, num_accepted)
        # Commit the path and one more token, as the loop does, then roll back to all but the last.
        for row in range(2):
            accepted = tree.tokens[row, path[row, : num_accepted[row]]]
            next_token = torch.randint(3, tiny_models.VOCAB, (1,), generator=gen)
            new = torch.cat([accepted, next_token])
            sequences[row, lens[row] : lens[row] + len(new)] = new
        lens = lens + num_accepted + 1
        state.rollback(torch.minimum(state.num_cached, lens - pad - 1), slack=2)  # small slack: compaction
        assert state.num_cached.tolist() == (lens - pad - 1).tolist()
    assert holes >= 2  # kept paths really skipped columns
    # A plain chain forward continues exactly from the tree steps.
    logits, _ = state.forward(sequences, pad, lens, 1)
    for row in range(2):
        expected = naive_logits(model, sequences[row, pad[row] : lens[row]].tolist())
        assert torch.allclose(logits[row, 0], expected, atol=ATOL)


def test_ragged_catch_up_and_a_root_only_row_in_one_tree_forward(target):
    # Row 0 has cached nothing (its whole prompt is fed with the tree), row 1 all but its root, row 2's tree
    # is its root alone (a finished row, or one at max_length); trees of different sizes share the forward.
    gen = torch.Generator().manual_seed(5)
    sequences = torch.randint(3, tiny_models.VOCAB, (3, 40), generator=gen)
    pad = torch.tensor([2, 0, 5])
    lens = torch.tensor([10, 12, 9])
    state = CachedModel(target, 3, torch.device("cpu"))
    state.forward(sequences, pad, torch.tensor([10, 11, 9]), 1)
    state.rollback(torch.tensor([0, 11, 3]), slack=40)
    tree = random_tree(sequences[torch.arange(3), lens - 1], seed=9, row_depth=torch.tensor([3, 1, 0]))
    assert tree.num_nodes[2] == 1 and tree.num_nodes[0] > tree.num_nodes[1] > 1
    logits = state.forward_tree(sequences, pad, lens, tree)
    _check_tree_logits(target, logits, sequences, pad, lens, tree)
    state.keep_paths(torch.full_like(tree.tokens, -1), torch.zeros(3, dtype=torch.long))  # nothing accepted
    assert state.num_cached.tolist() == (lens - pad).tolist()
    # The next step's root is the target's token after each row's old root.
    sequences[torch.arange(3), lens] = torch.tensor([4, 5, 6])
    logits, _ = state.forward(sequences, pad, lens + 1, 1)
    for row in range(3):
        expected = naive_logits(target, sequences[row, pad[row] : lens[row] + 1].tolist())
        assert torch.allclose(logits[row, 0], expected, atol=ATOL)



def test_rejected_nodes_leave_no_cache_columns_behind(target):
    # Every later forward attends over (and the cache copies) what a tree leaves: one row keeps only its
    # committed tokens and accepted path; rows of a batch at most the longest row's plus the rollback slack.
    gen = torch.Generator().manual_seed(3)
    sequences = torch.randint(3, tiny_models.VOCAB, (2, 80), generator=gen)
    for batch in (1, 2):
        pad, lens = torch.tensor([0, 2])[:batch], torch.tensor([8, 8])[:batch]
        state = CachedModel(target, batch, torch.device("cpu"))
        for step in range(5):
            tree = random_tree(sequences[torch.arange(batch), lens - 1], seed=step)
            state.forward_tree(sequences, pad, lens, tree)
            path = torch.full_like(tree.tokens, -1)
            path[0, 0] = 1  # row 0 accepts the root's first child, row 1 nothing
            num_accepted = torch.tensor([1, 0])[:batch]
            state.keep_paths(path, num_accepted)
            if batch == 1:
                assert state.valid.shape[1] == int(state.num_cached[0]) == int(state.valid.sum())
            lens = lens + num_accepted + 1
            state.rollback(torch.minimum(state.num_cached, lens - pad - 1), slack=2)
            assert state.valid.shape[1] <= int(state.num_cached.max()) + 2

def test_a_tree_must_be_resolved_before_the_cache_moves_on(target):
    sequences = torch.randint(3, tiny_models.VOCAB, (1, 20), generator=torch.Generator().manual_seed(2))
    state = CachedModel(target, 1, torch.device("cpu"))
    tree = random_tree(sequences[:, 5], seed=0)
    state.forward_tree(sequences, torch.tensor([0]), torch.tensor([6]), tree)
    with pytest.raises(RuntimeError, match="keep_paths"):
        state.rollback(torch.tensor([3]), slack=4)
    with pytest.raises(RuntimeError, match="keep_paths"):
        state.forward(sequences, torch.tensor([0]), torch.tensor([7]), 1)


def test_negative_control_a_mask_without_the_tree_changes_the_logits(target, monkeypatch):
    # Guards the oracle test: if nodes saw their siblings (a causal mask over the node columns), the logits
    # of a node after a sibling would differ from its path's naive forward.
    from hf_specdec import tree as trees

    causal = lambda valid, positions, key_nodes, query_positions, query_nodes, ancestors: (
        valid[:, None, :] & (torch.arange(valid.shape[1])[None, None, :] <= valid.shape[1] - query_nodes.shape[1] + torch.arange(query_nodes.shape[1])[None, :, None])
    )
    monkeypatch.setattr(trees, "visible_keys", causal)
    sequences = torch.randint(3, tiny_models.VOCAB, (1, 20), generator=torch.Generator().manual_seed(3))
    tree = random_tree(sequences[:, 7], seed=1)
    assert (tree.parents[0, 1:] != torch.arange(int(tree.num_nodes[0]) - 1)).any()  # not a chain
    logits = CachedModel(target, 1, torch.device("cpu")).forward_tree(sequences, torch.tensor([0]), torch.tensor([8]), tree)
    with pytest.raises(AssertionError):
        _check_tree_logits(target, logits, sequences, torch.tensor([0]), torch.tensor([8]), tree)


@pytest.mark.parametrize("name", ["llama", "mistral_window4"])
def test_a_tree_grown_level_by_level_matches_naive_forwards_at_every_fed_node(name):
    # A drafter's use: build_tree's expand feeds the frontier nodes, one forward per depth; every returned
    # row of logits must equal the naive forward over prefix + that node's path. Batch of 2, left-padded.
    model = MODELS[name]()
    gen = torch.Generator().manual_seed(4)
    sequences = torch.randint(3, tiny_models.VOCAB, (2, 30), generator=gen)
    pad, lens = torch.tensor([3, 0]), torch.tensor([9, 11])
    state = CachedModel(model, 2, torch.device("cpu"))
    state.forward(sequences, pad, lens - 2, 1)
    state.rollback(torch.tensor([2, 8]), slack=30)  # rows catch up different numbers of tokens in the first forward
    checked = []

    def expand(candidates, frontier):
        first = not state.tree_pending
        logits = state.forward_tree(sequences, pad, lens, candidates, feed=frontier[:, :0] if first else frontier)
        for row in range(2):
            paths = node_paths(candidates, row)
            prefix = sequences[row, pad[row] : lens[row]].tolist()
            for slot, node in enumerate(frontier[row].tolist()):
                if node >= 0:
                    expected = naive_logits(model, prefix + list(paths[node]))
                    assert torch.allclose(logits[row, slot], expected, atol=ATOL), (row, node)
                    checked.append(len(paths[node]))
        return logits.softmax(dim=-1)

    build_tree(sequences[torch.arange(2), lens - 1], expand, top_k=2, max_depth=3, max_nodes=6)
    assert sorted(set(checked)) == [0, 1, 2]  # the root and nodes of depth 1 and 2 were fed and checked
    state.keep_paths(torch.full((2, 0), -1), torch.zeros(2, dtype=torch.long))  # a drafter drops its tree
    assert state.num_cached.tolist() == (lens - pad).tolist()
    logits, _ = state.forward(sequences, pad, lens + 1, 1)
    for row in range(2):
        assert torch.allclose(logits[row, 0], naive_logits(model, sequences[row, pad[row] : lens[row] + 1].tolist()), atol=ATOL)
