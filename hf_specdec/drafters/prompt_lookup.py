"""Prompt lookup: drafts by copying what followed an earlier occurrence of the row's last n-gram.

Contract: no model, no state; proposals are a deterministic function of each row's tokens so far
(prompt and generated text), so `Draft.probs` is None and verification treats them as one-hot.
"""

from __future__ import annotations

import torch

from hf_specdec.drafters.base import Draft, DraftContext, StatelessDrafter


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

    def propose(self, ctx: DraftContext, num_tokens: torch.Tensor) -> Draft:
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
                proposal = lookup_ngram(sequences[row, pad_lens[row] : lens[row]], self.max_ngram_size, wanted)
                tokens[row, : proposal.shape[0]] = proposal
                num_drafted[row] = proposal.shape[0]
        device = ctx.lens.device
        return Draft(tokens=tokens.to(device), num_drafted=num_drafted.to(device))
