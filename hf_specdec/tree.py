"""Draft trees: their batched layout, EAGLE-2 best-first construction, and the masks and positions a
forward over tree nodes needs. Pure tensor code: no models, no caches.

Contract: a `DraftTree` holds, per row, node 0 = the root (the row's last committed token) and drafted
nodes after it, parents always before children, padded to the batch's widest tree with a validity mask.
A node at depth d sits at position `row_length + d` (row_length = the row's tokens before the root) and
attends to the row's valid cached tokens, its ancestors and itself, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class DraftTree:
    """One step's draft trees, one per row.

    Node 0 of every valid row is the root: the last committed token, whose target distribution scores
    the root's children. Nodes 1.. are drafted tokens; `parents[b, i] < i` for every valid node i > 0, and
    children of one parent appear in the order they should be tried (best first). Invalid (padding) nodes
    have token -1 and parent -1, so they are nobody's child.

    A tree is never changed after it is made: its ancestor matrix and depths are computed once, on first
    use, and kept (a step reads them in the drafter's, the target's and the verifier's code).
    """

    tokens: torch.Tensor  # [batch, nodes] long, -1 where invalid
    parents: torch.Tensor  # [batch, nodes] long, index of the parent node; -1 for the root and padding
    valid: torch.Tensor  # [batch, nodes] bool
    _ancestors: torch.Tensor | None = field(default=None, repr=False, compare=False)
    _depths: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def num_nodes(self) -> torch.Tensor:
        """[batch] long: valid nodes per row, the root included."""
        return self.valid.sum(dim=1)

    def ancestors(self) -> torch.Tensor:
        """[batch, nodes, nodes] bool, see `ancestors`."""
        if self._ancestors is None:
            self._ancestors = ancestors(self.parents)
        return self._ancestors

    def depths(self) -> torch.Tensor:
        """[batch, nodes] long, see `depths`."""
        if self._depths is None:
            self._depths = self.ancestors().sum(dim=2) - 1
        return self._depths

    @staticmethod
    def chain(tokens: torch.Tensor, lengths: torch.Tensor | None = None) -> "DraftTree":
        """The tree of a plain chain: the root (tokens[:, 0]) and then tokens[:, 1:], each the child of the
        one before; row b keeps its first lengths[b] nodes (all when None)."""
        batch, num_nodes = tokens.shape
        index = torch.arange(num_nodes, device=tokens.device)
        valid = torch.ones_like(tokens, dtype=torch.bool) if lengths is None else index < lengths[:, None]
        parents = torch.where(valid & (index > 0), index - 1, -1).expand(batch, -1).clone()
        return DraftTree(tokens=torch.where(valid, tokens, -1), parents=parents, valid=valid)


def ancestors(parents: torch.Tensor) -> torch.Tensor:
    """ancestors[b, i, j]: node j is node i itself or one of its ancestors ([batch, nodes, nodes] bool).

    `parents` [batch, nodes] long, -1 for a node without a parent (parents come before children). Every
    node climbs one level per pass, all at once, so a tree costs a few tensor ops per level, not per node."""
    batch, num_nodes = parents.shape
    index = torch.arange(num_nodes, device=parents.device)
    up = torch.where(parents >= 0, parents, index)  # [batch, nodes]; a node without a parent stays put
    result = torch.eye(num_nodes, dtype=torch.bool, device=parents.device).repeat(batch, 1, 1)
    at = index.expand(batch, -1)  # [batch, nodes] each node's ancestor reached so far
    for _ in range(num_nodes - 1):
        above = up.gather(1, at)
        if torch.equal(above, at):  # every node has reached its top ancestor
            break
        result.scatter_(2, above[:, :, None], True)
        at = above
    return result


def depths(parents: torch.Tensor) -> torch.Tensor:
    """[batch, nodes] long: edges from each node up to its top ancestor (the root: 0)."""
    return ancestors(parents).sum(dim=2) - 1


def earlier_siblings(parents: torch.Tensor) -> torch.Tensor:
    """earlier_siblings[b, i, j]: node j is a drafted node with node i's parent, made before it ([batch, nodes, nodes]
    bool). Children of a parent are stored best first, so `.sum(dim=2) + 1` is each child's rank among them."""
    num_nodes = parents.shape[1]
    earlier = torch.ones(num_nodes, num_nodes, dtype=torch.bool, device=parents.device).tril(-1)  # [i, j]: j < i
    return (parents[:, :, None] == parents[:, None, :]) & (parents[:, None, :] >= 0) & earlier


def positions(row_lengths: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
    """[batch, nodes] long: the position of each node, `row_lengths[b] + depth` (row_lengths [batch]: the
    row's tokens before the root, so the root sits right after them)."""
    return row_lengths[:, None] + depths(parents)


def tree_mask(cache_valid: torch.Tensor, tree_ancestors: torch.Tensor, node_valid: torch.Tensor) -> torch.Tensor:
    """What each tree node may attend to in a forward over [cached columns + tree nodes]:
    [batch, nodes, width + nodes] bool. A valid node sees the row's valid cached columns (`cache_valid`
    [batch, width]), its ancestors and itself (`tree_ancestors` [batch, nodes, nodes]); a padding node
    (`node_valid` [batch, nodes] False) sees only itself, so no query row of the mask is empty."""
    num_nodes = tree_ancestors.shape[1]
    cached = cache_valid[:, None, :] & node_valid[:, :, None]  # [batch, nodes, width]
    itself = torch.eye(num_nodes, dtype=torch.bool, device=tree_ancestors.device)
    in_tree = torch.where(node_valid[:, :, None], tree_ancestors & node_valid[:, None, :], itself)
    return torch.cat([cached, in_tree], dim=2)


def visible_keys(
    key_valid: torch.Tensor,  # [batch, keys] bool, live cache columns (this chunk's included)
    key_positions: torch.Tensor,  # [batch, keys] long
    key_nodes: torch.Tensor,  # [batch, keys] long, tree node held by the column; -1 for a committed token
    query_positions: torch.Tensor,  # [batch, queries] long
    query_nodes: torch.Tensor,  # [batch, queries] long, -1 for a committed token
    tree_ancestors: torch.Tensor,  # [batch, nodes, nodes] bool, of the tree the node ids index
) -> torch.Tensor:
    """[batch, queries, keys] bool: the general mask of a forward whose cache may hold tree nodes (a
    drafter growing its tree one level per forward) next to committed tokens. Every query sees the live
    committed keys at or before its position (causal, in position space, so holes in the columns do not
    matter); a tree node also sees the live tree keys that are its ancestors or itself. With a cache of
    committed tokens only and a chunk of one tree this is `tree_mask`."""
    committed = key_valid[:, None, :] & (key_nodes[:, None, :] < 0) & (key_positions[:, None, :] <= query_positions[:, :, None])
    batch, num_queries = query_nodes.shape
    num_nodes = tree_ancestors.shape[1]
    # ancestors[b, query node, key node], -1 nodes looked up as node 0 and then dropped
    rows = torch.arange(batch, device=query_nodes.device)[:, None, None]
    looked_up = tree_ancestors[rows, query_nodes.clamp(0, num_nodes - 1)[:, :, None], key_nodes.clamp(0, num_nodes - 1)[:, None, :]]
    in_tree = looked_up & (query_nodes[:, :, None] >= 0) & (key_nodes[:, None, :] >= 0) & key_valid[:, None, :]
    return committed | in_tree


#: `expand(tree, frontier)`: the drafter's next-token probabilities at the frontier nodes of the tree built
#: so far. tree: a DraftTree of every candidate so far (node 0 = root); frontier [batch, width] long node
#: ids, -1 where a row has fewer frontier nodes. Returns [batch, width, vocab] float (rows of -1 ignored).
Expand = Callable[[DraftTree, torch.Tensor], torch.Tensor]


def build_tree(
    root_tokens: torch.Tensor,  # [batch] long, each row's last committed token
    expand: Expand,
    top_k: int,
    max_depth: int,
    max_nodes: int,
    row_depth: torch.Tensor | None = None,  # [batch] long, deepest node a row may have (<= max_depth)
) -> DraftTree:
    """EAGLE-2's best-first tree: the score of a node is the product of the drafter's probabilities along
    its path. The root is expanded first; at each depth the `top_k` best-scored nodes of that depth (the
    frontier) are expanded, each into its `top_k` most probable children (children of probability 0 are
    not made); after `max_depth` levels (or `row_depth[b]` for row b) the `max_nodes` best-scored nodes of
    all made are kept. A child's score never exceeds its parent's, and ties keep the node made first, so
    the kept nodes always include their parents. Kept nodes are ordered as they were made: parents before
    children, the children of a parent best first.

    Returns a DraftTree with at most 1 + max_nodes nodes per row (the root and the kept drafts).
    """
    batch = root_tokens.shape[0]
    device = root_tokens.device
    if row_depth is None:
        row_depth = torch.full((batch,), max_depth, dtype=torch.long, device=device)
    row_depth = row_depth.clamp(0, max_depth)
    # Every node made so far (the candidates), node 0 = root.
    tokens = root_tokens[:, None].clone()  # [batch, made]
    parents = torch.full((batch, 1), -1, dtype=torch.long, device=device)
    scores = torch.ones(batch, 1, dtype=torch.float64, device=device)
    made_valid = torch.ones(batch, 1, dtype=torch.bool, device=device)
    frontier = torch.zeros(batch, 1, dtype=torch.long, device=device)  # [batch, width] node ids, -1 none
    frontier = torch.where(row_depth[:, None] > 0, frontier, -1)
    for depth in range(1, max_depth + 1):
        if not bool((frontier >= 0).any()):
            break
        candidates = DraftTree(tokens=tokens, parents=parents, valid=made_valid)
        probs = expand(candidates, frontier)  # [batch, width, vocab]
        num_children = min(top_k, probs.shape[-1])
        # The k best in the drafter's own precision (ranks are the same in float64), scored in float64.
        child_probs, child_tokens = probs.topk(num_children, dim=-1)  # [batch, width, k], best first
        child_probs = child_probs.double()
        parent_ids = frontier[:, :, None].expand(-1, -1, num_children)  # [batch, width, k]
        parent_scores = scores.gather(1, frontier.clamp_min(0)).unsqueeze(2)  # [batch, width, 1]
        child_valid = (parent_ids >= 0) & (child_probs > 0)  # [batch, width, k]
        child_scores = torch.where(child_valid, parent_scores * child_probs, 0.0)
        first_new = tokens.shape[1]
        tokens = torch.cat([tokens, torch.where(child_valid, child_tokens, -1).flatten(1)], dim=1)
        parents = torch.cat([parents, torch.where(child_valid, parent_ids, -1).flatten(1)], dim=1)
        scores = torch.cat([scores, child_scores.flatten(1)], dim=1)
        made_valid = torch.cat([made_valid, child_valid.flatten(1)], dim=1)
        # The next frontier: the top_k best children made at this depth, in rows that may go deeper.
        new_valid = child_valid.flatten(1)  # [batch, width * top_k]
        ranked = _rank(torch.where(new_valid, child_scores.flatten(1), -1.0))[:, :top_k]  # [batch, <= top_k]
        deeper = new_valid.gather(1, ranked) & (row_depth[:, None] > depth)
        frontier = torch.where(deeper, first_new + ranked, -1)
    # Keep the max_nodes best drafted nodes, then restore the order in which they were made.
    drafted_scores = torch.where(made_valid[:, 1:], scores[:, 1:], -1.0)  # [batch, made - 1]
    kept = _rank(drafted_scores)[:, :max_nodes]  # [batch, kept]
    kept_valid = made_valid[:, 1:].gather(1, kept)
    kept = torch.where(kept_valid, kept + 1, tokens.shape[1]).sort(dim=1).values  # invalid last
    kept_valid = kept < tokens.shape[1]
    kept_ids = torch.cat([torch.zeros(batch, 1, dtype=torch.long, device=device), kept.clamp(max=tokens.shape[1] - 1)], dim=1)
    node_valid = torch.cat([torch.ones(batch, 1, dtype=torch.bool, device=device), kept_valid], dim=1)
    # Old node id -> new node id (-1 for nodes not kept).
    new_ids = torch.full_like(tokens, -1)
    new_ids.scatter_(1, torch.where(node_valid, kept_ids, 0), torch.where(node_valid, torch.arange(kept_ids.shape[1], device=device).expand(batch, -1), 0))
    old_parents = parents.gather(1, kept_ids)
    new_parents = torch.where(node_valid & (old_parents >= 0), new_ids.gather(1, old_parents.clamp_min(0)), -1)
    tree_tokens = torch.where(node_valid, tokens.gather(1, kept_ids), -1)
    tree = DraftTree(tokens=tree_tokens, parents=new_parents, valid=node_valid)
    return _trim(tree)


def _rank(scores: torch.Tensor) -> torch.Tensor:
    """Indices that sort each row of `scores` best first; ties keep the earlier index (the node made first)."""
    return torch.sort(scores, dim=1, descending=True, stable=True).indices


def _trim(tree: DraftTree) -> DraftTree:
    """The tree cut to the batch's widest row (columns every row leaves invalid cost a forward nothing)."""
    width = int(tree.num_nodes.max())
    return DraftTree(tokens=tree.tokens[:, :width], parents=tree.parents[:, :width], valid=tree.valid[:, :width])


def tree_outcomes(parents: torch.Tensor, path: torch.Tensor, num_accepted: torch.Tensor, max_rank: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """What one tree verification says per row, depth and rank: (trials, hits), [batch, depth, max_rank] float. At
    each node on a row's accepted path at depth d - 1 (the root at 0) whose children are ranked best first, rank k had
    a trial at depth d if the node has k children, and a hit if the accepted child is its k-th."""
    is_child = parents >= 0  # [batch, nodes]
    num_children = torch.zeros_like(parents).scatter_add_(1, parents.clamp_min(0), is_child.long())  # [batch, nodes]
    rank = earlier_siblings(parents).sum(dim=2) + 1  # [batch, nodes] a child's rank among its siblings
    depth = path.shape[1]
    along = torch.cat([torch.zeros_like(path[:, :1]), path.clamp_min(0)], dim=1)[:, :depth]  # [batch, depth] parents
    steps = torch.arange(depth, device=path.device)
    reached = steps <= num_accepted[:, None]  # [batch, depth]: the path node at depth d - 1 exists
    accepted_rank = torch.where(steps < num_accepted[:, None], rank.gather(1, path.clamp_min(0)), 0)  # [batch, depth]
    ranks = torch.arange(1, max_rank + 1, device=path.device)
    trials = reached[:, :, None] & (num_children.gather(1, along)[:, :, None] >= ranks)  # [batch, depth, rank]
    hits = trials & (accepted_rank[:, :, None] == ranks)
    return trials.double(), hits.double()
