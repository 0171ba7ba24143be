"""The drafter interface: what the loop asks of anything that proposes tokens.

Contract: a `Drafter` is a description (a model, settings) that any number of generate() calls and
threads may share; it never changes during a call. Each call asks it for a `DraftSession`
(`Drafter.start`), which holds everything the call learns (a KV cache, counters) and dies with the
call. A session's `propose` returns up to `num_tokens` tokens per row (and the distributions they were
drawn from); `observe` tells it how many leading tokens of each row survived verification, with the
target's hidden states when the drafter asked for them. The loop never looks inside a drafter.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import torch

from hf_specdec.cache import CachedModel, TargetFeatures  # noqa: F401  (TargetFeatures: part of the drafter interface)
from hf_specdec.errors import DrafterLoadError


@dataclass
class DraftContext:
    """What a drafter may read during one generate() call.

    Row b's tokens so far are `sequences[b, pad_lens[b]:lens[b]]` (the buffer is left-padded and has
    room for `num_tokens` more tokens after `lens`). `process(scores, lengths, rows)` applies
    generate()'s logits processors to raw drafter logits of the selected rows, as plain generate()
    would at those lengths. `min_confidence` is the draft policy's confidence stop: a drafter that
    scores its proposals stops a row after a token it gave lower probability, and once the product of its top
    probabilities at the row's drafted positions, each read as `path_odds[band]` (a draft's acceptance by the band of
    its top probability, equal bands over [0, 1]; empty: the probability itself), is below `min_path` (the schedule's,
    per step: one floor, or a floor after each number of drafts, 1, 2, ..., the last for any more; others ignore them).
    `target` is the call's target and its cache when a chain is drafted, for a drafter that runs the target's
    own first layers on it (`hf_specdec.cache.SharedPrefix`); others ignore it.
    """

    sequences: torch.Tensor  # [batch, buffer] long
    pad_lens: torch.Tensor  # [batch] long
    lens: torch.Tensor  # [batch] long
    active: torch.Tensor  # [batch] bool, rows that still generate
    vocab_size: int  # width of the distributions the target verifies against
    do_sample: bool
    generator: torch.Generator | None
    process: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    min_confidence: float = 0.0
    target: CachedModel | None = None
    min_path: float | tuple[float, ...] = 0.0
    path_odds: tuple[float, ...] = ()


@dataclass
class Draft:
    """Proposed tokens for one step.

    tokens[b, :num_drafted[b]] are row b's proposals; later entries are ignored. `probs` holds the
    distributions the proposals were sampled from (needed only when sampling); None means the
    proposals are deterministic (a one-point distribution on each token).
    """

    tokens: torch.Tensor  # [batch, num_tokens] long
    num_drafted: torch.Tensor  # [batch] long
    probs: torch.Tensor | None = None  # [batch, num_tokens, vocab] float
    confidence: torch.Tensor | None = None  # [batch, num_tokens] the drafter's top probability at each, if scored

    def draft_probs(self, vocab_size: int) -> torch.Tensor:
        """[batch, num_tokens, vocab]: `probs`, or one-hot distributions for a deterministic draft."""
        if self.probs is not None:
            return self.probs
        one_hot = torch.zeros(*self.tokens.shape, vocab_size, device=self.tokens.device)
        return one_hot.scatter_(2, self.tokens.clamp(0, vocab_size - 1)[:, :, None], 1.0)

    @staticmethod
    def none(batch_size: int, device: torch.device, vocab_size: int) -> "Draft":
        """No draft for any row (tokens [batch, 0], probs [batch, 0, vocab]): a plain step's, built once a call so a
        plain step pays no tensor op for it."""
        num_drafted = torch.zeros(batch_size, dtype=torch.long, device=device)  # [batch]
        probs = torch.zeros(batch_size, 0, vocab_size, device=device)
        return Draft(tokens=num_drafted[:, None][:, :0], num_drafted=num_drafted, probs=probs)

    def first(self, width: int) -> "Draft":
        """The draft cut to its first `width` columns (tokens, probs and confidence)."""
        probs, confidence = (None if t is None else t[:, :width] for t in (self.probs, self.confidence))
        return Draft(tokens=self.tokens[:, :width], num_drafted=self.num_drafted, probs=probs, confidence=confidence)


class DraftSession(ABC):
    """One generate() call's drafting state, made by `Drafter.start` and used by that call only."""

    #: Forward passes of the drafter's model in this call (0 for model-free drafters).
    num_forwards: int = 0
    #: Whether `propose_tree` drafts trees (`hf_specdec.TreeDraftPolicy`); a call with a tree policy and a
    #: session without it is refused before any forward.
    drafts_trees: bool = False

    @abstractmethod
    def propose(self, ctx: DraftContext, num_tokens: torch.Tensor) -> Draft:
        """Proposes up to `num_tokens[b]` ([batch] long) tokens after row b's current tokens."""

    def propose_tree(self, ctx: DraftContext, policy, row_depth: torch.Tensor):
        """Proposes one draft tree per row (`hf_specdec.tree.DraftTree`, node 0 = the row's last token) shaped
        by `policy` (a TreeDraftPolicy), at most `row_depth[b]` ([batch] long) deep. Sessions with
        `drafts_trees` implement it."""
        raise NotImplementedError(f"{type(self).__name__} drafts no trees.")

    def check_trees(self) -> None:
        """Raises UnsupportedModelError, before any forward, if this session's model cannot draft trees."""

    def score_prompt(self, ctx: DraftContext, num_positions: int) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The drafter's guesses at the tokens at buffer indices `ctx.lens - num_positions .. ctx.lens - 1` of each
        row (known tokens, after the target's first forward), from the tokens before each: (tokens [batch,
        num_positions] long, -1 where it has none; its raw logits [batch, num_positions, vocab], or None for
        deterministic guesses), or None when it cannot tell. The default policy starts each row from how often these
        agree with the target (`verify.agreement`). A session may keep what it computed (its prefill) for drafting."""
        return None

    def observe(self, num_valid: torch.Tensor, features: TargetFeatures | None = None) -> None:
        """After verification: the first `num_valid[b]` real tokens of row b are what the drafter saw when
        proposing (its context plus the accepted drafts); everything it proposed beyond is gone.
        `features` are the target's hidden states of this step's forward, when `Drafter.feature_layers`
        asked for some. A session that caches nothing ignores both. It runs after plain steps too (no
        drafts), where it should cost nothing: defer what only the next proposal needs."""


class Drafter(ABC):
    """Describes how to propose tokens for the target to verify.

    Subclasses implement `start`, which returns the per-call `DraftSession`. A drafter object is shared
    by every generate() call and thread it is passed to, so it holds no per-call state. Exactness never
    depends on the drafter: any proposal is verified against the target, so a bad drafter is only slow.
    """

    @abstractmethod
    def start(self, target, batch_size: int, device: torch.device) -> DraftSession:
        """A fresh session for one generate() call of `target` over `batch_size` rows on `device`."""

    def feature_layers(self, target) -> tuple[int, ...]:
        """Which of the target's hidden states this drafter reads, as indices into the model's
        `output_hidden_states` tuple (0 = embeddings, i = after decoder layer i; the last entry is
        the final, normalized state). Empty (the default): the target runs without them, at no cost."""
        return ()

    def check_compatible(self, target, generation_config, tokenizer=None, drafter_tokenizer=None) -> int:
        """Raises an IncompatibleDrafterError subclass if this drafter cannot serve `target`; returns the
        vocabulary width that drafts and target scores share (the target's for model-free drafters)."""
        return target.config.get_text_config().vocab_size

    @property
    def expected_acceptance(self) -> float | None:
        """The per-token acceptance this drafter expects with its target (how often a draft that follows accepted
        ones is accepted: on-path, one draft per step, greedy, on requests it was not trained on), or None when
        unknown. The default policy starts each row from it (`CostAwareDraftPolicy.prior_alpha`), so a drafter
        right a quarter of the time is not first drafted with as if right half the time. It changes how fast,
        never what is generated."""
        return None


class StatelessDrafter(Drafter, DraftSession):
    """A drafter whose proposals depend only on the context it is shown (no cache, no counters): it is
    its own session, so subclasses implement `propose` alone."""

    def start(self, target, batch_size: int, device: torch.device) -> DraftSession:
        return self


#: The config.json key (of a causal-LM drafter, or of a feature head) holding `Drafter.expected_acceptance`; written by
#: `hf-specdec distill` from the acceptance it measured on its evaluation requests.
ACCEPTANCE_ATTR = "hf_specdec_acceptance"


def declared_acceptance(config, where: str) -> float | None:
    """`config`'s `hf_specdec_acceptance`, checked: a probability in [0, 1], else DrafterLoadError naming `where`."""
    value = getattr(config, ACCEPTANCE_ATTR, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise DrafterLoadError(
            f"{where}'s config.json sets {ACCEPTANCE_ATTR} = {value!r}; it must be the drafter's measured per-token "
            f"acceptance, a number in [0, 1]. Fix or remove the entry (without it the default policy assumes 0.5)."
        )
    return float(value)


def forget_acceptance(config) -> None:
    """Removes `hf_specdec_acceptance` from `config` (a model that is not the one measured: a narrowed head, a drafter
    with fresh weights), so the default policy does not start from another model's acceptance."""
    config.__dict__.pop(ACCEPTANCE_ATTR, None)
