"""How good and how cheap a drafter is: teacher-forced greedy agreement, acceptance at gamma, and
per-token step costs of drafter and target.

Greedy speculative decoding follows the target's greedy path, and an accepted draft token is the
target's own token, so a drafter proposing from the true prefix is exactly what happens: the
per-position agreement along the target's greedy responses determines every draft block's outcome.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import torch

from hf_specdec import compat

from .data import Record
from .model import head_logits, vocab_subset_of


@dataclass
class Agreement:
    """Greedy agreement of drafter with target on a set of responses."""

    agreement: float  # P(drafter argmax == target argmax), over response positions
    acceptance_rate: float  # accepted draft tokens / drafted tokens, simulated at ``gamma``
    mean_accepted: float  # accepted draft tokens per block (0..gamma)
    tokens_per_target_step: float  # mean_accepted + 1 (the target's own token)
    gamma: int
    positions: int

    def as_dict(self) -> dict:
        return asdict(self)


@torch.inference_mode()
def agreement_flags(target, drafter, records: Sequence[Record]) -> list[torch.Tensor]:
    """Per record, a bool tensor [response_len]: does the drafter's argmax equal the target's?

    Both run teacher-forced on the record's ids; the drafter's argmax is taken over its vocabulary
    subset only (the others have probability 0 for it).
    """
    flags = []
    for record in records:
        ids = torch.tensor([record.ids])  # [1, seq]
        positions = slice(record.prompt_len - 1, len(record.ids) - 1)
        target_logits = target(input_ids=ids.to(target.device)).logits[0, positions]
        hidden = drafter.model(input_ids=ids.to(drafter.device)).last_hidden_state[0, positions]
        drafter_logits = head_logits(drafter, hidden.to(drafter.get_output_embeddings().weight.dtype))
        flags.append((target_logits.argmax(-1).cpu() == drafter_logits.argmax(-1).cpu()))
    return flags


def simulate_acceptance(flags: Sequence[torch.Tensor], gamma: int = 4) -> Agreement:
    """Greedy speculative decoding along each response, from its per-position agreement flags.

    A block starting at position t drafts ``gamma`` tokens; the leading run of agreements is
    accepted, and the target adds one token (the correction, or the bonus after a full block).
    """
    drafted = accepted = blocks = positions = agreed = 0
    for row in flags:
        row = row.tolist()
        positions += len(row)
        agreed += sum(row)
        t = 0
        while t < len(row):
            run = 0
            while run < gamma and t + run < len(row) and row[t + run]:
                run += 1
            drafted += min(gamma, len(row) - t)
            accepted += run
            blocks += 1
            t += run + 1
    return Agreement(
        agreement=agreed / max(positions, 1),
        acceptance_rate=accepted / max(drafted, 1),
        mean_accepted=accepted / max(blocks, 1),
        tokens_per_target_step=accepted / max(blocks, 1) + 1,
        gamma=gamma,
        positions=positions,
    )


def topk_hits(draft_logits: torch.Tensor, target_columns: torch.Tensor, ks: Sequence[int] = (1, 2, 4, 8)) -> torch.Tensor:
    """[len(ks)] how many positions have the target's token among the drafter's `k` highest scores.

    Args:
        draft_logits: [positions, draft_vocab] the drafter's scores over its own vocabulary.
        target_columns: [positions] the target's token as a column of `draft_logits`, -1 when the token is
            outside the drafter's vocabulary (never a hit: the drafter gives it probability 0).
    Ties rank by `torch.topk`'s order, as a draft tree would pick them.
    """
    top = draft_logits.topk(min(max(ks), draft_logits.shape[-1]), dim=-1).indices  # [positions, max k]
    match = top == target_columns[:, None]  # a -1 column never matches
    return torch.stack([match[:, :k].any(-1).sum() for k in ks])


def evaluate_agreement(target, drafter, records: Sequence[Record], gamma: int = 4) -> Agreement:
    """``simulate_acceptance`` over the drafter's agreement with the target on ``records``."""
    return simulate_acceptance(agreement_flags(target, drafter, records), gamma)


@torch.inference_mode()
@torch.inference_mode()
def step_cost_ms(
    model,
    context: int | Sequence[int] = 128,
    *,
    num_tokens: int = 1,
    steps: int = 32,
    warmup: int = 3,
    threads: int | None = 1,
    use_subset: bool = True,
) -> float:
    """Median wall time (ms) of one cached forward of ``num_tokens`` tokens (1: a decoding step; more:
    the target verifying a draft): body + LM head, after ``context``.

    Args:
        context: token ids, or a length for that many seeded random ids. The cache is cropped back
            after every forward, so each timed forward sees the same context.
        use_subset: score only the model's vocabulary subset, as hf_specdec runs a drafter.
        threads: torch intra-op threads for the measurement, restored after (None: leave them).
    """
    from transformers import DynamicCache

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        weight = model.get_output_embeddings().weight  # [vocab, hidden]
        subset = vocab_subset_of(model) if use_subset else None
        head = weight if subset is None else weight[subset]
        if isinstance(context, int):
            generator = torch.Generator().manual_seed(0)
            ids = torch.randint(0, weight.shape[0], (1, context), generator=generator)
        else:
            ids = torch.tensor([list(context)])
        ids = ids.to(weight.device)  # [1, context]
        cache = DynamicCache(config=model.config)
        base = model.base_model
        cache_kwarg = compat.cache_argument(base)
        base(input_ids=ids, use_cache=True, **{cache_kwarg: cache})
        chunk = ids[:, -num_tokens:]  # [1, num_tokens]
        timings = []
        for _ in range(warmup + steps):
            start = time.perf_counter()
            hidden = base(input_ids=chunk, use_cache=True, **{cache_kwarg: cache}).last_hidden_state
            hidden @ head.T  # [1, num_tokens, head]
            timings.append(time.perf_counter() - start)
            cache.crop(-num_tokens)
        return statistics.median(timings[warmup:]) * 1e3
    finally:
        torch.set_num_threads(previous)
