"""A second, smaller causal LM as drafter, with its own DynamicCache per generate() call."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from hf_specdec import compat, seq2seq
from hf_specdec.cache import CachedModel
from hf_specdec.drafters.base import Draft, DraftContext, Drafter, DraftSession, TargetFeatures, declared_acceptance
from hf_specdec.tree import DraftTree, build_tree
from hf_specdec.verify import argmax, draw


class ModelDrafter(Drafter):
    """Drafts autoregressively with `model`, one forward per drafted token; with a confidence stop
    (`ctx.min_confidence`, `ctx.min_path`) a row stops after a token the model gave lower probability, or once the
    product of its top probabilities at the drafted positions (scaled: the model's odds that all of them are accepted)
    fell below `min_path` (after that many drafts, if given by depth).

    If the model's config carries `hf_specdec_vocab_subset` (a list of token ids, written by
    `hf-specdec distill`), only those rows of its LM head are computed and every other token gets
    probability 0. The object holds only the model; each call's cache lives in its `ModelDraftSession`.
    """

    def __init__(self, model: PreTrainedModel):
        self.model = model
        subset = getattr(model.config, "hf_specdec_vocab_subset", None)
        self.vocab_subset = None if subset is None else torch.tensor(subset, dtype=torch.long)

    def check_compatible(self, target, generation_config, tokenizer=None, drafter_tokenizer=None) -> int:
        shared = compat.check_model_pair(target, self.model, generation_config, tokenizer, drafter_tokenizer)
        seq2seq.check_drafter_encoder(self.model)
        return shared

    @property
    def expected_acceptance(self) -> float | None:
        """The model config's `hf_specdec_acceptance` (written by `hf-specdec distill`), else None."""
        return declared_acceptance(self.model.config, "the drafter")

    def start(self, target, batch_size: int, device: torch.device) -> "ModelDraftSession":
        return ModelDraftSession(CachedModel(self.model, batch_size, device, vocab_subset=self.vocab_subset))


class ModelDraftSession(DraftSession):
    """The drafter model's cache for one call. The first forward of a step also feeds whatever the
    drafter has not seen yet (the prompt, the target's recovered/bonus token, the last accepted draft),
    so nothing is fed twice."""

    def __init__(self, cached: CachedModel):
        self.cached = cached
        self.slack = 1  # cache columns allowed beyond the longest row before compaction
        # Whether the cache may hold proposals that `observe` has not rolled back yet. Between proposals it holds
        # committed tokens only, and those stay committed: a plain step's `observe` has nothing to drop.
        self.proposed = False

    @property
    def num_forwards(self) -> int:
        return self.cached.num_forwards

    def propose(self, ctx: DraftContext, num_tokens: torch.Tensor) -> Draft:
        self.proposed = True
        batch = ctx.lens.shape[0]
        tokens = torch.full((batch, int(num_tokens.max())), -1, dtype=torch.long, device=ctx.lens.device)
        probs = []  # sampling: [batch, vocab] per drafted column
        drafting = ctx.active.clone()  # [batch] rows the confidence stop has not stopped
        path = 1.0  # then [batch]: the product of each row's odds read from its top probabilities
        odds = torch.tensor(ctx.path_odds, device=ctx.lens.device) if ctx.path_odds else None  # [band]
        floors = ctx.min_path if isinstance(ctx.min_path, tuple) else (ctx.min_path,)  # by drafts made (the last: on)
        stops, confidences = ctx.min_confidence > 0 or max(floors, default=0.0) > 0, []
        num_drafted = torch.zeros_like(num_tokens)  # [batch]
        width = 0  # columns drafted so far
        for j in range(tokens.shape[1]):
            rows = drafting & (j < num_tokens)  # [batch] rows that want draft j + 1
            if not rows.any():
                break
            width = j + 1
            at = ctx.lens + j  # [batch] buffer index of draft j + 1
            logits = self._draft_logits(ctx, rows, at)  # [batch, 1, vocab]
            scores = ctx.process(logits[:, 0, : ctx.vocab_size], at, rows)  # [batch, vocab]
            step_probs = scores.softmax(dim=-1) if ctx.do_sample or stops else None
            if ctx.do_sample:
                probs.append(step_probs)
                token = draw(step_probs, ctx.generator)  # [batch]
            else:
                token = argmax(scores)
            tokens[:, j] = torch.where(rows, token, -1)
            num_drafted += rows
            # Later drafts (and the target) read this draft from the shared buffer.
            index = rows.nonzero().squeeze(1)
            ctx.sequences[index, at[index]] = token[index]
            if stops:
                # The doubtful token itself is still verified: dropping it would make the kept drafts
                # follow q restricted to confident tokens, not the q that verification divides by.
                # The odds read the drafter's top probability (greedy: the draft's own), a function of the
                # prefix: a sampled draft's own probability tells its acceptance poorly (docs/policies.md).
                top = step_probs.max(dim=-1).values  # [batch]
                drawn = step_probs.gather(1, token[:, None]).squeeze(1) if ctx.do_sample else top  # [batch]
                confidences.append(top)
                # (in float32: an fp16 top times the bands rounds up across a band's edge; the schedule counts it below)
                path = path * (top if odds is None else odds[(top.float() * len(odds)).long().clamp(max=len(odds) - 1)])
                drafting &= (drawn >= ctx.min_confidence) & (path >= floors[min(j, len(floors) - 1)])
        self.slack = width + 1
        draft_probs = torch.stack(probs, dim=1) if probs else None  # [batch, width, vocab]
        confidence = torch.stack(confidences, dim=1) if confidences else None  # [batch, width]
        return Draft(tokens=tokens[:, :width], num_drafted=num_drafted, probs=draft_probs, confidence=confidence)

    def score_prompt(self, ctx: DraftContext, num_positions: int):
        """The model's prefill over every committed token but the last, with logits at the last `num_positions`."""
        logits, _ = self.cached.forward(ctx.sequences, ctx.pad_lens, ctx.lens - 1, num_positions)
        logits = logits[..., : ctx.vocab_size]  # [batch, positions, vocab]
        index = ctx.lens[:, None] - num_positions - 1 + torch.arange(num_positions, device=ctx.lens.device)
        return torch.where(index >= ctx.pad_lens[:, None], logits.argmax(dim=-1), -1), logits

    def _draft_logits(self, ctx: DraftContext, rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """[batch, 1, vocab] logits for the token at buffer index `at` of the `rows` that draft; the other
        rows only catch up on what they have not fed yet."""
        logits, _ = self.cached.forward(ctx.sequences, ctx.pad_lens, torch.where(rows, at, ctx.lens), 1, at)
        return logits

    def observe(self, num_valid: torch.Tensor, features: TargetFeatures | None = None) -> None:
        if self.proposed:
            self.cached.rollback(torch.minimum(self.cached.num_cached, num_valid), slack=self.slack)
            self.proposed = False

    drafts_trees = True

    def check_trees(self) -> None:
        self.cached.check_trees()

    def propose_tree(self, ctx: DraftContext, policy, row_depth: torch.Tensor) -> DraftTree:
        """EAGLE-2's tree (`hf_specdec.tree.build_tree`) from this model's distributions: one forward for the
        root (catching up on what the model has not seen), then one per depth over the frontier nodes, each
        attending to its own path only. Children are ranked by the model's raw softmax: the children are
        deterministic proposals, so which ones are drafted changes speed only, never what is generated.
        The tree's columns are dropped from the cache afterwards (the accepted tokens are fed again with
        the next step's root, in that step's first forward)."""
        self.proposed = True
        roots = ctx.sequences.gather(1, (ctx.lens - 1)[:, None]).squeeze(1)  # [batch]
        cached = self.cached

        def expand(candidates: DraftTree, frontier: torch.Tensor) -> torch.Tensor:
            feed = frontier[:, :0] if not cached.tree_pending else frontier  # the first forward: the root's
            logits = cached.forward_tree(ctx.sequences, ctx.pad_lens, ctx.lens, candidates, feed=feed)
            return logits[..., : ctx.vocab_size].softmax(dim=-1)  # [batch, width, vocab]

        tree = build_tree(roots, expand, policy.top_k, policy.max_depth, policy.max_nodes, row_depth)
        if cached.tree_pending:
            cached.keep_paths(row_depth.new_zeros(row_depth.shape[0], 0), torch.zeros_like(row_depth))
        self.slack = policy.top_k * policy.max_depth + 1
        return tree
