"""The speculative loop with draft trees (`TreeDraftPolicy`): draft a tree per row -> verify every node in
one target forward -> commit the accepted path and one more token -> keep that path in the caches.

Contract: as `loop.speculative_decode` (whose step-0 checks have run when it hands a tree policy here):
returns what generate() returns, each row's tokens distributed exactly as the target's own (processed)
sampling, greedy token-identical. Sampling uses `verify.verify_tree_stochastic` (children are the
drafter's top-k, deterministic proposals); the target's scores at a node are processed with the node's
own context (the row's tokens plus the node's path), as plain generate() would process them there.
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList

from hf_specdec.cache import CachedModel
from hf_specdec.drafters.base import DraftContext, Drafter, TargetFeatures
from hf_specdec.errors import UnsupportedModelError, UnsupportedTreeError
from hf_specdec.loop import commit, finish, new_buffers
from hf_specdec.processing import CONTEXT_FREE, process_scores
from hf_specdec.stats import SpeculativeStats
from hf_specdec.tree import DraftTree
from hf_specdec.tree_schedule import TreeSchedule
from hf_specdec.verify import verify_tree_greedy, verify_tree_stochastic


def path_tokens(tree: DraftTree) -> torch.Tensor:
    """[batch, nodes, max_depth] long: the drafted tokens from the root's child down to each node (-1 after
    the node's depth)."""
    ancestors, depths = tree.ancestors(), tree.depths()
    max_depth = int(depths.max()) if depths.numel() else 0
    out = torch.full((*tree.tokens.shape, max_depth), -1, dtype=torch.long, device=tree.tokens.device)
    for depth in range(1, max_depth + 1):
        at_depth = ancestors & (depths[:, None, :] == depth)  # [batch, nodes, nodes]: the ancestor at `depth`
        found = at_depth.any(dim=2)
        out[:, :, depth - 1] = torch.where(found, tree.tokens.gather(1, at_depth.long().argmax(dim=2)), -1)
    return out


def node_scores(
    processors: LogitsProcessorList,
    sequences: torch.Tensor,  # [batch, buffer]
    lens: torch.Tensor,  # [batch] committed tokens end here (the root is the last)
    tree: DraftTree,
    logits: torch.Tensor,  # [batch, nodes, vocab] raw target logits at every node
    rows: torch.Tensor,  # [batch] bool, rows to process
) -> torch.Tensor:
    """[batch, nodes, vocab]: generate()'s processors applied at every node as plain decoding would apply them
    after that node: input_ids = the row's tokens plus the node's path; 0 at padding nodes and unselected rows.
    Without processors that is the logits; processors that read only the scores (processing.CONTEXT_FREE)
    take every node of every row in one call; others are called once per node with its context."""
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


def _path_features(columns, path: torch.Tensor, lens: torch.Tensor, tree: DraftTree) -> TargetFeatures:
    """The target's states at the committed tokens the tree forward fed and at the accepted path's nodes,
    each at the buffer index its token now has (a node at depth d: lens - 1 + d); every other node's
    column is marked unfed (siblings share positions with the path)."""
    on_path = torch.zeros_like(tree.valid).scatter_(1, path.clamp_min(0), path >= 0)  # [batch, nodes] by node id
    node = columns.nodes.clamp_min(0)
    kept_node = (columns.nodes >= 0) & on_path.gather(1, node)
    index = torch.where(columns.nodes >= 0, lens[:, None] - 1 + tree.depths().gather(1, node), columns.index)
    fed = columns.fed & ((columns.nodes < 0) | kept_node)
    return TargetFeatures(hidden=columns.hidden, index=index, positions=columns.positions, fed=fed)


def _start(model, drafter: Drafter, batch: int, device: torch.device, cache, max_depth: int):
    """Step 0's checks: (the target's CachedModel, the drafter's session) if they can draft and score trees, else
    UnsupportedModelError / UnsupportedTreeError before any forward."""
    target = CachedModel(model, batch, device, cache=cache)
    target.check_trees()
    session = drafter.start(model, batch, device)
    if not session.drafts_trees:
        raise UnsupportedTreeError(
            f"{type(drafter).__name__} drafts chains only (its session's drafts_trees is False); hf_specdec's model, "
            f"feature-head and prompt-lookup drafters draft trees. Pass gamma={max_depth} (a chain) with this drafter."
        )
    session.check_trees()
    return target, session


def can_draft_trees(model, drafter: Drafter, batch: int, device: torch.device, cache=None) -> bool:
    """Whether `tree_decode` would run this target and drafter (its step 0's checks pass), without raising: the
    default policy considers trees only then."""
    try:
        _start(model, drafter, batch, device, cache, max_depth=1)
    except (UnsupportedModelError, UnsupportedTreeError):
        return False
    return True


def tree_decode(
    model: PreTrainedModel,
    input_ids: torch.LongTensor,  # [batch, prompt_len] left-padded
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    streamer,
    *,
    drafter: Drafter,
    schedule: TreeSchedule,
    vocab_size: int,
    pad_lens: torch.Tensor,  # [batch]
    generator: torch.Generator | None,
    stats: SpeculativeStats | None,
    cache=None,
):
    """The tree loop; called by `loop.speculative_decode` after its step-0 checks, with its arguments and the
    call's `schedule` (each step's tree shape)."""
    # 0. Checks, before any forward pass.
    target, session = _start(model, drafter, input_ids.shape[0], input_ids.device, cache, schedule.max_depth)
    feature_layers = drafter.feature_layers(model)  # () unless the drafter reads the target's hidden states
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    max_length = generation_config.max_length
    do_sample = generation_config.do_sample
    pad_token = generation_config._pad_token_tensor
    freeze_finished = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
    max_depth, max_nodes = schedule.max_depth, schedule.max_nodes
    sequences, lens, flagged, done_at, scores_out, logits_out = new_buffers(
        input_ids, generation_config, vocab_size, room=max_depth + 1
    )
    step_stats = SpeculativeStats.empty(batch, max_depth)

    def process(scores: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return process_scores(logits_processor, sequences, lengths, scores, rows)

    while True:
        needed = done_at.max() if flagged.all() else max_length
        active = (lens < needed) & (~flagged if freeze_finished else True)  # [batch]
        if not active.any():
            break

        # 1. Draft a tree per row in the schedule's shape (none: a plain step), never deeper than max_length leaves room for.
        shape = schedule.shape
        room = (max_length - lens - 1).clamp_min(0)  # [batch]
        row_depth = torch.where(active, room.clamp(max=0 if shape is None else shape.max_depth), 0)  # [batch]
        roots = sequences.gather(1, (lens - 1)[:, None])  # [batch, 1]
        if int(row_depth.max()) > 0:
            ctx = DraftContext(sequences, pad_lens, lens, active, vocab_size, do_sample, generator, process)
            tree = session.propose_tree(ctx, shape, row_depth)
        else:
            tree = DraftTree.chain(roots)  # the root alone: a plain step

        # 2. Verify: one target forward over every node of each row's tree.
        if feature_layers:  # the drafter reads the target's states too
            target_logits, columns = target.forward_tree(sequences, pad_lens, lens, tree, feature_layers=feature_layers)
        else:
            target_logits, columns = target.forward_tree(sequences, pad_lens, lens, tree), None
        target_logits = target_logits[..., :vocab_size]  # [batch, nodes, vocab]
        target_scores = node_scores(logits_processor, sequences, lens, tree, target_logits, active)
        if do_sample:
            verdict = verify_tree_stochastic(tree.tokens, tree.parents, target_scores.softmax(dim=-1), generator)
        else:
            verdict = verify_tree_greedy(tree.tokens, tree.parents, target_scores, tree.ancestors())
        target.keep_paths(verdict.path, verdict.num_accepted)
        num_accepted = torch.where(active, verdict.num_accepted, 0)
        drafted_depth = torch.where(tree.valid, tree.depths(), 0).max(dim=1).values  # [batch] the tree's depth
        schedule.observe_tree(active, tree, verdict.path, num_accepted)
        schedule.update(active, drafted_depth, num_accepted)
        # The target's states at the committed tokens it just read, for a drafter that reads them.
        target_features = _path_features(columns, verdict.path, lens, tree) if columns is not None else None

        # 3. Commit the accepted path and one more token, checking the stopping criteria after every token.
        num_new, flagged, done_at = commit(
            sequences, lens, verdict.committed, torch.where(active, num_accepted + 1, 0), stopping_criteria, flagged,
            done_at, freeze_finished, streamer,
        )
        if scores_out is not None or logits_out is not None:
            # The scores at the root and along the accepted path: what the target scored each new token with.
            on_path = torch.cat([torch.zeros_like(verdict.path[:, :1]), verdict.path.clamp_min(0)], dim=1)[:, : max_depth + 1]
            for out, values in ((scores_out, target_scores), (logits_out, target_logits)):
                if out is not None:
                    along = values.gather(1, on_path[:, :, None].expand(-1, -1, values.shape[2]))
                    rows, cols = (torch.arange(on_path.shape[1], device=device) < num_new[:, None]).nonzero(as_tuple=True)
                    out[rows, lens[rows] - prompt_len + cols] = along[rows, cols]
        lens = lens + num_new

        # 4. Roll back both caches to the committed tokens; the last one is the next tree's root.
        num_valid = lens - pad_lens - 1  # [batch]
        target.rollback(torch.minimum(target.num_cached, num_valid), slack=max_nodes + 1)
        session.observe(num_valid, target_features)
        step_stats.record_step(active, drafted_depth, num_accepted, num_new)
        step_stats.record_tree(active, tree.num_nodes - 1, max_nodes)

    return finish(
        sequences, lens, flagged, done_at, prompt_len, pad_token, scores_out, logits_out, generation_config,
        step_stats, stats, target.num_forwards, session.num_forwards, streamer,
    )
