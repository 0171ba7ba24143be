"""generate()'s LogitsProcessorList and StoppingCriteriaList, applied to rows of ragged length.

Contract: a processor or criterion sees, for each row, exactly the `input_ids` that row would have in
plain generate() at that point (left-padded prompt + its tokens so far); rows that are at the same
length are processed in one call, so a batch costs one call per distinct length.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList, StoppingCriteriaList


def _groups(lengths: torch.Tensor, rows: torch.Tensor):
    """Yields (length, row indices) for each distinct length among the selected rows."""
    for length in torch.unique(lengths[rows]).tolist():
        yield length, (rows & (lengths == length)).nonzero().squeeze(1)


def process_scores(
    processors: LogitsProcessorList,
    sequences: torch.Tensor,  # [batch, buffer] left-padded token buffer
    lengths: torch.Tensor,  # [batch] row b's context is sequences[b, :lengths[b]]
    scores: torch.Tensor,  # [batch, vocab] raw logits for the token after that context
    rows: torch.Tensor,  # [batch] bool, rows to process; the others come back as zeros
) -> torch.Tensor:
    """Returns the processed scores, [batch, vocab]; unselected rows are 0 (finite, never sampled)."""
    out = torch.where(rows[:, None], scores, 0.0)
    if not processors:
        return out
    for length, index in _groups(lengths, rows):
        out[index] = processors(sequences[index, :length], scores[index])
    return out


def check_stopping(
    criteria: StoppingCriteriaList,
    sequences: torch.Tensor,  # [batch, buffer]
    lengths: torch.Tensor,  # [batch] row b's sequence so far is sequences[b, :lengths[b]]
    rows: torch.Tensor,  # [batch] bool, rows to check
) -> torch.Tensor:
    """[batch] bool: the selected rows whose stopping criteria fire at their current length."""
    done = torch.zeros_like(rows)
    for length, index in _groups(lengths, rows):
        done[index] = criteria(sequences[index, :length], None).to(done.device)
    return done
