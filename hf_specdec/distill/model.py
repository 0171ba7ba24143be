"""Build a small ``LlamaForCausalLM`` drafter for a target, and the reduced-vocabulary head.

The drafter shares the target's tokenizer and vocabulary ids. Its residual stream is a
``hidden_size``-dimensional PCA subspace of the target's embedding space, so the target's embeddings
and (optionally) some of its layers can be projected into it as a starting point. A reduced head is
a list of token ids stored as ``config.hf_specdec_vocab_subset``: the drafter scores only those rows
of its (tied) LM head, every other token gets probability 0.
"""

from __future__ import annotations

import collections
import math
from typing import Iterable, Sequence

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from .data import Record

VOCAB_SUBSET_ATTR = "hf_specdec_vocab_subset"


def vocab_subset_of(model) -> torch.Tensor | None:
    """The drafter's token subset as a LongTensor [subset], or None for a full-vocabulary head."""
    subset = getattr(model.config, VOCAB_SUBSET_ATTR, None)
    if subset is None:
        return None
    return torch.as_tensor(subset, dtype=torch.long, device=model.get_output_embeddings().weight.device)


def head_logits(model, hidden: torch.Tensor, full_width: bool = True) -> torch.Tensor:
    """LM-head logits of ``hidden`` [..., hidden], honouring a vocabulary subset.

    Returns:
        [..., vocab] with -inf outside the subset when ``full_width``, else [..., subset]
        (or [..., vocab] when the model has no subset).
    """
    weight = model.get_output_embeddings().weight  # [vocab, hidden]
    subset = vocab_subset_of(model)
    if subset is None:
        return hidden @ weight.T
    compact = hidden @ weight[subset].T  # [..., subset]
    if not full_width:
        return compact
    logits = compact.new_full((*compact.shape[:-1], weight.shape[0]), float("-inf"))
    logits[..., subset] = compact
    return logits


DEFAULT_VOCAB_SIZE = 4096  # a reduced head's tokens: ~93 % of SmolLM2's response tokens (8,192: ~97 %)


def select_vocab_subset(
    records: Sequence[Record], size: int, always: Iterable[int] = ()
) -> list[int]:
    """The ``size`` most frequent response tokens of ``records`` plus ``always`` (special ids), sorted."""
    counts = collections.Counter(t for r in records for t in r.ids[r.prompt_len :])
    chosen = set(int(t) for t in always if t is not None)
    for token, _ in counts.most_common():
        if len(chosen) >= size:
            break
        chosen.add(int(token))
    return sorted(chosen)


def _pca_basis(embedding: torch.Tensor, dim: int) -> torch.Tensor:
    """Top-``dim`` right singular vectors of the embedding matrix [vocab, hidden] -> [hidden, dim]."""
    gram = embedding.double().T @ embedding.double()  # [hidden, hidden]
    eigenvalues, eigenvectors = torch.linalg.eigh(gram)
    return eigenvectors[:, eigenvalues.argsort(descending=True)[:dim]].float()


def build_drafter(
    target,
    *,
    hidden_size: int = 180,
    num_layers: int = 2,
    init_layers: Sequence[int] | None = None,
    intermediate_size: int | None = None,
    num_heads: int | None = None,
    vocab_subset: Sequence[int] | None = None,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A drafter for ``target``: tied embeddings PCA-projected from the target's input embeddings.

    Args:
        hidden_size: residual width; the tied [vocab, hidden_size] embedding dominates the size.
        num_layers: decoder layers (ignored when ``init_layers`` is given).
        init_layers: target layer indices to project into the drafter as its layers, in order.
            Their attention heads and MLP width are kept, only the residual side is projected.
        intermediate_size: MLP width of randomly initialised layers (default: 3 x hidden_size).
        num_heads: attention heads of randomly initialised layers (default: the most heads of at
            least 32 dimensions that divide hidden_size).
        vocab_subset: token ids of a reduced head (see module docstring).

    Returns:
        LlamaForCausalLM in fp32, train mode off.
    """
    torch.manual_seed(seed)
    tcfg = target.config
    target_hidden = tcfg.hidden_size
    if init_layers is not None:
        # Projected layers keep the target's heads and MLP width, only the residual side shrinks.
        num_layers = len(init_layers)
        intermediate_size = tcfg.intermediate_size
        num_heads = tcfg.num_attention_heads
        num_kv_heads = getattr(tcfg, "num_key_value_heads", num_heads)
        head_dim = getattr(tcfg, "head_dim", None) or target_hidden // num_heads
    else:
        intermediate_size = intermediate_size or 3 * hidden_size
        if num_heads is None:
            num_heads = max(h for h in range(1, hidden_size + 1) if hidden_size % h == 0 and hidden_size // h >= 32)
        num_kv_heads = num_heads
        head_dim = hidden_size // num_heads
    rope = getattr(tcfg, "rope_parameters", None)
    config = LlamaConfig(
        vocab_size=tcfg.vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,
        hidden_act=getattr(tcfg, "hidden_act", "silu"),
        max_position_embeddings=tcfg.max_position_embeddings,
        rms_norm_eps=getattr(tcfg, "rms_norm_eps", 1e-5),
        rope_parameters=dict(rope) if rope else None,
        tie_word_embeddings=True,
        bos_token_id=tcfg.bos_token_id,
        eos_token_id=tcfg.eos_token_id,
        pad_token_id=tcfg.pad_token_id,
    )
    if vocab_subset is not None:
        setattr(config, VOCAB_SUBSET_ATTR, [int(t) for t in vocab_subset])
    drafter = LlamaForCausalLM(config).float()
    drafter.generation_config.bos_token_id = target.generation_config.bos_token_id
    drafter.generation_config.eos_token_id = target.generation_config.eos_token_id
    drafter.generation_config.pad_token_id = target.generation_config.pad_token_id

    embedding = target.get_input_embeddings().weight.detach().float()  # [vocab, target_hidden]
    basis = _pca_basis(embedding, hidden_size)  # [target_hidden, hidden_size]
    with torch.no_grad():
        projected = embedding @ basis  # [vocab, hidden_size]
        drafter.get_input_embeddings().weight.copy_(projected)
        # A unit-RMS final hidden state dotted with these rows gives logits of std ~ row norm; start
        # the random drafter at std ~1 rather than spending its first steps shrinking them.
        drafter.model.norm.weight.fill_(1.0 / projected.norm(dim=-1).pow(2).mean().sqrt().item())
        if init_layers is not None:
            # RMSNorm over fewer dimensions sees a larger mean square; this keeps the scale.
            norm_scale = math.sqrt(target_hidden / hidden_size)
            for mine, index in zip(drafter.model.layers, init_layers):
                _project_layer(target.model.layers[index], mine, basis, norm_scale)
            # diag(basis^T diag(gain) basis): the target's final gain seen from the subspace.
            final_gain = (basis**2).T @ target.model.norm.weight.detach().float()
            drafter.model.norm.weight.copy_(final_gain * norm_scale)
    drafter.tie_weights()
    return drafter.eval()


def _project_layer(source, dest, basis: torch.Tensor, norm_scale: float) -> None:
    """Copy a target decoder layer into a drafter layer whose residual stream is ``basis``'s span."""
    attn_gain = source.input_layernorm.weight.detach().float()  # [target_hidden]
    mlp_gain = source.post_attention_layernorm.weight.detach().float()
    # Reading side: fold the norm gain into the projection, then restrict to the subspace.
    for name in ("q_proj", "k_proj", "v_proj"):
        weight = getattr(source.self_attn, name).weight.detach().float()  # [out, target_hidden]
        getattr(dest.self_attn, name).weight.copy_((weight * attn_gain) @ basis)
    for name in ("gate_proj", "up_proj"):
        weight = getattr(source.mlp, name).weight.detach().float()
        getattr(dest.mlp, name).weight.copy_((weight * mlp_gain) @ basis)
    # Writing side: project the update into the subspace.
    dest.self_attn.o_proj.weight.copy_(basis.T @ source.self_attn.o_proj.weight.detach().float())
    dest.mlp.down_proj.weight.copy_(basis.T @ source.mlp.down_proj.weight.detach().float())
    dest.input_layernorm.weight.fill_(norm_scale)
    dest.post_attention_layernorm.weight.fill_(norm_scale)


def grow_drafter(drafter: LlamaForCausalLM, num_layers: int, seed: int = 0) -> LlamaForCausalLM:
    """Append decoder layers to a trained drafter without changing what it computes.

    Each new layer starts from a copy of the last trained one with its two writing projections
    (``o_proj``, ``down_proj``) zeroed, so it adds nothing to the residual stream until training
    moves them: the grown drafter starts at the old drafter's agreement.
    """
    layers = drafter.model.layers
    if num_layers <= len(layers):
        return drafter
    torch.manual_seed(seed)
    template = layers[-1]
    for index in range(len(layers), num_layers):
        layer = type(template)(drafter.config, layer_idx=index)
        layer.load_state_dict(template.state_dict())
        with torch.no_grad():
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        layers.append(layer.to(template.self_attn.o_proj.weight.dtype))
    drafter.config.num_hidden_layers = num_layers
    if getattr(drafter.config, "layer_types", None) is not None:
        drafter.config.layer_types = [drafter.config.layer_types[0]] * num_layers
    return drafter
