"""Verification of drafted tokens: pure tensor math, no models, no caches.

Contract: given the target's distributions at gamma + 1 positions and the drafter's at gamma positions,
return the tokens to commit so that the committed tokens are distributed exactly as the target's
(Leviathan et al. 2023, Chen et al. 2023), plus how many drafts each row accepted.

Glossary (per row, per step):
  accepted  - a drafted token that passed verification; kept as is.
  recovered - the token sampled from the residual norm(max(0, p - q)) at the first rejected position
              (greedy: the target's argmax there); it replaces the rejected draft.
  bonus     - the token sampled from the target's distribution after the last draft when every draft
              was accepted; it costs no extra target forward.
Every row commits num_accepted + 1 tokens: its accepted drafts, then one recovered or bonus token.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from hf_specdec.tree import ancestors, earlier_siblings


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draws one token per row of `probs` ([..., vocab], rows sum to 1); returns [...] long, with
    generate()'s own draw (torch.multinomial). `draw`'s fallback where float64 is missing.

    Uses the explicit `generator` when given (on its own device) and the global RNG otherwise.
    """
    flat = probs.reshape(-1, probs.shape[-1])  # [rows, vocab]
    if generator is not None and generator.device != flat.device:
        tokens = torch.multinomial(flat.to(generator.device), 1, generator=generator).to(flat.device)
    else:
        tokens = torch.multinomial(flat, 1, generator=generator)
    return tokens.reshape(probs.shape[:-1])


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draws one token per row of `probs` ([..., vocab], rows sum to 1) from the same distribution as
    `sample`, but not from the same random stream: one float64 uniform per row, inverted through the row's
    float64 CDF. On a CPU it costs a fraction of torch.multinomial, which draws an exponential per
    vocabulary entry (vocab 49k, one thread: 0.1 vs 1.5 ms for one row, 0.3 vs 5.6 ms for four, 0.6 vs 12 ms
    for eight). Every draw of the loop uses it: drafts, recovered and bonus tokens, and plain steps, where
    generate() itself pays the multinomial (so seeded sampling never repeats generate()'s own tokens).
    """
    flat = probs.reshape(-1, probs.shape[-1])  # [rows, vocab]
    if flat.device.type == "mps":  # no float64 there
        return sample(probs, generator)
    num_rows, vocab = flat.shape
    # One running sum over all rows (a 1-D cumsum is several times faster than a row-wise one here); row r
    # spans (ends[r - 1], ends[r]], and a uniform point in it lands on token i with probability p_i.
    cdf = flat.double().reshape(-1).cumsum(dim=0)  # [rows * vocab]
    ends = cdf[vocab - 1 :: vocab]  # [rows]
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])  # [rows]
    points = starts + uniform((num_rows,), flat.device, generator, torch.float64) * (ends - starts)
    # A point rounded onto its row's end would fall past it (probability ~2^-53): keep it below the end.
    points = torch.minimum(points, torch.nextafter(ends, starts))
    tokens = torch.searchsorted(cdf, points, right=True) - torch.arange(num_rows, device=flat.device) * vocab
    return tokens.reshape(probs.shape[:-1])


def uniform(
    shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """U[0, 1) draws of `shape` on `device`, taken from `generator` when given."""
    if generator is None:
        return torch.rand(shape, device=device, dtype=dtype)
    return torch.rand(shape, device=generator.device, generator=generator, dtype=dtype).to(device)


#: `argmax`'s block width on a CPU, and the fewest rows and scores a row for which blocks pay.
ARGMAX_BLOCK, ARGMAX_MIN_ROWS, ARGMAX_MIN_VOCAB = 256, 8, 2048


def argmax(scores: torch.Tensor) -> torch.Tensor:
    """`scores.argmax(dim=-1)` ([..., vocab] -> [...] long), the same index (the first maximum; the first NaN, as
    torch's), faster on a CPU for many rows: torch's CPU argmax compares one score at a time (~50-80 us a row of
    49k scores on one Zen 5 thread, 0.4-0.6 ms for 8 rows), while `amax` is vectorized. So the maximum of each
    block of ARGMAX_BLOCK scores is taken with `amax` (NaN propagates), the first block holding the row's
    maximum (or first NaN) with an argmax over the block maxima, and the index inside that block with an argmax
    over its scores. A vocabulary that is no multiple of the block is padded with -inf, which only ever ties
    with an earlier -inf. Its ~8 small ops cost ~10 us each right after a forward (their code is cold, evicted by
    the model's weights), so in a decoding step it pays from ARGMAX_MIN_ROWS rows on (measured in a plain step,
    bf16 49k vocabulary: 1 row 153 vs 41 us, 4 rows 140 vs 114 us, 8 rows ~160 vs 217 us for torch's; out of
    a step, 16 / 38 / 79 us against 26 / 100 / 200 us). Fewer rows, other devices (one fast kernel there), small
    vocabularies and integer scores use torch's argmax."""
    vocab = scores.shape[-1]
    if (scores.device.type != "cpu" or not scores.is_floating_point() or vocab < ARGMAX_MIN_VOCAB
            or scores.numel() < ARGMAX_MIN_ROWS * vocab):
        return scores.argmax(dim=-1)
    if vocab % ARGMAX_BLOCK:
        scores = torch.nn.functional.pad(scores, (0, -vocab % ARGMAX_BLOCK), value=float("-inf"))
    blocks = scores.reshape(-1, scores.shape[-1] // ARGMAX_BLOCK, ARGMAX_BLOCK)  # [rows, blocks, block]
    first = blocks.amax(dim=-1).argmax(dim=-1)  # [rows] the first block holding the maximum
    inside = blocks.gather(1, first[:, None, None].expand(-1, 1, ARGMAX_BLOCK)).squeeze(1).argmax(dim=-1)  # [rows]
    return (first * ARGMAX_BLOCK + inside).reshape(scores.shape[:-1])


def _commit(
    draft_tokens: torch.Tensor, num_accepted: torch.Tensor, next_tokens: torch.Tensor
) -> torch.Tensor:
    """Row b: draft_tokens[b, :n_b], then next_tokens[b], then padding (-1). Returns [batch, gamma + 1]."""
    batch, gamma = draft_tokens.shape
    cols = torch.arange(gamma + 1, device=draft_tokens.device)  # [gamma + 1]
    padded_drafts = torch.cat([draft_tokens, draft_tokens.new_full((batch, 1), -1)], dim=1)
    committed = torch.where(cols < num_accepted[:, None], padded_drafts, -1)
    return committed.scatter(1, num_accepted[:, None], next_tokens[:, None])


def _drafted(draft_tokens: torch.Tensor, num_drafted: torch.Tensor | None) -> torch.Tensor:
    """[batch, gamma] bool: which draft slots hold a real proposal (rows may draft fewer than gamma)."""
    if num_drafted is None:
        return torch.ones_like(draft_tokens, dtype=torch.bool)
    return torch.arange(draft_tokens.shape[1], device=draft_tokens.device) < num_drafted[:, None]


def verify_greedy(
    draft_tokens: torch.Tensor,  # [batch, gamma]
    target_scores: torch.Tensor,  # [batch, gamma + 1, vocab] processed target scores
    num_drafted: torch.Tensor | None = None,  # [batch] real drafts per row; gamma when None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification: a draft is accepted while it equals the target's argmax.

    Returns:
        committed: [batch, gamma + 1] long; the first num_accepted[b] + 1 entries of row b are the tokens
            to commit (accepted drafts, then the target's argmax at the first mismatch or the bonus
            position), the rest are -1.
        num_accepted: [batch] long, number of accepted drafts per row.
    """
    gamma = draft_tokens.shape[1]
    if gamma == 0:  # a plain step: the target's own token (the common case once drafting stopped)
        return argmax(target_scores[:, 0])[:, None], draft_tokens.new_zeros(draft_tokens.shape[0])
    target_tokens = argmax(target_scores)  # [batch, gamma + 1]
    matches = (draft_tokens == target_tokens[:, :gamma]) & _drafted(draft_tokens, num_drafted)  # [batch, gamma]
    num_accepted = matches.long().cumprod(dim=1).sum(dim=1)  # [batch]
    next_tokens = target_tokens.gather(1, num_accepted[:, None]).squeeze(1)  # [batch]
    return _commit(draft_tokens, num_accepted, next_tokens), num_accepted


def residual_probs(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the last dim; falls back to p where p <= q everywhere (then p == q and
    a rejection cannot happen, but rounding may leave an all-zero residual)."""
    residual = (target_probs - draft_probs).clamp_min(0)  # [..., vocab]
    mass = residual.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(mass.dtype).tiny), target_probs)


def verify_stochastic(
    draft_tokens: torch.Tensor,  # [batch, gamma]
    draft_probs: torch.Tensor,  # [batch, gamma, vocab] the distributions the drafts were sampled from
    target_probs: torch.Tensor,  # [batch, gamma + 1, vocab]
    generator: torch.Generator | None = None,
    num_drafted: torch.Tensor | None = None,  # [batch] real drafts per row; gamma when None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling: accept draft x_j with probability min(1, p_j(x_j) / q_j(x_j)); at the first
    rejection sample the recovered token from norm(max(0, p_j - q_j)); when all pass sample the bonus
    token from p_gamma. The committed tokens are distributed exactly as sampling from p one at a time.

    A deterministic drafter (prompt lookup) passes a one-hot q: acceptance is then p(x), and the
    residual is p without x, renormalised.

    Returns `(committed, num_accepted)` as `verify_greedy` does.
    """
    batch, gamma = draft_tokens.shape
    device = target_probs.device
    if gamma == 0:  # a plain step: the target's own token
        return draw(target_probs[:, 0], generator)[:, None], torch.zeros(batch, dtype=torch.long, device=device)
    index = draft_tokens.clamp_min(0)[:, :, None]  # [batch, gamma, 1]; empty slots hold -1
    p_draft = target_probs[:, :gamma].gather(2, index).squeeze(2)  # [batch, gamma]
    q_draft = draft_probs.gather(2, index).squeeze(2)  # [batch, gamma]
    # u < p / q  <=>  u * q < p; q > 0 for any token the drafter proposed, so no division is needed.
    drafted = _drafted(draft_tokens, num_drafted)  # [batch, gamma]
    accept = (uniform((batch, gamma), device, generator) * q_draft < p_draft) & drafted
    num_accepted = accept.long().cumprod(dim=1).sum(dim=1)  # [batch]

    # The distribution of the next token: residual at the first rejection, p itself for the bonus
    # (after the last real draft q is 0, so the residual is p). The zero column is cut from target_probs:
    # a step without drafts has draft_probs [batch, 0, vocab].
    rows = torch.arange(batch, device=device)
    p_next = target_probs[rows, num_accepted]  # [batch, vocab]
    q_padded = torch.cat([draft_probs * drafted[:, :, None], torch.zeros_like(target_probs[:, :1])], dim=1)
    q_next = q_padded[rows, num_accepted]  # [batch, vocab]
    next_tokens = draw(residual_probs(p_next, q_next), generator)  # [batch]
    return _commit(draft_tokens, num_accepted, next_tokens), num_accepted


class TreeVerdict(NamedTuple):
    """What verifying one step's draft trees decided, per row.

    committed: [batch, nodes] long; the first num_accepted[b] + 1 entries of row b are the tokens to commit
        (the accepted path's tokens, then one recovered or bonus token), the rest are -1.
    num_accepted: [batch] long, drafted nodes on the accepted path (its depth).
    path: [batch, nodes] long, node ids of the accepted path from the root's child down (the root, node 0,
        is not listed); -1 after num_accepted[b] entries.
    """

    committed: torch.Tensor
    num_accepted: torch.Tensor
    path: torch.Tensor


def _tree_verdict(
    node_tokens: torch.Tensor, path: torch.Tensor, num_accepted: torch.Tensor, next_tokens: torch.Tensor
) -> TreeVerdict:
    path_tokens = torch.where(path >= 0, node_tokens.gather(1, path.clamp_min(0)), -1)  # [batch, nodes]
    committed = path_tokens.scatter(1, num_accepted[:, None], next_tokens[:, None])
    return TreeVerdict(committed, num_accepted, path)


def verify_tree_greedy(
    node_tokens: torch.Tensor,  # [batch, nodes] node 0 = root (last committed token), -1 for padding
    parents: torch.Tensor,  # [batch, nodes] parent node id, parents before children; -1 for root and padding
    target_scores: torch.Tensor,  # [batch, nodes, vocab] processed target scores at every node
    tree_ancestors: torch.Tensor | None = None,  # [batch, nodes, nodes] bool, `tree.ancestors(parents)` if known
) -> TreeVerdict:
    """Greedy verification of a draft tree: the longest path from the root whose every token is the
    target's argmax at its parent (unique: a node has one argmax; should siblings repeat a token, the first
    counts), then the target's argmax at the path's last node. A chain gives what `verify_greedy` gives."""
    batch, num_nodes = node_tokens.shape
    device = node_tokens.device
    if tree_ancestors is None:
        tree_ancestors = ancestors(parents)
    index = torch.arange(num_nodes, device=device)
    target_tokens = argmax(target_scores)  # [batch, nodes]
    # A node matches when it is its parent's argmax and no earlier sibling is.
    match = (parents >= 0) & (node_tokens == target_tokens.gather(1, parents.clamp_min(0)))  # [batch, nodes]
    match &= ~(earlier_siblings(parents) & match[:, None, :]).any(dim=2)
    # On the path: every ancestor but the root (and the node itself) matches; parents come before children,
    # so the path's node ids increase with depth.
    on_path = (~tree_ancestors | (match | (index == 0))[:, None, :]).all(dim=2) & (index > 0)  # [batch, nodes]
    num_accepted = on_path.sum(dim=1)
    path = torch.where(on_path, index, num_nodes).sort(dim=1).values
    path = torch.where(path < num_nodes, path, -1)  # [batch, nodes]
    at = torch.where(on_path, index, 0).max(dim=1).values  # [batch] the deepest accepted node (0: the root)
    return _tree_verdict(node_tokens, path, num_accepted, target_tokens.gather(1, at[:, None]).squeeze(1))


def verify_tree_stochastic(
    node_tokens: torch.Tensor,  # [batch, nodes] node 0 = root (last committed token), -1 for padding
    parents: torch.Tensor,  # [batch, nodes] parent node id, parents before children; -1 for root and padding
    target_probs: torch.Tensor,  # [batch, nodes, vocab] the target's processed distribution at every node
    generator: torch.Generator | None = None,
) -> TreeVerdict:
    """Sampling verification of a draft tree whose children are deterministic proposals (a drafter's top-k,
    prompt lookup's matches), SpecInfer's multi-step rule with one-point proposals (as EAGLE's
    `evaluate_posterior` and SGLang's tree sampling do): at a node with target distribution p_1, try its
    children x_1, x_2, ... in node order, accepting x_i with probability p_i(x_i), where p_{i+1} is p_i with
    x_i set to 0 and renormalised; on acceptance continue at that child; when every child is rejected (or
    the node has none) draw the step's last token from the last p_i. The token chosen at a node is then
    distributed exactly as p_1 (trying x_i with p_i(x_i) is drawing from p_1 one candidate at a time), so
    the committed tokens follow the target's distribution. Children drawn *at random* from the drafter
    need the general rule (accept with min(1, p_i(x)/q(x)), residual norm(max(0, p_i - q))) instead.

    Randomness: one uniform per drafted node (drawn at once, [batch, nodes - 1]), then one `draw`; a chain
    therefore gives exactly what `verify_stochastic` gives with one-hot draft probabilities, and a tree of
    the root alone what a plain step gives.
    """
    batch, num_nodes = node_tokens.shape
    device = target_probs.device
    if num_nodes == 1:  # a plain step
        return _tree_verdict(node_tokens, torch.full_like(node_tokens, -1), node_tokens.new_zeros(batch),
                             draw(target_probs[:, 0], generator))
    rows = torch.arange(batch, device=device)
    draws = uniform((batch, num_nodes - 1), device, generator)  # [batch, nodes - 1], one per drafted node
    at = torch.zeros(batch, dtype=torch.long, device=device)  # [batch] deepest accepted node
    residual = target_probs[:, 0].clone()  # [batch, vocab] p_i at `at`, unnormalised (rejected children zeroed)
    mass = torch.ones(batch, dtype=residual.dtype, device=device)  # [batch] its sum (p_1: a distribution)
    path = torch.full_like(node_tokens, -1)
    num_accepted = torch.zeros_like(at)
    for node in range(1, num_nodes):
        tried = parents[:, node] == at  # [batch] node is a child of the deepest accepted node
        if not bool(tried.any()):
            continue
        token = node_tokens[:, node].clamp_min(0)  # [batch]
        # u < p_i(x) = residual(x) / mass, without dividing
        accept = tried & (draws[:, node - 1] * mass < residual.gather(1, token[:, None]).squeeze(1))
        reject = tried & ~accept
        if bool(reject.any()):
            residual[rows[reject], token[reject]] = 0.0
            mass = torch.where(reject, residual.sum(dim=-1), mass)
        if bool(accept.any()):
            residual = torch.where(accept[:, None], target_probs[:, node], residual)
            mass = torch.where(accept, 1.0, mass)
            path[rows[accept], num_accepted[accept]] = node
            num_accepted += accept
            at = torch.where(accept, node, at)
    # The last p_i at the deepest accepted node: its residual, or p itself for the bonus token. As in
    # `residual_probs`, an all-zero residual (rounding) falls back to p.
    total = residual.sum(dim=-1, keepdim=True)
    final = torch.where(total > 0, residual / total.clamp_min(torch.finfo(total.dtype).tiny), target_probs[rows, at])
    return _tree_verdict(node_tokens, path, num_accepted, draw(final, generator))


def agreement(
    target_logits: torch.Tensor,  # [batch, positions, vocab] the target's raw logits at the prompt's last positions
    draft_tokens: torch.Tensor,  # [batch, positions] long, the drafter's guess at each (-1: none)
    draft_logits: torch.Tensor | None,  # [batch, positions, vocab] its raw logits there, or None (deterministic)
    pad_lens: torch.Tensor,  # [batch]
    lens: torch.Tensor,  # [batch] the positions score the tokens at lens - positions .. lens - 1
    do_sample: bool,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """([batch] float64, [batch] long): how often a draft at these positions would be accepted, each row's mean over
    the positions where its prompt has a real token before and the drafter guessed (NaN where none), and how many: greedy, whether the guess is the
    target's argmax; sampling, the probability that verification accepts it, sum(min(p, q)) over the vocabulary (p(x)
    for a deterministic guess x), both from the raw logits at `temperature`."""
    positions = target_logits.shape[1]
    index = lens[:, None] - positions - 1 + torch.arange(positions, device=lens.device)  # [batch, positions]
    valid = (index >= pad_lens[:, None]) & (draft_tokens >= 0)
    if not do_sample:
        accepted = (target_logits.argmax(dim=-1) == draft_tokens).double()
    else:
        target_probs = (target_logits.double() / temperature).softmax(dim=-1)
        if draft_logits is None:
            accepted = target_probs.gather(2, draft_tokens.clamp_min(0)[:, :, None]).squeeze(2)
        else:
            draft_probs = (draft_logits.double() / temperature).softmax(dim=-1)
            accepted = torch.minimum(target_probs, draft_probs).sum(dim=-1)
    counts = valid.sum(dim=1)
    return torch.where(counts > 0, (accepted * valid).sum(dim=1) / counts.clamp_min(1), float("nan")), counts
