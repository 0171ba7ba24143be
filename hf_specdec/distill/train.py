"""Train a drafter on the target's responses: soft labels (the target's top-k distribution) and/or
hard labels (the response token), on response positions only, through the drafter's reduced head.
"""

from __future__ import annotations

import math
import random
import time
from typing import Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .data import Record
from .model import head_logits, vocab_subset_of


def _position_index(subset: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """Map full-vocabulary ids to head columns; -1 for ids outside the subset. [vocab]"""
    if subset is None:
        return torch.arange(vocab_size)
    index = torch.full((vocab_size,), -1, dtype=torch.long)
    index[subset.cpu()] = torch.arange(len(subset))
    return index


def train_drafter(
    drafter,
    records: Sequence[Record],
    teacher: dict[str, torch.Tensor] | None = None,
    *,
    steps: int = 2000,
    batch_size: int = 16,
    lr: float = 3e-3,
    warmup: int = 50,
    soft_weight: float = 1.0,
    hard_weight: float = 0.1,
    max_minutes: float | None = None,
    seed: int = 0,
    progress: bool = True,
) -> list[float]:
    """Train ``drafter`` in place (AdamW, cosine decay) and return the loss of every step.

    Args:
        records: corpus; loss is taken at the positions that predict response tokens.
        teacher: ``compute_topk`` output for ``records`` (required when ``soft_weight`` > 0).
        soft_weight: weight of cross-entropy to the target's top-k distribution, renormalised over
            the tokens the drafter's head can emit.
        hard_weight: weight of cross-entropy to the actual next token (skipped outside the head).
        max_minutes: a time budget: the cosine schedule follows whichever of steps and time runs
            out first, and training stops when either does.
    """
    if soft_weight > 0 and teacher is None:
        raise ValueError("soft_weight > 0 needs the teacher's top-k logits (compute_topk)")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    vocab_size = drafter.config.vocab_size
    column = _position_index(vocab_subset_of(drafter), vocab_size)  # [vocab]
    offsets = [0]
    for record in records:
        offsets.append(offsets[-1] + record.response_len)
    usable = [i for i, r in enumerate(records) if r.response_len > 0]

    drafter.train()
    # fused: one pass over each parameter instead of ~10; the tied embedding dominates the count.
    fused = next(drafter.parameters()).device.type in ("cpu", "cuda")
    optimizer = torch.optim.AdamW(
        drafter.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98), fused=fused or None
    )
    losses = []
    started = time.monotonic()
    bar = tqdm(range(steps), desc="train drafter", disable=not progress)
    for step in bar:
        # Cosine decay over whichever budget is further spent, so a time-capped run still anneals.
        elapsed = (time.monotonic() - started) / 60
        progress_done = max(step / steps, elapsed / max_minutes if max_minutes else 0.0)
        if progress_done >= 1.0:
            break
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * progress_done))
        batch = [usable[rng.randrange(len(usable))] for _ in range(batch_size)]
        width = max(len(records[i].ids) for i in batch) - 1
        input_ids = torch.zeros(len(batch), width, dtype=torch.long)  # [batch, width]
        attention_mask = torch.zeros_like(input_ids)
        rows, cols, flat = [], [], []  # positions that predict a response token
        for row, i in enumerate(batch):
            record = records[i]
            n = len(record.ids) - 1
            input_ids[row, :n] = torch.tensor(record.ids[:-1])
            attention_mask[row, :n] = 1
            rows += [row] * record.response_len
            cols += range(record.prompt_len - 1, n)
            flat += range(offsets[i], offsets[i + 1])
        hidden = drafter.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        hidden = hidden[torch.tensor(rows), torch.tensor(cols)]  # [positions, hidden]
        log_probs = F.log_softmax(head_logits(drafter, hidden, full_width=False), dim=-1)  # [positions, head]

        loss = hidden.new_zeros(())
        if hard_weight > 0:
            labels = column[torch.tensor([records[batch[r]].ids[c + 1] for r, c in zip(rows, cols)])]
            inside = labels >= 0
            if inside.any():
                loss = loss + hard_weight * F.nll_loss(log_probs[inside], labels[inside])
        if soft_weight > 0:
            flat_index = torch.tensor(flat)
            teacher_cols = column[teacher["topk_ids"][flat_index].long()]  # [positions, k]
            teacher_logits = teacher["topk_logits"][flat_index].float()
            teacher_logits = teacher_logits.masked_fill(teacher_cols < 0, float("-inf"))
            teacher_probs = F.softmax(teacher_logits, dim=-1).nan_to_num(0.0)
            picked = log_probs.gather(-1, teacher_cols.clamp(min=0))  # [positions, k]
            soft = -(teacher_probs * picked).sum(-1).mean()
            loss = loss + soft_weight * soft

        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    drafter.eval()
    return losses
