"""Building, training and measuring a feature head (EAGLE) for a target, from stored target states.

Contract: `build_feature_head(target, kind, draft_vocab)` returns a FeatureHead initialised from the
target (its LM-head rows, its final norm, one of its decoder layers); `train_feature_head` trains it
with the training-time test of EAGLE-3: every anchor position is unrolled `ttt_steps` times, each step
reading the head's own predicted state from the step before, attending to the exact entries up to the
anchor and to its own earlier steps, exactly as drafting does; `evaluate_feature_head` runs the same
unrolled pass without gradients and reports the agreement at each draft depth along the target's own
greedy choices.

The loss is the cross-entropy from the target's next-token distribution restricted to the draft
vocabulary (computed from the target's final state, stored with the others) to the head's, weighted
0.8^k at depth k (EAGLE-3's weights).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm
from transformers import LlamaConfig

from hf_specdec.drafters.feature import FeatureHead, default_feature_layers

from .data import Record
from .features import FeatureStore


def head_config(target, kind: str, feature_layers: Sequence[int], draft_vocab_size: int | None) -> LlamaConfig:
    """A one-layer LlamaConfig shaped like the target's layers, with the head's own fields."""
    text = target.config.get_text_config()
    rope = getattr(text, "rope_parameters", None)
    config = LlamaConfig(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=text.intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=getattr(text, "num_key_value_heads", text.num_attention_heads),
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
        hidden_act=getattr(text, "hidden_act", "silu"),
        max_position_embeddings=text.max_position_embeddings,
        rms_norm_eps=getattr(text, "rms_norm_eps", 1e-5),
        rope_parameters=dict(rope) if rope else None,
        attention_bias=False,
        tie_word_embeddings=False,
        bos_token_id=text.bos_token_id,
        eos_token_id=text.eos_token_id,
        pad_token_id=text.pad_token_id,
    )
    config.architectures = ["LlamaForCausalLMEagle3" if kind == "eagle3" else "LlamaForCausalLM"]
    config.hf_specdec_kind = kind
    config.hf_specdec_feature_layers = [int(layer) for layer in feature_layers]
    if kind == "eagle3":
        config.draft_vocab_size = draft_vocab_size
        config.target_hidden_size = text.hidden_size
    return config


@torch.no_grad()
def build_feature_head(
    target, kind: str = "eagle3", draft_vocab: Sequence[int] | None = None, init_layer: int | None = None
) -> FeatureHead:
    """A FeatureHead for `target`, initialised from it.

    Args:
        kind: "eagle3" (three fused layers, own LM head over `draft_vocab`) or "eagle1" (last state, the
            target's LM head).
        draft_vocab: target token ids the eagle3 head can propose (e.g. the most frequent response tokens).
        init_layer: the target decoder layer the head's layer starts from (default: eagle3 the layer that
            reads its highest feature, eagle1 the last); the eagle3 head reads that feature through an
            identity slice of fc, so at step 0 it starts out computing what that layer computes.
    """
    text = target.config.get_text_config()
    num_layers = text.num_hidden_layers
    layers = default_feature_layers(kind, num_layers)
    if kind == "eagle3" and draft_vocab is None:
        draft_vocab = list(range(text.vocab_size))
    config = head_config(target, kind, layers, None if draft_vocab is None else len(draft_vocab))
    head = FeatureHead(config).float()
    hidden = text.hidden_size
    source = target.model.layers[init_layer if init_layer is not None else (layers[-1] if kind == "eagle3" else -1)]
    attention = source.self_attn
    for name in ("q_proj", "k_proj", "v_proj"):
        weight = getattr(attention, name).weight.float()  # [out, hidden]
        mine = getattr(head, name).weight
        mine.zero_()
        mine[:, -hidden:] = weight  # eagle3: the feature half (the token half starts at 0)
    head.o_proj.weight.copy_(attention.o_proj.weight.float())
    head.mlp.load_state_dict({k: v.float() for k, v in source.mlp.state_dict().items()})
    head.post_attention_layernorm.weight.copy_(source.post_attention_layernorm.weight.float())
    head.fc.weight.zero_()
    if kind == "eagle1":
        head.fc.weight[:, hidden:] = torch.eye(hidden)  # the state passes, the token starts at 0
    else:
        head.fc.weight[:, -hidden:] = torch.eye(hidden)  # the highest layer's state passes
        head.hidden_norm.weight.copy_(source.input_layernorm.weight.float())
        head.input_layernorm.weight.fill_(1.0)
        head.norm.weight.copy_(target.model.norm.weight.float())
        ids = torch.as_tensor(list(draft_vocab), dtype=torch.long)
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[ids].float())
        head.d2t.copy_(ids - torch.arange(len(ids)))
    return head.eval()


def check_widening(head: FeatureHead, size: int) -> None:
    """Raises ValueError unless `widen_vocab(head, ..., size)` can run: an eagle3 head, `size` at least its vocabulary."""
    own = head.draft_ids()
    if head.kind != "eagle3" or own is None:
        raise ValueError(f"an {head.kind} head scores the target's whole vocabulary; there is no draft vocabulary to "
                         "widen (leave --vocab-size out).")
    if size < len(own):
        raise ValueError(f"the head proposes {len(own)} tokens; a vocabulary of {size} would drop some it was trained on "
                         f"(pass a size of at least {len(own)}, or train a new head).")


def widen_vocab(head: FeatureHead, target, records: Sequence[Record], size: int, always: Sequence[int] = ()) -> FeatureHead:
    """An eagle3 `head` over a draft vocabulary of `size` tokens: its own tokens, whose trained LM-head rows it
    keeps, plus the most frequent response tokens of `records` it lacks (and `always`), whose rows start as a
    fresh head's do (the target's LM-head rows). Every other weight is the head's. A trained head's vocabulary
    can only grow: its tokens are what it has learned to propose.

    Raises:
        ValueError: an eagle1 head (it scores the target's whole vocabulary), or `size` below the head's vocabulary.
    """
    from .model import select_vocab_subset

    check_widening(head, size)
    own = head.draft_ids()
    if size == len(own):
        return head
    ids = torch.as_tensor(select_vocab_subset(records, size, always=sorted({*own.tolist(), *always})), dtype=torch.long)
    rows = target.get_output_embeddings().weight.detach()[ids].float().clone()
    row_of = {token: row for row, token in enumerate(own.tolist())}
    new_rows = [row for row, token in enumerate(ids.tolist()) if token in row_of]
    rows[new_rows] = head.lm_head.weight.detach().float()[[row_of[token] for token in ids[new_rows].tolist()]]
    return _with_vocab(head, ids, rows)


def narrow_vocab(head: FeatureHead, keep: Sequence[int]) -> FeatureHead:
    """An eagle3 `head` over the draft vocabulary `keep` (target ids, all the head's own): the trained LM-head rows
    of those tokens and every other weight of the head, so each kept token scores as in `head`. A wide vocabulary
    trains a better trunk, but its LM head is paid at every drafting step (8,192 tokens: a bf16 head step 0.10
    of the SmolLM2 target's against 0.076 at 4,096); narrowed, the trunk's gain stays at the narrow cost.

    Raises:
        ValueError: an eagle1 head, no token kept, or a kept token outside the head's vocabulary.
    """
    own = head.draft_ids()
    if own is None:
        raise ValueError("an eagle1 head scores the target's whole vocabulary: there is no draft vocabulary to narrow.")
    ids = torch.as_tensor(sorted({int(t) for t in keep}), dtype=torch.long)
    row_of = {token: row for row, token in enumerate(own.tolist())}
    outside = [token for token in ids.tolist() if token not in row_of]
    if not len(ids) or outside:
        raise ValueError(f"narrowing keeps some of the head's own tokens; {len(outside)} of {len(ids)} are not in its "
                         f"{len(own)}-token vocabulary (e.g. {outside[:5]}).")
    return _with_vocab(head, ids, head.lm_head.weight.detach()[[row_of[token] for token in ids.tolist()]])


def _with_vocab(head: FeatureHead, ids: torch.Tensor, rows: torch.Tensor) -> FeatureHead:
    """A copy of eagle3 `head` (in `rows`' dtype) over the draft vocabulary `ids` ([draft] target ids, sorted), whose
    LM-head rows are `rows` [draft, hidden]; every other weight is the head's."""
    import copy

    config = copy.deepcopy(head.config)
    config.draft_vocab_size = len(ids)
    other = FeatureHead(config, fc_bias=head.fc.bias is not None).to(rows.dtype)
    kept = {name: value for name, value in head.state_dict().items() if name not in ("lm_head.weight", "d2t")}
    missing, unexpected = other.load_state_dict(kept, strict=False)
    assert sorted(missing) == ["d2t", "lm_head.weight"] and not unexpected, (missing, unexpected)
    with torch.no_grad():
        other.lm_head.weight.copy_(rows)
        other.d2t.copy_(ids - torch.arange(len(ids)))
    return other.eval()


def _store_columns(store: FeatureStore, layers: Sequence[int]) -> list[int]:
    missing = [layer for layer in layers if layer not in store.layers]
    if missing:
        raise ValueError(f"the feature store holds layers {store.layers}, the head needs {missing} too.")
    return [store.layers.index(layer) for layer in layers]


@dataclass
class Batch:
    input_ids: torch.Tensor  # [batch, seq] long, right-padded
    features: torch.Tensor  # [batch, seq, num_features * hidden] the head's input states
    final: torch.Tensor  # [batch, seq, hidden] the target's last (normalized) state
    loss_mask: torch.Tensor  # [batch, seq] bool, the token at this index is a response token


def make_batch(records: Sequence[Record], store: FeatureStore, layers: Sequence[int], final_layer: int) -> Batch:
    columns = _store_columns(store, layers)
    (final_column,) = _store_columns(store, [final_layer])
    width = max(len(record.ids) for record in records)
    first = store[records[0]]
    hidden = first.shape[-1]
    input_ids = torch.zeros(len(records), width, dtype=torch.long)
    features = torch.zeros(len(records), width, len(columns) * hidden)
    final = torch.zeros(len(records), width, hidden)
    loss_mask = torch.zeros(len(records), width, dtype=torch.bool)
    for row, record in enumerate(records):
        stored = store[record].float()  # [tokens, stored layers, hidden]
        n = len(record.ids)
        input_ids[row, :n] = torch.tensor(record.ids)
        features[row, :n] = stored[:, columns].reshape(n, -1)
        final[row, :n] = stored[:, final_column]
        loss_mask[row, record.prompt_len : n] = True
    return Batch(input_ids, features, final, loss_mask)


def _repeat_kv(states: torch.Tensor, heads: int) -> torch.Tensor:
    return states.repeat_interleave(heads // states.shape[1], dim=1)


def unrolled_states(head: FeatureHead, embed_tokens, batch: Batch, steps: int) -> list[torch.Tensor]:
    """The head's states over every anchor, unrolled `steps` times (the training-time test).

    Step 0 entry p reads (the target's state at p, token p + 1) at position p, causally over all exact
    entries. Step k >= 1 at anchor p reads (its own step k - 1 state, token p + k + 1) at position p + k,
    attending to the exact entries 0..p and to its own steps 1..k at anchor p: what drafting k tokens
    after the confirmed entry p sees. Returns one [batch, seq - 1, hidden] tensor per step; step k at p
    predicts the token at p + k + 2.
    """
    seq = batch.input_ids.shape[1] - 1
    positions = torch.arange(seq)[None].expand(batch.input_ids.shape[0], -1)  # [batch, seq]
    features = head.input_features(batch.features[:, :seq])
    attention_input, residual = head.layer_input(embed_tokens(batch.input_ids[:, 1:]), features)
    query, key0, value0 = head.qkv(attention_input, positions)
    heads = query.shape[1]
    key0, value0 = _repeat_kv(key0, heads), _repeat_kv(value0, heads)
    scale = 1.0 / math.sqrt(query.shape[-1])
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    exact_scores = lambda q: (q @ key0.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))  # noqa: E731
    state = head.layer_output(F.softmax(exact_scores(query), dim=-1) @ value0, residual)
    states, own_keys, own_values = [state], [], []
    for k in range(1, steps):
        # Step k at anchor p reads token p + k + 1; anchors past the end read padding and are never scored.
        tokens = _ahead(batch.input_ids, 1 + k, seq)
        attention_input, residual = head.layer_input(embed_tokens(tokens), states[-1])
        query, key, value = head.qkv(attention_input, positions + k)
        own_keys.append(_repeat_kv(key, heads))
        own_values.append(_repeat_kv(value, heads))
        own_scores = torch.stack([(query * key_j).sum(-1) * scale for key_j in own_keys], dim=-1)  # [b, h, seq, k]
        weights = F.softmax(torch.cat([exact_scores(query), own_scores], dim=-1), dim=-1)
        attended = weights[..., :seq] @ value0
        for j, value_j in enumerate(own_values):
            attended = attended + weights[..., seq + j, None] * value_j
        state = head.layer_output(attended, residual)
        states.append(state)
    return states


def _ahead(values: torch.Tensor, by: int, length: int) -> torch.Tensor:
    """[batch, length, ...]: at position p, `values[:, p + by]` (zeros past the end of dim 1)."""
    padding = values.new_zeros(values.shape[0], by, *values.shape[2:])
    return torch.cat([values[:, by:], padding], 1)[:, :length]


def _step_targets(head: FeatureHead, target_head_weight: torch.Tensor, batch: Batch, k: int):
    """(target log-probs over the head's vocabulary [batch, seq - 1, draft], scored mask [batch, seq - 1]) for
    depth k: anchor p predicts the token at p + k + 2 from the target's state at p + k + 1."""
    seq = batch.input_ids.shape[1] - 1
    target_logits = _ahead(batch.final, k + 1, seq) @ target_head_weight.T  # [batch, seq, draft]
    return F.log_softmax(target_logits, dim=-1), _step_mask(batch, k)


def _step_mask(batch: Batch, k: int) -> torch.Tensor:
    """[batch, seq - 1] the anchors scored at depth k: those whose token at p + k + 2 is a response token."""
    return _ahead(batch.loss_mask, k + 2, batch.input_ids.shape[1] - 1)


def _scores(head: FeatureHead, state: torch.Tensor, label_weight: torch.Tensor) -> torch.Tensor:
    """Head logits over its vocabulary; an eagle1 head scores with the target's (frozen) LM head."""
    return state @ label_weight.T if head.kind == "eagle1" else head.scores(state)


def _draft_head_weight(head: FeatureHead, target) -> torch.Tensor:
    """[draft, hidden] the target's LM-head rows over the head's vocabulary (the target's distribution,
    restricted and renormalised, is the label)."""
    weight = target.get_output_embeddings().weight.detach().float()
    ids = head.draft_ids()
    return weight if ids is None else weight[ids]


def epoch_order(num_records: int, seed: int, epoch: int) -> list[int]:
    """The order records are read in during `epoch`: a permutation that depends on (seed, epoch) only, so the
    data position of any step is known from the step alone (what makes a resumed run read what it would have)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_records, generator=generator).tolist()


def batch_indices(num_records: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Indices of the records of training step `step`: positions step * batch_size onwards of the
    concatenated epoch orders (every record once per epoch)."""
    indices = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, num_records)
        if offset == 0 or not indices or epoch != indices[-1][0]:
            order = epoch_order(num_records, seed, epoch)
        indices.append((epoch, order[offset]))
    return [index for _, index in indices]


def _fingerprint(records: Sequence[Record]) -> str:
    """A hash of the training records in their order: a checkpoint only resumes over the same data."""
    import hashlib

    from .features import record_key

    digest = hashlib.sha1()
    for record in records:
        digest.update(record_key(record).encode())
    return digest.hexdigest()


def save_checkpoint(path, head: FeatureHead, optimizer, step: int, losses: Sequence[float], tokens_seen: int,
                    elapsed_minutes: float, meta: dict, extra: dict) -> None:
    """Everything a resumed run needs, as tensors and plain values (loads with weights_only=True), written
    atomically (a crash while saving keeps the previous checkpoint)."""
    import json
    import os
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "head": head.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
        "losses": torch.tensor(list(losses), dtype=torch.float64), "tokens_seen": tokens_seen,
        "elapsed_minutes": elapsed_minutes, "torch_rng": torch.get_rng_state(),
        "meta": json.dumps(meta, sort_keys=True), "extra": json.dumps(extra),
    }
    scratch = path.with_name(path.name + ".partial")
    torch.save(state, scratch)
    os.replace(scratch, path)


def train_feature_head(
    head: FeatureHead,
    target,
    records: Sequence[Record],
    store: FeatureStore,
    *,
    steps: int = 2000,
    batch_size: int = 8,
    max_tokens: int = 512,
    ttt_steps: int = 3,
    lr: float = 3e-4,
    warmup: int = 50,
    max_minutes: float | None = None,
    seed: int = 0,
    progress: bool = True,
    log_every: int = 0,
    on_log=None,
    checkpoint: str | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    extra_state: dict | None = None,
    tv_weight: float = 0.0,
) -> list[float]:
    """Trains `head` in place (AdamW, cosine decay over steps or time, whichever runs out first) and
    returns every step's loss. Records longer than `max_tokens` are cut (from the end).

    The loss at each unrolled depth is the cross-entropy to the target's distribution over the head's
    vocabulary (KL up to a constant), plus `tv_weight` times 1 − Σ min(p, q): the rate at which sampling
    rejects the head's draft, which KL only bounds (a capacity-limited head can lower KL without raising it).

    Records are read in epoch orders (`batch_indices`), so step s always reads the same records.
    `on_log(step, losses, tokens_seen, minutes)` runs every `log_every` steps (eval mode, no gradients needed);
    `minutes` is the training time so far, carried across resumes.
    With `checkpoint` (a file path), the head, optimizer, schedule position, RNG state, losses, response
    tokens trained on and `extra_state` (JSON-able, e.g. a learning curve) are saved every
    `checkpoint_every` steps and at the end; `resume=True` continues from it (restoring `extra_state` in
    place), and gives the same weights as a run that never stopped when the schedule is by steps
    (with `max_minutes`, elapsed time is restored but the schedule follows the clock).

    Raises:
        ValueError: resuming over other records or settings than the checkpoint's.
    """
    import json

    torch.manual_seed(seed)
    usable = [record for record in records if len(record.ids) > record.prompt_len + 1 and record in store]
    if not usable:
        raise ValueError("no record with a response has stored features")
    embed_weight = target.get_input_embeddings().weight.detach().float()  # frozen: the target's
    label_weight = _draft_head_weight(head, target)
    final_layer = target.config.get_text_config().num_hidden_layers
    head.train()
    parameters = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0, betas=(0.9, 0.95), fused=True)
    meta = dict(records=_fingerprint(usable), steps=steps, batch_size=batch_size, max_tokens=max_tokens,
                ttt_steps=ttt_steps, lr=lr, warmup=warmup, seed=seed, max_minutes=max_minutes)
    if tv_weight:  # only when set, so checkpoints of runs without it still resume
        meta["tv_weight"] = tv_weight
    losses: list[float] = []
    first_step, tokens_seen, elapsed_before = 0, 0, 0.0
    if resume and checkpoint is not None and Path(checkpoint).exists():
        state = torch.load(checkpoint, weights_only=True)
        saved = json.loads(state["meta"])
        if saved != meta:
            differ = sorted(k for k in meta.keys() | saved.keys() if saved.get(k) != meta.get(k))
            raise ValueError(f"{checkpoint} was saved with other {', '.join(differ)} (training records or settings); "
                             "resume with the same data and options, or start a new run without --resume.")
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        first_step, tokens_seen, elapsed_before = state["step"], state["tokens_seen"], state["elapsed_minutes"]
        losses = state["losses"].tolist()
        if extra_state is not None:
            extra_state.clear()
            extra_state.update(json.loads(state["extra"]))

    started = time.monotonic()

    def elapsed() -> float:
        return elapsed_before + (time.monotonic() - started) / 60

    def save(step: int) -> None:
        if checkpoint is not None:
            save_checkpoint(checkpoint, head, optimizer, step, losses, tokens_seen, elapsed(), meta, extra_state or {})

    bar = tqdm(range(first_step, steps), initial=first_step, total=steps, desc="train feature head", disable=not progress)
    step = first_step
    for step in bar:
        done = max(step / steps, elapsed() / max_minutes if max_minutes else 0.0)
        if done >= 1.0:
            break
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * done))
        chosen = [usable[i] for i in batch_indices(len(usable), batch_size, step, seed)]
        batch = make_batch(chosen, store, head.feature_layers_for(final_layer), final_layer)
        if batch.input_ids.shape[1] > max_tokens:
            batch = Batch(*(tensor[:, :max_tokens] for tensor in (batch.input_ids, batch.features, batch.final, batch.loss_mask)))
        states = unrolled_states(head, lambda ids: F.embedding(ids, embed_weight), batch, ttt_steps)
        loss = torch.zeros(())
        for k, state in enumerate(states):
            target_log_probs, mask = _step_targets(head, label_weight, batch, k)
            if not mask.any():
                continue
            log_probs = F.log_softmax(_scores(head, state[mask], label_weight), dim=-1)  # [scored, draft]
            target_probs = target_log_probs[mask].exp()
            term = -(target_probs * log_probs).sum(-1).mean()
            if tv_weight:
                term = term + tv_weight * (1 - torch.minimum(target_probs, log_probs.exp()).sum(-1)).mean()
            loss = loss + 0.8**k * term
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        tokens_seen += int(batch.loss_mask.sum())
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}", tokens=tokens_seen)
        if log_every and on_log is not None and (step + 1) % log_every == 0:
            head.eval()
            on_log(step + 1, losses, tokens_seen, elapsed())
            head.train()
        if checkpoint_every and (step + 1) % checkpoint_every == 0:
            save(step + 1)
    else:
        step = steps
    bar.close()
    save(step)
    head.eval()
    return losses


COVERAGE_KS = (1, 2, 4, 8)


@dataclass
class DepthAgreement:
    """How often the head's greedy draft at each depth is the target's greedy token, given the drafts
    before it were (the per-token acceptance of greedy speculative decoding), on teacher-forced records.

    `alpha_gamma1` is the on-path acceptance at gamma = 1 (accepted / drafted along the target's greedy
    response, as the loop counts it: the first response token comes from the prefill and a token after
    an accepted draft is the bonus, so neither is drafted); `coverage[k]` the share of depth-1 positions
    whose target token is among the head's k highest scores (what a draft tree of width k can hit).
    """

    per_depth: list[float]  # depth 1..k: P(draft k == target's | drafts < k were)
    positions: int  # anchors scored at depth 1
    alpha_gamma1: float = float("nan")
    coverage: dict[int, float] = field(default_factory=dict)

    def tokens_per_step(self, gamma: int) -> float:
        """Expected tokens a greedy step commits at `gamma` drafts: 1 + a1 + a1 a2 + ..."""
        total, run = 1.0, 1.0
        for rate in self.per_depth[:gamma]:
            run *= rate
            total += run
        return total

    def as_dict(self) -> dict:
        return {**asdict(self), "tokens_per_step": {g: self.tokens_per_step(g) for g in range(1, len(self.per_depth) + 1)}}


@torch.no_grad()
def evaluate_feature_head(
    head: FeatureHead, target, records: Sequence[Record], store: FeatureStore, depth: int = 4, batch_size: int = 8,
    max_new_tokens: int | None = None,
) -> DepthAgreement:
    """DepthAgreement over the response positions of `records`: the target's greedy token at each position
    (from its stored final state, so it is the fp32 target's own choice) against the head's drafts.

    `max_new_tokens`: the cap the responses were generated with; a response that reached it had its last
    token made by a plain target step in the loop (a step drafts at most one token fewer than it may
    still emit), so that token is not counted as drafted at gamma = 1.
    """
    from .evaluate import simulate_acceptance, topk_hits

    head.eval()
    embed_weight = target.get_input_embeddings().weight.detach().float()
    label_weight = target.get_output_embeddings().weight.detach().float()
    draft_ids = head.draft_ids()
    column = torch.full((label_weight.shape[0],), -1, dtype=torch.long)  # [vocab] target id -> head column
    column[draft_ids if draft_ids is not None else torch.arange(label_weight.shape[0])] = torch.arange(
        label_weight.shape[0] if draft_ids is None else len(draft_ids))
    final_layer = target.config.get_text_config().num_hidden_layers
    agreed = torch.zeros(depth)
    reached = torch.zeros(depth)
    covered = torch.zeros(len(COVERAGE_KS), dtype=torch.long)
    flags = []  # per record, [drafted positions] bool: depth-1 hits along the response, for gamma = 1
    usable = [record for record in records if record in store]
    for start in range(0, len(usable), batch_size):
        chunk = usable[start : start + batch_size]
        batch = make_batch(chunk, store, head.feature_layers_for(final_layer), final_layer)
        states = unrolled_states(head, lambda ids: F.embedding(ids, embed_weight), batch, depth)
        greedy = (batch.final @ label_weight.T).argmax(-1)  # [batch, width] the target's token after each position
        alive = None
        for k, state in enumerate(states):
            mask = _step_mask(batch, k)
            seq = mask.shape[1]
            target_token = _ahead(greedy, k + 1, seq)  # anchor p, depth k + 1: the token after position p + k + 1
            scores = _scores(head, state, label_weight if draft_ids is None else None)  # [batch, seq, draft]
            draft = scores.argmax(-1)
            if draft_ids is not None:
                draft = draft_ids[draft]
            hit = draft == target_token
            if k == 0:
                covered += topk_hits(scores[mask], column[target_token[mask]], COVERAGE_KS)
                for row, record in enumerate(chunk):
                    # Anchor p predicts token p + 2; the loop drafts from the second response token on.
                    first, stop = record.prompt_len - 1, len(record.ids) - 2
                    if max_new_tokens is not None and record.response_len >= max_new_tokens:
                        stop -= 1
                    flags.append(hit[row, first:stop][mask[row, first:stop]])
            # Depth k counts anchors whose response continues k + 1 tokens and whose earlier drafts all hit.
            scored = mask if alive is None else mask & alive
            reached[k] += scored.sum()
            agreed[k] += (scored & hit).sum()
            alive = hit if alive is None else alive & hit
    per_depth = (agreed / reached.clamp_min(1)).tolist()
    on_path = simulate_acceptance(flags, gamma=1)
    coverage = {k: float(hits) / max(int(reached[0]), 1) for k, hits in zip(COVERAGE_KS, covered.tolist())}
    return DepthAgreement(per_depth=per_depth, positions=int(reached[0]), alpha_gamma1=on_path.acceptance_rate,
                          coverage=coverage)
