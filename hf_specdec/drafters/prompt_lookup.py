"""Prompt lookup: drafts by copying what followed an earlier occurrence of the row's last n-gram.

Contract: no model, no state; proposals are a deterministic function of each row's tokens so far
(prompt and generated text), so `Draft.probs` is None and verification treats them as one-hot. With a
`TreeDraftPolicy` several earlier occurrences give several branches of a tree.
"""

from __future__ import annotations

import torch

from hf_specdec import seq2seq
from hf_specdec.drafters.base import Draft, DraftContext, DraftSession, StatelessDrafter
from hf_specdec.tree import DraftTree


def lookup_ngram(tokens: torch.Tensor, max_ngram_size: int, num_pred_tokens: int) -> torch.Tensor:
    """Proposes a continuation of `tokens` ([length] long) from an earlier occurrence of its last n-gram.

    Tries n = max_ngram_size, ..., 1 and stops at the first n whose last n-gram occurs earlier in
    `tokens` (a longer match is stronger evidence). Among occurrences the MOST RECENT wins: text that
    repeats (code edits, lists, loops) repeats what was written last, and the nearest occurrence needs no
    scan of the whole history (transformers' prompt lookup takes the first occurrence instead). The
    continuation is copied LZ77-style: when it runs into the end of `tokens` it keeps copying its own
    output, so a periodic tail still yields `num_pred_tokens` tokens.

    Returns:
        [num_pred_tokens] long, or [0] when no n-gram matches (or num_pred_tokens is 0).
    """
    length = tokens.shape[0]
    for size in range(min(max_ngram_size, length - 1), 0, -1):
        # Windows that start at 0 .. length - size - 1: each has at least one token after it, so the
        # last n-gram never matches itself.
        windows = tokens[: length - 1].unfold(0, size, 1)  # [length - size, size]
        matches = (windows == tokens[length - size :]).all(dim=1).nonzero()
        if matches.numel():
            start = int(matches[-1]) + size  # first token after the most recent occurrence
            # Copy index i reads position start + i of `tokens` extended by the copy itself; that
            # position is at most i steps behind the copy, so it is always written already.
            period = length - start  # > 0
            source = start + torch.arange(num_pred_tokens, device=tokens.device) % period
            return tokens[source]
    return tokens.new_empty(0)


class PromptLookupDrafter(StatelessDrafter):
    """Drafts with `lookup_ngram` over each row's prompt and generated tokens (Saxena 2023, transformers'
    `prompt_lookup_num_tokens`). Free to run; pays off on input-grounded or repetitive text
    (summaries, code edits, extraction), drafts nothing elsewhere.

    Args:
        max_ngram_size: longest n-gram to match; shorter ones are tried down to 1.
        num_pred_tokens: most tokens proposed per step, on top of the loop's own cap (gamma, or the
            draft policy's per-row length); None proposes as many as the loop asks for.
    """

    def __init__(self, max_ngram_size: int = 3, num_pred_tokens: int | None = None):
        if max_ngram_size < 1:
            raise ValueError(f"max_ngram_size must be >= 1, got {max_ngram_size}.")
        if num_pred_tokens is not None and num_pred_tokens < 1:
            raise ValueError(f"num_pred_tokens must be >= 1 or None, got {num_pred_tokens}.")
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens

    def start(self, target, batch_size: int, device: torch.device) -> DraftSession:
        """Itself, or for an encoder-decoder target whose encoder read token ids (summarization, translation) a
        session that looks up over the source text too, where outputs copy most from; an audio encoder's target
        drafts from its own output only."""
        source = seq2seq.current()
        if source is None or source.token_ids is None:
            return self
        ids = source.token_ids.cpu()  # [batch, source_len]
        mask = torch.ones_like(ids, dtype=torch.bool) if source.mask is None else source.mask.cpu().bool()
        return _SourceLookup(self, [row[keep] for row, keep in zip(ids, mask)])

    def propose(self, ctx: DraftContext, num_tokens: torch.Tensor, sources: list | None = None) -> Draft:
        if self.num_pred_tokens is not None:
            num_tokens = num_tokens.clamp_max(self.num_pred_tokens)
        num_tokens = torch.where(ctx.active, num_tokens, 0)  # [batch]
        batch = num_tokens.shape[0]
        tokens = torch.full((batch, int(num_tokens.max())), -1, dtype=torch.long)  # [batch, width]
        num_drafted = torch.zeros(batch, dtype=torch.long)  # [batch]
        # The matcher is a short scan per row; run it on CPU instead of many small device kernels.
        sequences, pad_lens, lens = ctx.sequences.cpu(), ctx.pad_lens.tolist(), ctx.lens.tolist()
        for row, wanted in enumerate(num_tokens.tolist()):
            if wanted > 0:
                tokens_so_far = sequences[row, pad_lens[row] : lens[row]]
                if sources is not None:  # the source's tokens first: an n-gram of the output found there is copied on
                    tokens_so_far = torch.cat([sources[row], tokens_so_far])
                proposal = lookup_ngram(tokens_so_far, self.max_ngram_size, wanted)
                tokens[row, : proposal.shape[0]] = proposal
                num_drafted[row] = proposal.shape[0]
        device = ctx.lens.device
        return Draft(tokens=tokens.to(device), num_drafted=num_drafted.to(device))

    def score_prompt(self, ctx: DraftContext, num_positions: int):
        """What lookup would have drafted first at each of the last `num_positions` tokens (-1: no match)."""
        sequences, pad_lens, lens = ctx.sequences.cpu(), ctx.pad_lens.tolist(), ctx.lens.tolist()
        guesses = torch.full((len(lens), num_positions), -1, dtype=torch.long)
        for row, (start, end) in enumerate(zip(pad_lens, lens)):
            for column, at in enumerate(range(end - num_positions, end)):
                if at - start >= 2:
                    proposal = lookup_ngram(sequences[row, start:at], self.max_ngram_size, 1)
                    if proposal.numel():
                        guesses[row, column] = proposal[0]
        return guesses.to(ctx.lens.device), None

    drafts_trees = True

    def propose_tree(self, ctx: DraftContext, policy, row_depth: torch.Tensor, sources: list | None = None) -> DraftTree:
        """Several earlier occurrences give several branches: up to `policy.top_k` distinct continuations
        (`lookup_continuations`), `row_depth[b]` tokens long (at most `num_pred_tokens`), merged into a trie
        of at most `policy.max_nodes` nodes. Deterministic proposals, as for chains (`sources`: as there)."""
        if self.num_pred_tokens is not None:
            row_depth = row_depth.clamp_max(self.num_pred_tokens)
        sequences, pad_lens, lens = ctx.sequences.cpu(), ctx.pad_lens.tolist(), ctx.lens.tolist()
        rows = []
        for row, depth in enumerate(row_depth.tolist()):
            continuations = []
            if depth > 0:
                tokens_so_far = sequences[row, pad_lens[row] : lens[row]]
                if sources is not None:
                    tokens_so_far = torch.cat([sources[row], tokens_so_far])
                continuations = lookup_continuations(tokens_so_far, self.max_ngram_size, depth, policy.top_k)
            rows.append(trie(continuations, policy.max_nodes))
        width = 1 + max(len(tokens) for tokens, _ in rows)
        tokens = torch.full((len(rows), width), -1, dtype=torch.long)
        parents = torch.full((len(rows), width), -1, dtype=torch.long)
        tokens[:, 0] = sequences.gather(1, (ctx.lens.cpu() - 1)[:, None]).squeeze(1)  # the roots
        for row, (row_tokens, row_parents) in enumerate(rows):
            tokens[row, 1 : 1 + len(row_tokens)] = torch.tensor(row_tokens, dtype=torch.long)
            parents[row, 1 : 1 + len(row_parents)] = torch.tensor(row_parents, dtype=torch.long)
        device = ctx.lens.device
        valid = (tokens >= 0).to(device)
        return DraftTree(tokens=tokens.to(device), parents=parents.to(device), valid=valid)


class _SourceLookup(DraftSession):
    """Prompt lookup over an encoder-decoder call's source text and each row's decoder tokens: `sources` [batch] of
    [source_len_b] long, the rows' unpadded source ids. Trees where the target's decoder takes them."""

    drafts_trees = True

    def __init__(self, lookup: PromptLookupDrafter, sources: list[torch.Tensor]):
        self.lookup = lookup
        self.sources = sources

    def propose(self, ctx: DraftContext, num_tokens: torch.Tensor) -> Draft:
        return self.lookup.propose(ctx, num_tokens, self.sources)

    def propose_tree(self, ctx: DraftContext, policy, row_depth: torch.Tensor) -> DraftTree:
        return self.lookup.propose_tree(ctx, policy, row_depth, self.sources)


def lookup_continuations(tokens: torch.Tensor, max_ngram_size: int, length: int, max_branches: int) -> list[torch.Tensor]:
    """Up to `max_branches` distinct continuations of `tokens` ([length] long), each `length` tokens (copied
    LZ77-style as in `lookup_ngram`), from earlier occurrences of its last n-gram: the longest n that
    matches first, most recent occurrence first, then shorter n-grams' occurrences while branches are
    missing. The first is what `lookup_ngram` proposes."""
    total = tokens.shape[0]
    found: list[torch.Tensor] = []
    for size in range(min(max_ngram_size, total - 1), 0, -1):
        windows = tokens[: total - 1].unfold(0, size, 1)  # [total - size, size]
        for match in reversed((windows == tokens[total - size :]).all(dim=1).nonzero().squeeze(1).tolist()):
            start = match + size
            source = start + torch.arange(length, device=tokens.device) % (total - start)
            continuation = tokens[source]
            if not any(torch.equal(continuation, seen) for seen in found):
                found.append(continuation)
            if len(found) == max_branches:
                return found
    return found


def trie(continuations: list[torch.Tensor], max_nodes: int) -> tuple[list[int], list[int]]:
    """The continuations merged into a tree below a root: (tokens, parents) of the drafted nodes, parents as
    node ids (0 = the root, drafted nodes from 1), parents before children, a parent's children in the
    order of the continuations that first reached them; at most `max_nodes` nodes (later continuations,
    and the deep ends of earlier ones, are cut first... in the order they are reached)."""
    tokens: list[int] = []
    parents: list[int] = []
    children: dict[tuple[int, int], int] = {}  # (parent, token) -> node
    for continuation in continuations:
        at = 0
        for token in continuation.tolist():
            node = children.get((at, token))
            if node is None:
                if len(tokens) == max_nodes:
                    break
                tokens.append(token)
                parents.append(at)
                node = children[(at, token)] = len(tokens)
            at = node
    return tokens, parents
