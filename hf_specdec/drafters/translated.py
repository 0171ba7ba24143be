"""A drafter with another tokenizer: its drafts reach the target through text (greedy) or through the tokens both
vocabularies share (sampling).

Contract: `TranslatedDrafter` describes a causal LM and the two tokenizers (shared by calls and threads); each call's
`TranslatedDraftSession` holds the drafter's cache and each row's drafter tokens. Before drafting, a row's text (its
target tokens, decoded) is tokenized by the drafter's tokenizer and the cache keeps the longest prefix it already
holds. Greedy drafts are decoded to text and tokenized by the target's tokenizer (Universal Assisted Generation);
sampled drafts are drawn from the drafter's distribution restricted to the shared tokens, renormalized on the
target's vocabulary (the token-level intersection, Timor et al., ICML 2025), which rejection sampling verifies exactly.
"""

from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel
from transformers.convert_slow_tokenizer import bytes_to_unicode

from hf_specdec import compat
from hf_specdec.cache import CachedModel
from hf_specdec.drafters.base import Draft, DraftContext, Drafter, DraftSession
from hf_specdec.drafters.model import ModelDrafter
from hf_specdec.errors import TokenizerMismatchError, VocabMismatchError
from hf_specdec.verify import argmax, draw

#: Below this share of the target's vocabulary in common, a drafter of another tokenizer is refused: its tokens and
#: text hardly meet the target's (another script, a byte-only vocabulary), so it would cost forwards for nothing.
MIN_SHARED_SHARE = 0.1
#: Committed tokens re-tokenized with a draft's text, so that tokens merging across the boundary are found.
TAIL = 3
_DECODE = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
_BYTE_DECODER = {char: byte for byte, char in bytes_to_unicode().items()}
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_keys(tokenizer) -> dict[object, int]:
    """{key: id} for every token of `tokenizer`, keyed so that equal keys are the same text in any tokenizer: the
    token's bytes (byte-level BPE's printable stand-ins decoded, SentencePiece's "▁" as a space, "<0xNN>" as a
    byte), or ("special", content) for added special tokens (matched by their content only)."""
    special = {token.content for token in tokenizer.added_tokens_decoder.values() if token.special}
    vocab = tokenizer.get_vocab()
    byte_level = any("Ġ" in token for token in vocab)
    keys = {}
    for token, index in vocab.items():
        if token in special:
            key = ("special", token)
        elif byte_level and all(char in _BYTE_DECODER for char in token):
            key = bytes(_BYTE_DECODER[char] for char in token)
        elif _BYTE_TOKEN.fullmatch(token):
            key = bytes([int(token[3:5], 16)])
        else:
            key = token.replace("▁", " ").encode()
        keys.setdefault(key, index)
    return keys


@dataclass(frozen=True)
class VocabMap:
    """Which drafter token is which target token, where both vocabularies have it (one-to-one)."""

    to_target: torch.Tensor  # [drafter_width] long, the target id of each drafter id, -1 where none
    to_drafter: torch.Tensor  # [target_width] long, the inverse, -1 where none
    num_shared: int
    target_size: int  # tokens in the target's tokenizer

    @property
    def shared_share(self) -> float:
        return self.num_shared / max(self.target_size, 1)


def build_vocab_map(tokenizer, drafter_tokenizer, target_width: int, drafter_width: int,
                    target_eos: int | None, drafter_eos: set[int]) -> VocabMap:
    """The shared tokens by `token_keys`, with the drafter's end-of-sequence tokens mapped to the target's (their
    contents may differ: "</s>" and "<|im_end|>" end a sequence alike)."""
    target_keys = token_keys(tokenizer)
    to_target = torch.full((drafter_width,), -1, dtype=torch.long)
    for key, index in token_keys(drafter_tokenizer).items():
        if key in target_keys and index < drafter_width and target_keys[key] < target_width:
            to_target[index] = target_keys[key]
    if target_eos is not None:  # one drafter end-of-sequence token maps to the target's, keeping the map one-to-one
        to_target[to_target == target_eos] = -1
        ends = sorted(index for index in drafter_eos if index < drafter_width)
        if ends:
            to_target[ends[0]] = target_eos
    to_drafter = torch.full((target_width,), -1, dtype=torch.long)
    shared = (to_target >= 0).nonzero().squeeze(1)
    to_drafter[to_target[shared]] = shared
    return VocabMap(to_target, to_drafter, int(shared.numel()), len(tokenizer))


def translate_draft(
    tokenizer, drafter_tokenizer, target_tail: list[int], drafter_tail: list[int], drafted: list[int], num_sure: int
) -> list[int]:
    """Target ids for the text of `drafted` (drafter ids, end-of-sequence excluded) after a row whose last committed
    tokens are `target_tail` (target ids) and `drafter_tail` (the same text's last drafter ids).

    Only target tokens that end within the text of the first `num_sure` drafted tokens are kept: the rest may end
    inside a longer target token that the drafter's next token would complete (the caller drafts one token past
    what it needs). The draft's text is tokenized after the committed tail's, so that a target token spanning the
    tail and the draft is seen; where the tail then no longer tokenizes as committed (the draft continues the row's
    last token, which cannot change), the draft's text is tokenized alone."""
    base = drafter_tokenizer.decode(drafter_tail, **_DECODE)
    full = drafter_tokenizer.decode(drafter_tail + drafted, **_DECODE)
    sure = drafter_tokenizer.decode(drafter_tail + drafted[:num_sure], **_DECODE)
    if not (full.startswith(base) and sure.startswith(base)):
        return []
    text, sure_end = full[len(base):], len(sure) - len(base)
    broken = text.find("\ufffd")  # a draft that ends inside a character's bytes
    if broken >= 0:
        text, sure_end = text[:broken], min(sure_end, broken)
    prefix = tokenizer.decode(target_tail, **_DECODE)
    encoded = tokenizer(prefix + text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets, shift = encoded["input_ids"], encoded["offset_mapping"], len(prefix)
    if ids[: len(target_tail)] == target_tail:
        ids, offsets = ids[len(target_tail):], offsets[len(target_tail):]
    else:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets, shift = encoded["input_ids"], encoded["offset_mapping"], 0
    kept = []
    for token, (_, end) in zip(ids, offsets):
        # A token ending where the text was cut at a broken character may be the start of a longer one.
        if end - shift > sure_end or (broken >= 0 and end - shift >= broken):
            break
        kept.append(token)
    return kept


_MAPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # drafter tokenizer -> {id(tokenizer): (ref, map)}
_MAPS_LOCK = threading.Lock()


class TranslatedDrafter(Drafter):
    """Drafts with `model`, whose tokenizer (`drafter_tokenizer`) differs from the target's (`tokenizer`).

    Greedy: the drafter's tokens are decoded and tokenized again by the target's tokenizer (one token drafted past
    the request, so a draft never ends inside a target token). Sampling: only tokens both vocabularies share are
    drafted, from the drafter's (processed) distribution renormalized over them: a proposal that rejection sampling
    verifies exactly. generate() builds one when `drafter_tokenizer=` and `tokenizer=` differ (`for_tokenizers`).
    """

    def __init__(self, model: PreTrainedModel, drafter_tokenizer, tokenizer):
        self.model = model
        self.vocab_subset = ModelDrafter(model).vocab_subset  # a reduced head (`hf_specdec_vocab_subset`), or None
        self.drafter_tokenizer = drafter_tokenizer
        self.tokenizer = tokenizer

    def vocab_map(self, target) -> VocabMap:
        """The shared tokens, computed once per pair of tokenizers (kept while both live) and shared by threads."""
        with _MAPS_LOCK:
            per_drafter = _MAPS.setdefault(self.drafter_tokenizer, {})
            ref, known = per_drafter.get(id(self.tokenizer), (None, None))
            if ref is None or ref() is not self.tokenizer:
                eos = compat._eos_set(target.generation_config.eos_token_id) or set()
                drafter_eos = compat._eos_set(self.model.generation_config.eos_token_id) or set()
                if self.drafter_tokenizer.eos_token_id is not None:
                    drafter_eos.add(self.drafter_tokenizer.eos_token_id)
                known = build_vocab_map(
                    self.tokenizer, self.drafter_tokenizer, target.config.get_text_config().vocab_size,
                    self.model.config.get_text_config().vocab_size, min(eos) if eos else None, drafter_eos,
                )
                per_drafter[id(self.tokenizer)] = (weakref.ref(self.tokenizer), known)
            return known

    def check_compatible(self, target, generation_config, tokenizer=None, drafter_tokenizer=None) -> int:
        if self.model.config.is_encoder_decoder:
            raise VocabMismatchError(f"the drafter {type(self.model).__name__} must be a decoder-only causal LM.")
        compat.check_model_interface(self.model, "drafter")
        vocab = self.vocab_map(target)
        if vocab.shared_share < MIN_SHARED_SHARE:
            raise VocabMismatchError(
                f"the drafter's tokenizer shares {vocab.num_shared} of the target's {vocab.target_size} tokens "
                f"({vocab.shared_share:.1%}, under {MIN_SHARED_SHARE:.0%}): its drafts would hardly ever be accepted. "
                "Use a drafter whose tokenizer covers the target's text (same script, a related model family)."
            )
        return target.config.get_text_config().vocab_size

    def start(self, target, batch_size: int, device: torch.device) -> "TranslatedDraftSession":
        cached = CachedModel(self.model, batch_size, device, vocab_subset=self.vocab_subset)
        return TranslatedDraftSession(self, self.vocab_map(target), cached, target)


def for_tokenizers(drafter: Drafter, tokenizer, drafter_tokenizer) -> Drafter:
    """`drafter`, or a TranslatedDrafter of its model where both tokenizers are given and differ (the class or the
    token -> id map): what generate() does with `drafter_tokenizer=`."""
    if not isinstance(drafter, ModelDrafter) or tokenizer is None or drafter_tokenizer is None:
        return drafter
    try:
        compat.check_tokenizers(tokenizer, drafter_tokenizer)
    except TokenizerMismatchError:
        return TranslatedDrafter(drafter.model, drafter_tokenizer, tokenizer)
    return drafter


class TranslatedDraftSession(DraftSession):
    """One call's drafter cache and, per row, the drafter ids it was last fed or drafted (`rows`)."""

    def __init__(self, drafter: TranslatedDrafter, vocab: VocabMap, cached: CachedModel, target):
        self.drafter, self.vocab, self.cached = drafter, vocab, cached
        self.rows: list[list[int]] = [[] for _ in range(cached.num_cached.shape[0])]
        self.tokens_fed = 0  # drafter tokens fed in this call (a row's unchanged text is not fed again)
        self.target_bos = target.generation_config.bos_token_id
        self.drafter_bos = drafter.drafter_tokenizer.bos_token_id
        eos = compat._eos_set(target.generation_config.eos_token_id)
        self.target_eos = min(eos) if eos else None
        self.drafter_eos = set() if self.target_eos is None else set(
            (vocab.to_target == self.target_eos).nonzero().squeeze(1).tolist())
        if drafter.drafter_tokenizer.eos_token_id is not None:
            self.drafter_eos.add(drafter.drafter_tokenizer.eos_token_id)
        self.drafter_size = len(drafter.drafter_tokenizer)
        limit = getattr(drafter.model.config.get_text_config(), "max_position_embeddings", None)
        self.limit = limit if isinstance(limit, int) and limit > 0 else None
        self.slack = 1
        device = cached.device
        shared = vocab.to_target >= 0
        self.shared_drafter = shared.nonzero().squeeze(1).to(device)  # [shared] drafter ids
        self.shared_target = vocab.to_target[shared].to(device)  # [shared] their target ids
        self.to_drafter = vocab.to_drafter.to(device)

    @property
    def num_forwards(self) -> int:
        return self.cached.num_forwards

    def _context(self, target_ids: list[int]) -> list[int]:
        """The drafter's tokens for a row's text: the target's BOS becomes the drafter's, the rest goes through text
        (special tokens by their content)."""
        prefix = []
        if target_ids and self.target_bos is not None and target_ids[0] == self.target_bos:
            target_ids = target_ids[1:]
            prefix = [self.drafter_bos] if self.drafter_bos is not None else []
        text = self.drafter.tokenizer.decode(target_ids, **_DECODE)
        return prefix + self.drafter.drafter_tokenizer(text, add_special_tokens=False)["input_ids"]

    def propose(self, ctx: DraftContext, num_tokens: torch.Tensor) -> Draft:
        batch, device = ctx.lens.shape[0], ctx.lens.device
        want = torch.where(ctx.active, num_tokens, 0).tolist()
        sequences, pad_lens, lens = ctx.sequences.cpu(), ctx.pad_lens.tolist(), ctx.lens.tolist()
        contexts = list(self.rows)
        for row in range(batch):
            if want[row] > 0:
                contexts[row] = self._context(sequences[row, pad_lens[row]:lens[row]].tolist())
                if not contexts[row]:
                    want[row] = 0
        # 1. The cache keeps what it holds of each row's text; at least the row's last token is fed again.
        num_cached = self.cached.num_cached.tolist()
        keep = list(num_cached)
        for row in range(batch):
            if want[row] > 0:
                held, new = self.rows[row][: num_cached[row]], contexts[row]
                same = next((i for i, (a, b) in enumerate(zip(held, new)) if a != b), min(len(held), len(new)))
                keep[row] = min(same, len(new) - 1)
        if keep != num_cached:
            self.cached.rollback(torch.tensor(keep, device=device), slack=self.slack)
        # 2. Draft in the drafter's buffer: greedy one token past the request (translate_draft's look-ahead).
        extra = 0 if ctx.do_sample else 1
        num_draft = [n + extra if n > 0 else 0 for n in want]
        if self.limit is not None:
            num_draft = [max(0, min(n, self.limit - len(c) - 1)) for n, c in zip(num_draft, contexts)]
        width = max(num_draft, default=0)
        context_len = max((len(c) for c in contexts), default=0)
        buffer = torch.zeros(batch, context_len + width + 1, dtype=torch.long)
        for row, ids in enumerate(contexts):
            if ids:
                buffer[row, context_len - len(ids):context_len] = torch.tensor(ids)
        buffer = buffer.to(device)
        d_pad = torch.tensor([context_len - len(c) for c in contexts], device=device)  # [batch]
        d_lens = torch.full((batch,), context_len, device=device)  # [batch] every row's context ends there
        drafting = torch.tensor(num_draft, device=device) > 0  # [batch]
        limits = torch.tensor(num_draft, device=device)
        probs, num_drafted, eos_at = [], torch.zeros(batch, dtype=torch.long, device=device), {}
        fed_before = int(self.cached.num_cached.sum())
        eos_ids = torch.tensor(sorted(self.drafter_eos), dtype=torch.long, device=device)
        for j in range(width):
            rows = drafting & (j < limits)  # [batch]
            if not bool(rows.any()):
                break
            at = d_lens + j  # [batch] buffer index of drafter token j + 1
            logits, _ = self.cached.forward(buffer, d_pad, torch.where(rows, at, d_lens), 1, at)
            logits = logits[:, 0]  # [batch, drafter_width]
            if ctx.do_sample:
                token_d, step_probs, drew = self._sample(ctx, logits, rows, j)
                probs.append(step_probs)
                drafting &= drew | ~rows
                rows = drew
            else:
                logits[:, self.drafter_size:] = float("-inf")  # head rows past the tokenizer decode to nothing
                token_d = argmax(logits)
            index = rows.nonzero().squeeze(1)
            buffer[index, at[index]] = token_d[index]
            num_drafted += rows
            stop = rows & torch.isin(token_d, eos_ids)
            for row in stop.nonzero().squeeze(1).tolist():
                eos_at[row] = j
            drafting &= ~stop
        self.tokens_fed += int(self.cached.num_cached.sum()) - fed_before
        self.slack = width + 1
        for row in range(batch):
            if num_draft[row] > 0:  # the row's context and drafts, as the buffer holds them
                self.rows[row] = buffer[row, context_len - len(contexts[row]):context_len + int(num_drafted[row])].tolist()
            elif want[row] > 0:
                self.rows[row] = contexts[row]
        if ctx.do_sample:
            width = int(num_drafted.max())
            draft_probs = torch.stack(probs, dim=1)[:, :width] if probs else None  # [batch, width, vocab]
            return Draft(tokens=self._written(ctx, num_drafted, width), num_drafted=num_drafted, probs=draft_probs)
        return self._translate(ctx, want, contexts, buffer, context_len, num_drafted, eos_at)

    def _sample(self, ctx: DraftContext, logits: torch.Tensor, rows: torch.Tensor, j: int):
        """Draws draft j + 1 of each of `rows` from the drafter's distribution over the shared tokens, placed on the
        target's vocabulary and processed as generate() processes the target's scores. Returns (drafter ids
        [batch], probabilities [batch, vocab] it was drawn from, the rows that could draw)."""
        scores = logits.new_full((logits.shape[0], ctx.vocab_size), float("-inf"))  # [batch, vocab]
        scores[:, self.shared_target] = logits[:, self.shared_drafter]
        at = ctx.lens + j  # [batch] buffer index of the draft in the target's buffer
        processed = ctx.process(scores, at, rows)
        rows = rows & torch.isfinite(processed).any(dim=-1)  # a row whose processing left no shared token stops
        processed = torch.where(rows[:, None], processed, 0.0)
        step_probs = processed.softmax(dim=-1)  # [batch, vocab]
        token = draw(step_probs, ctx.generator)  # [batch] target ids
        index = rows.nonzero().squeeze(1)
        ctx.sequences[index, at[index]] = token[index]  # later drafts' processors read it, as the target's will
        return self.to_drafter[token].clamp_min(0), step_probs, rows

    def _written(self, ctx: DraftContext, num_drafted: torch.Tensor, width: int) -> torch.Tensor:
        """[batch, width] the sampled target ids `_sample` wrote after each row, -1 past its drafts."""
        index = ctx.lens[:, None] + torch.arange(width, device=ctx.lens.device)  # [batch, width]
        tokens = ctx.sequences.gather(1, index)
        return torch.where(torch.arange(width, device=tokens.device) < num_drafted[:, None], tokens, -1)

    def _translate(self, ctx, want, contexts, buffer, context_len, num_drafted, eos_at) -> Draft:
        """Greedy drafts through text: `translate_draft` per row, the target's EOS where the drafter ended."""
        batch, device = len(want), ctx.lens.device
        sequences, lens = ctx.sequences, ctx.lens.tolist()
        translated = [[] for _ in range(batch)]
        for row in range(batch):
            count = int(num_drafted[row])
            if want[row] == 0 or count == 0:
                continue
            drafted = buffer[row, context_len:context_len + count].tolist()
            ended = row in eos_at
            text_ids = drafted[:-1] if ended else drafted
            # Without an end, the last drafted token is the look-ahead (unless the position limit cut the draft).
            num_sure = len(text_ids) if ended or count < want[row] + 1 else len(text_ids) - 1
            target_tail = sequences[row, max(lens[row] - TAIL, int(ctx.pad_lens[row])):lens[row]].tolist()
            tokens = translate_draft(self.drafter.tokenizer, self.drafter.drafter_tokenizer, target_tail,
                                     contexts[row][-TAIL:], text_ids, num_sure)
            if ended and num_sure == len(text_ids) and self.target_eos is not None:
                tokens.append(self.target_eos)
            translated[row] = tokens[: want[row]]
        width = max((len(t) for t in translated), default=0)
        tokens = torch.full((batch, width), -1, dtype=torch.long)
        for row, ids in enumerate(translated):
            tokens[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        counts = torch.tensor([len(t) for t in translated], dtype=torch.long)
        return Draft(tokens=tokens.to(device), num_drafted=counts.to(device))
