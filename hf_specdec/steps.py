"""The two step kinds the loop drives: draft a chain or a tree, then verify it in one target forward.

Contract: `chain_step` and `tree_step` take the call's state as the loop holds it, draft with the call's drafter
session, run the target once and return a `Verified` (the tokens each row commits, how many drafts it accepted, and
what the loop needs after: scores, features, tree outcomes). Neither commits nor rolls back: that is the loop's,
written once for both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from hf_specdec.cache import CachedModel, TargetFeatures, TreeColumns
from hf_specdec.drafters.base import Draft, DraftContext, DraftSession
from hf_specdec.output import _write
from hf_specdec.policy import TreeDraftPolicy
from hf_specdec.processing import CONTEXT_FREE, process_scores
from hf_specdec.tree import DraftTree, tree_outcomes
from hf_specdec.verify import verify_greedy, verify_stochastic, verify_tree_greedy, verify_tree_stochastic


@dataclass
class Verified:
    """One verified step: row b commits committed[b, :num_accepted[b] + 1] (before the stopping criteria)."""

    committed: torch.Tensor  # [batch, width] long
    num_accepted: torch.Tensor  # [batch] long
    num_drafted: torch.Tensor  # [batch] long, drafts (a tree's depth) per row
    width: int  # tokens per row the target's forward scored (drafts and the row's last token)
    scores: torch.Tensor | None  # [batch, width, vocab] processed scores along each row's accepted path
    logits: torch.Tensor | None  # [batch, width, vocab] raw logits along it
    features: TargetFeatures | None  # the target's states for a drafter that reads them
    prompt_logits: torch.Tensor | None = None  # [batch, extra, vocab] before the step's own (see `chain_step`)
    outcomes: tuple[torch.Tensor, torch.Tensor] | None = None  # a tree's (trials, hits), `tree.tree_outcomes`
    nodes: torch.Tensor | None = None  # [batch] a tree's drafted nodes
    drafted_at: float = 0.0  # time.perf_counter() when drafting ended (the step's verification began)
    confidence: torch.Tensor | None = None  # [batch, width - 1] the drafter's top probability at each draft, if scored


@dataclass
class Call:
    """What both step kinds read of the call: its target and drafter session, processing and sampling."""

    target: CachedModel
    drafting: DraftSession | None  # the drafter's state in this call
    process: object  # (scores, lengths, rows) -> processed scores, generate()'s processors
    processors: object  # the LogitsProcessorList itself (trees process per node)
    vocab_size: int
    do_sample: bool
    generator: torch.Generator | None
    feature_layers: tuple[int, ...]
    min_confidence: float = 0.0


def chain_step(call: Call, sequences, pad_lens, lens, active, left: int, num_draft: torch.Tensor | None,
               no_draft: Draft, keep_scores: bool, caught_up: bool, extra_logits: int = 0,
               path_stop: tuple[float | tuple, tuple] = (0.0, ())) -> Verified:
    """Drafts up to `num_draft[b]` tokens in row b ([batch]; None: a plain step) and verifies them. `extra_logits`:
    also return the target's logits at that many positions before the step's own (the prompt's, at the prefill);
    `path_stop`: the schedule's (min_path, path_odds) (`DraftContext`)."""
    draft, num_drafted, width = no_draft, no_draft.num_drafted, 0
    drafted_at = time.perf_counter()
    if num_draft is not None:
        ctx = DraftContext(sequences, pad_lens, lens, active, call.vocab_size, call.do_sample, call.generator,
                           call.process, call.min_confidence, call.target, *path_stop)
        draft = call.drafting.propose(ctx, num_draft)
        num_drafted = torch.minimum(draft.num_drafted, num_draft)  # [batch]
        # Verify only as many columns as some row drafted: a drafter may return a wider tensor (prompt lookup finding
        # no match), and every extra column would cost the target a masked token.
        width = int(num_drafted.max())
        draft = draft.first(width)  # tokens [batch, width]
        drafted_at = time.perf_counter()
        if width:
            _write(sequences, lens, draft.tokens, num_drafted)
    ends, anchors = (lens + num_drafted, lens + width) if width else (lens, lens)
    target_logits, features = call.target.forward(
        sequences, pad_lens, ends, width + 1 + extra_logits, anchors=anchors, feature_layers=call.feature_layers,
        width=width + 1 if caught_up else None,
    )
    target_logits = target_logits[..., : call.vocab_size]  # [batch, extra + width + 1, vocab]
    prompt_logits, target_logits = target_logits[:, :extra_logits], target_logits[:, extra_logits:]
    # Column j scores the token after a row's j-th draft (rows that drafted fewer sit it out).
    processed = [call.process(target_logits[:, 0], lens, active if left < len(active) else None)]
    processed += [call.process(target_logits[:, j], lens + j, active & (j <= num_drafted)) for j in range(1, width + 1)]
    target_scores = torch.stack(processed, dim=1) if width else processed[0][:, None]  # [batch, width + 1, vocab]
    if call.do_sample:
        committed, num_accepted = verify_stochastic(
            draft.tokens, draft.draft_probs(call.vocab_size), target_scores.softmax(dim=-1), call.generator, num_drafted
        )
    else:
        committed, num_accepted = verify_greedy(draft.tokens, target_scores, num_drafted)
    return Verified(committed, num_accepted, num_drafted, width + 1, target_scores if keep_scores else None,
                    target_logits if keep_scores else None, features, prompt_logits, drafted_at=drafted_at,
                    confidence=draft.confidence)


def tree_step(call: Call, sequences, pad_lens, lens, active, room: torch.Tensor, shape: TreeDraftPolicy,
              max_rank: int, keep_scores: bool) -> Verified:
    """Drafts a tree per row in `shape`, at most `room[b]` deep ([batch]), verifies every node in one forward and
    keeps each row's accepted path in the target's cache (`CachedModel.keep_paths`)."""
    ctx = DraftContext(sequences, pad_lens, lens, active, call.vocab_size, call.do_sample, call.generator, call.process)
    row_depth = torch.where(active, room.clamp(max=shape.max_depth), 0)  # [batch]
    tree = call.drafting.propose_tree(ctx, shape, row_depth)
    drafted_at = time.perf_counter()
    target = call.target
    columns = None
    if call.feature_layers:
        target_logits, columns = target.forward_tree(sequences, pad_lens, lens, tree, feature_layers=call.feature_layers)
    else:
        target_logits = target.forward_tree(sequences, pad_lens, lens, tree)
    target_logits = target_logits[..., : call.vocab_size]  # [batch, nodes, vocab]
    target_scores = node_scores(call.processors, sequences, lens, tree, target_logits, active)
    if call.do_sample:
        verdict = verify_tree_stochastic(tree.tokens, tree.parents, target_scores.softmax(dim=-1), call.generator)
    else:
        verdict = verify_tree_greedy(tree.tokens, tree.parents, target_scores, tree.ancestors())
    target.keep_paths(verdict.path, verdict.num_accepted)
    num_accepted = torch.where(active, verdict.num_accepted, 0)
    drafted_depth = torch.where(tree.valid, tree.depths(), 0).max(dim=1).values  # [batch]
    features = _path_features(columns, verdict.path, lens, tree) if columns is not None else None
    scores = logits = None
    if keep_scores:  # the scores at the root and along the accepted path: what each new token was scored with
        on_path = torch.cat([torch.zeros_like(verdict.path[:, :1]), verdict.path.clamp_min(0)], dim=1)
        scores, logits = (values.gather(1, on_path[:, :, None].expand(-1, -1, values.shape[2]))
                          for values in (target_scores, target_logits))
    outcomes = tree_outcomes(tree.parents, verdict.path, num_accepted, max_rank)
    return Verified(verdict.committed, num_accepted, drafted_depth, tree.tokens.shape[1], scores, logits, features,
                    outcomes=outcomes, nodes=tree.num_nodes - 1, drafted_at=drafted_at)


def path_tokens(tree: DraftTree) -> torch.Tensor:
    """[batch, nodes, max_depth] long: the drafted tokens from the root's child down to each node (-1 after the
    node's depth)."""
    ancestors, depths = tree.ancestors(), tree.depths()
    max_depth = int(depths.max()) if depths.numel() else 0
    out = torch.full((*tree.tokens.shape, max_depth), -1, dtype=torch.long, device=tree.tokens.device)
    for depth in range(1, max_depth + 1):
        at_depth = ancestors & (depths[:, None, :] == depth)  # [batch, nodes, nodes]: the ancestor at `depth`
        found = at_depth.any(dim=2)
        out[:, :, depth - 1] = torch.where(found, tree.tokens.gather(1, at_depth.long().argmax(dim=2)), -1)
    return out


def node_scores(processors, sequences: torch.Tensor, lens: torch.Tensor, tree: DraftTree, logits: torch.Tensor,
                rows: torch.Tensor) -> torch.Tensor:
    """[batch, nodes, vocab]: generate()'s processors applied at every node as plain decoding would apply them after
    that node (input_ids = the row's tokens plus the node's path); 0 at padding nodes and unselected rows. Processors
    that read only the scores (processing.CONTEXT_FREE) take every node in one call; others one call per node."""
    live = rows[:, None] & tree.valid  # [batch, nodes]
    if not processors:  # greedy decoding without processors: the logits themselves
        return logits if bool(live.all()) else torch.where(live[:, :, None], logits, 0.0)
    batch, num_nodes, vocab = logits.shape
    if all(type(processor) in CONTEXT_FREE for processor in processors):  # temperature, top-k, top-p, ...
        # A copy: processors may write into their scores, and the caller keeps the logits.
        flat = processors(sequences.repeat_interleave(num_nodes, dim=0), logits.reshape(-1, vocab).clone())
        return torch.where(live[:, :, None], flat.view(batch, num_nodes, vocab), 0.0)
    depths, paths = tree.depths(), path_tokens(tree)
    out = []
    for node in range(num_nodes):
        context = sequences
        if node > 0:
            context = sequences.clone()
            on_path = paths[:, node] >= 0  # [batch, max_depth]
            batch_index, step = on_path.nonzero(as_tuple=True)
            context[batch_index, lens[batch_index] + step] = paths[batch_index, node, step]
        out.append(process_scores(processors, context, lens + depths[:, node], logits[:, node], live[:, node]))
    return torch.stack(out, dim=1)


def _path_features(columns: TreeColumns, path: torch.Tensor, lens: torch.Tensor, tree: DraftTree) -> TargetFeatures:
    """The target's states at the committed tokens the tree forward fed and at the accepted path's nodes, each at the
    buffer index its token now has (a node at depth d: lens - 1 + d); every other node's column is marked unfed."""
    on_path = torch.zeros_like(tree.valid).scatter_(1, path.clamp_min(0), path >= 0)  # [batch, nodes] by node id
    node = columns.nodes.clamp_min(0)
    kept_node = (columns.nodes >= 0) & on_path.gather(1, node)
    index = torch.where(columns.nodes >= 0, lens[:, None] - 1 + tree.depths().gather(1, node), columns.index)
    fed = columns.fed & ((columns.nodes < 0) | kept_node)
    return TargetFeatures(hidden=columns.hidden, index=index, positions=columns.positions, fed=fed)
