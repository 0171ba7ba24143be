"""Helpers shared by the draft-tree tests."""

from hf_specdec.tree import DraftTree


def node_paths(tree: DraftTree, row: int) -> list[tuple[int, ...]]:
    """Each node's drafted tokens from the root down (the root's path is ())."""
    tokens, parents = tree.tokens[row].tolist(), tree.parents[row].tolist()
    paths = []
    for node in range(len(tokens)):
        path, at = [], node
        while at > 0:
            path.append(tokens[at])
            at = parents[at]
        paths.append(tuple(reversed(path)))
    return paths
