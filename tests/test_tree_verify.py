"""Tree verification (verify.verify_tree_greedy / verify_tree_stochastic) on hand-built distributions.

The sampling rule is SpecInfer's multi-step rule with one-point proposals (children are a drafter's top-k,
not draws from it). The statistical test runs a small decoding loop on hand-built target and drafter
models over a 5-token vocabulary: every step builds each row's EAGLE-2 tree from the drafter (tree.py),
verifies it, commits; the first 3 committed tokens of N = 20,000 rows (seed 0) are compared with the exact
joint by chi-square at the 0.999 quantile (stats_util). Negative controls: the same loop with the rule
changed in one place (rejected children not zeroed; each rejection zeroing only that child in the original
p; the random-children rule with the drafter's q) fails the same test. Measured at these settings: the
right rule 38-46 against a threshold of 82.8 on every shape and seeds 0, 1; the wrong ones 3,300-16,700
(on a chain, "only_last" is the right rule: the rules differ only where a node has several children).
"""

import pytest
import torch

from hf_specdec import verify
from hf_specdec.tree import DraftTree, build_tree
from stats_util import fits

VOCAB = 5

# A hand tree: root 0 -> 1 (token 3), 2 (token 1); 1 -> 3 (token 4); 2 -> 4 (token 2), 5 (token 0); 5 -> 6 (token 4)
TOKENS = torch.tensor([[9, 3, 1, 4, 2, 0, 4]])
PARENTS = torch.tensor([[-1, 0, 0, 1, 2, 2, 5]])


def _greedy_scores(argmax_at_node: list[int]) -> torch.Tensor:
    """[1, nodes, VOCAB] scores whose argmax at node i is argmax_at_node[i]."""
    return torch.eye(VOCAB)[argmax_at_node][None] * 3.0


def test_greedy_takes_the_path_of_target_argmaxes_through_a_later_child():
    # Root's argmax 1 (node 2, not node 1); at node 2 argmax 0 (node 5, the second child); at 5: 4 (node 6).
    verdict = verify.verify_tree_greedy(TOKENS, PARENTS, _greedy_scores([1, 0, 0, 0, 0, 4, 3]))
    assert verdict.num_accepted.tolist() == [3] and verdict.path.tolist() == [[2, 5, 6, -1, -1, -1, -1]]
    assert verdict.committed.tolist() == [[1, 0, 4, 3, -1, -1, -1]]  # 3 accepted, then the bonus at node 6


def test_greedy_stops_where_no_child_is_the_argmax():
    # Root's argmax 3 (node 1); at node 1 the argmax is 2, but its only child holds 4: commit 3, 2.
    verdict = verify.verify_tree_greedy(TOKENS, PARENTS, _greedy_scores([3, 2, 0, 0, 0, 0, 0]))
    assert verdict.committed.tolist() == [[3, 2, -1, -1, -1, -1, -1]] and verdict.path[0, 0].item() == 1
    # Nothing matches at the root: only the target's token; a token equal to a non-child's is not taken.
    verdict = verify.verify_tree_greedy(TOKENS, PARENTS, _greedy_scores([4, 0, 0, 0, 0, 0, 0]))
    assert verdict.num_accepted.tolist() == [0] and verdict.committed[0, 0].item() == 4



def test_greedy_verification_equals_the_walk_in_node_order_on_random_batched_trees():
    # The walk greedy verification replaced (per node, in order: a child of the deepest accepted node whose
    # token is that node's argmax), on padded batches of random trees with sibling tokens that repeat.
    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        batch, num_nodes = 3, int(torch.randint(1, 12, (1,), generator=gen))
        parents = torch.full((batch, num_nodes), -1)
        for node in range(1, num_nodes):
            parents[:, node] = torch.randint(0, node, (batch,), generator=gen)
        tokens = torch.randint(0, 3, (batch, num_nodes), generator=gen)  # 3 tokens: siblings repeat often
        valid = torch.arange(num_nodes) < torch.randint(1, num_nodes + 1, (batch, 1), generator=gen)
        tokens, parents = torch.where(valid, tokens, -1), torch.where(valid, parents, -1)
        scores = torch.randn(batch, num_nodes, 3, generator=gen)
        verdict = verify.verify_tree_greedy(tokens, parents, scores)
        argmax = scores.argmax(dim=-1)
        for row in range(batch):
            at, path = 0, []
            for node in range(1, num_nodes):
                if parents[row, node] == at and tokens[row, node] == argmax[row, at]:
                    path.append(node)
                    at = node
            assert verdict.num_accepted[row].item() == len(path), trial
            assert verdict.path[row, : len(path)].tolist() == path and (verdict.path[row, len(path):] == -1).all()
            assert verdict.committed[row, len(path)].item() == argmax[row, at].item()

def test_stochastic_never_accepts_a_child_without_target_mass_and_draws_the_last_residual():
    # Target at the root: mass only on tokens 1 and 2 (0.5 each). Root's children are 3 and 1; 3 is always
    # rejected; 1 is accepted with p_2(1) = 0.5 / (1 - 0) = 0.5; else the last residual is all on token 2.
    probs = torch.zeros(1, 7, VOCAB)
    probs[0, 0, 1] = probs[0, 0, 2] = 0.5
    probs[0, 1:] = 1.0 / VOCAB
    n = 4000
    verdict = verify.verify_tree_stochastic(TOKENS.repeat(n, 1), PARENTS.repeat(n, 1), probs.repeat(n, 1, 1),
                                            torch.Generator().manual_seed(0))
    first = verdict.committed[:, 0]
    assert set(first.tolist()) == {1, 2}
    assert ((first == 1) == (verdict.path[:, 0] == 2)).all()  # token 1 only through node 2
    assert abs((first == 1).float().mean().item() - 0.5) < 4 * (0.25 / n) ** 0.5


def _random_probs(shape, seed):
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2, dim=-1)


def test_a_chain_tree_gives_exactly_what_chain_verification_gives():
    # 500 rows, 4 drafts each, ragged lengths; drafts partly the target's likely tokens so all paths happen.
    batch, gamma = 500, 4
    target = _random_probs((batch, gamma + 1, VOCAB), seed=1)
    drafts = torch.multinomial(target[:, :gamma].reshape(-1, VOCAB), 1, generator=torch.Generator().manual_seed(2)).view(batch, gamma)
    num_drafted = torch.randint(0, gamma + 1, (batch,), generator=torch.Generator().manual_seed(3))
    root = torch.full((batch, 1), 7)
    chain = DraftTree.chain(torch.cat([root, drafts], dim=1), lengths=num_drafted + 1)
    one_hot = torch.nn.functional.one_hot(drafts, VOCAB).float()
    expected = verify.verify_stochastic(drafts, one_hot, target, torch.Generator().manual_seed(4), num_drafted)
    verdict = verify.verify_tree_stochastic(chain.tokens, chain.parents, target, torch.Generator().manual_seed(4))
    assert torch.equal(verdict.committed, expected[0]) and torch.equal(verdict.num_accepted, expected[1])
    assert len(set(verdict.num_accepted.tolist())) == gamma + 1  # every acceptance count occurred
    expected = verify.verify_greedy(drafts, target.log(), num_drafted)
    verdict = verify.verify_tree_greedy(chain.tokens, chain.parents, target.log())
    assert torch.equal(verdict.committed, expected[0]) and torch.equal(verdict.num_accepted, expected[1])
    # The tree of the root alone is a plain step: generate()'s own draw.
    alone = verify.verify_tree_stochastic(root, torch.full((batch, 1), -1), target[:, :1], torch.Generator().manual_seed(5))
    plain = verify.verify_stochastic(drafts[:, :0], one_hot[:, :0], target[:, :1], torch.Generator().manual_seed(5))
    assert torch.equal(alone.committed, plain[0])


# ---- A small decoding loop on hand-built models, for the joint distribution ----------------------------
# The next-token distribution after a context depends on its length (capped at 3) and its last two tokens:
# a table of 4 * 6 * 6 rows (-1 = no token). The drafter's table is a different mix, so that its top-k
# children often, not always, include the target's likely tokens.
NUM_CODES = 4 * 6 * 6


def _table(seed: int, zero_one: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(NUM_CODES, VOCAB, generator=gen) * 1.5
    if zero_one:  # the target puts no mass on one token per context
        logits.scatter_(1, torch.randint(VOCAB, (NUM_CODES, 1), generator=gen), -float("inf"))
    return logits.softmax(dim=-1)


TARGET = _table(0, zero_one=True)  # [codes, VOCAB]
DRAFTER = (0.5 * TARGET + 0.5 * _table(1, zero_one=False))  # [codes, VOCAB]


def _code(length: torch.Tensor, last: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    return length.clamp(max=3) * 36 + (last + 1) * 6 + (before + 1)


def _node_codes(generated: torch.Tensor, lengths: torch.Tensor, tree: DraftTree) -> torch.Tensor:
    """[batch, nodes] the table row of the context that ends at each node (row's tokens + its path)."""
    rows = torch.arange(generated.shape[0])
    last_gen = torch.where(lengths > 0, generated[rows, (lengths - 1).clamp_min(0)], -1)
    before_gen = torch.where(lengths > 1, generated[rows, (lengths - 2).clamp_min(0)], -1)
    depth = tree.depths()
    parent_token = torch.where(tree.parents >= 0, tree.tokens.gather(1, tree.parents.clamp_min(0)), -1)
    last = torch.where(depth == 0, last_gen[:, None], tree.tokens)
    before = torch.where(depth == 0, before_gen[:, None], torch.where(depth == 1, last_gen[:, None], parent_token))
    return _code(lengths[:, None] + depth, last, before)


def simulate(verifier, shape, num_rows=20_000, seed=0, num_tokens=3):
    """[num_rows, num_tokens] first committed tokens of a tree-speculative loop with `verifier(tree,
    target_probs, draft_probs, generator) -> TreeVerdict`; also returns accepted drafts per step."""
    top_k, max_depth, max_nodes = shape
    generator = torch.Generator().manual_seed(seed)
    generated = torch.full((num_rows, num_tokens + max_depth + 1), -1)
    lengths = torch.zeros(num_rows, dtype=torch.long)
    accepted = []
    while bool((lengths < num_tokens).any()):
        def expand(candidates, frontier):
            codes = _node_codes(generated, lengths, candidates).gather(1, frontier.clamp_min(0))
            return DRAFTER[codes]

        row_depth = torch.where(lengths < num_tokens, max_depth, 0)
        tree = build_tree(torch.zeros(num_rows, dtype=torch.long), expand, top_k, max_depth, max_nodes, row_depth)
        codes = _node_codes(generated, lengths, tree)
        verdict = verifier(tree, TARGET[codes], DRAFTER[codes], generator)
        count = verdict.num_accepted + 1
        cols = torch.arange(verdict.committed.shape[1])
        rows, at = (cols < count[:, None]).nonzero(as_tuple=True)
        generated[rows, lengths[rows] + at] = verdict.committed[rows, at]
        lengths = lengths + count
        accepted.append(verdict.num_accepted)
    return generated[:, :num_tokens], torch.cat(accepted)


def exact_joint(num_tokens=3) -> torch.Tensor:
    """[VOCAB ** 3] probability of each first-3-token sequence under the target table."""
    joint = torch.ones([VOCAB] * num_tokens, dtype=torch.float64)
    for x in range(VOCAB ** num_tokens):
        seq = [x // VOCAB**2, x // VOCAB % VOCAB, x % VOCAB]
        prob = 1.0
        for i, token in enumerate(seq):
            last = seq[i - 1] if i >= 1 else -1
            before = seq[i - 2] if i >= 2 else -1
            prob *= float(TARGET[_code(torch.tensor(i), torch.tensor(last), torch.tensor(before)), token])
        joint.view(-1)[x] = prob
    return joint.flatten()


def library_rule(tree, target_probs, draft_probs, generator):
    return verify.verify_tree_stochastic(tree.tokens, tree.parents, target_probs, generator)


def walk(tree, target_probs, draft_probs, generator, rule):
    """verify_tree_stochastic rewritten with one place changed by `rule` (the negative controls):
    "specinfer": no change (checked equal to the library's); "no_zeroing": a rejected child is not zeroed,
    so every child is tried against p_1 and the last draw is from p_1; "only_last": a rejection zeroes
    that child in the node's original p, forgetting earlier rejections (Leviathan's residual with a
    one-point q, applied to each child independently); "random_children": the rule for children drawn
    at random from q (accept min(1, p_i/q), residual norm(max(0, p_i - q))) used on top-k children."""
    tokens, parents = tree.tokens, tree.parents
    batch, num_nodes = tokens.shape
    rows = torch.arange(batch)
    draws = verify.uniform((batch, num_nodes - 1), torch.device("cpu"), generator)
    at = torch.zeros(batch, dtype=torch.long)
    residual = target_probs[:, 0].clone()
    mass = torch.ones(batch)
    path = torch.full_like(tokens, -1)
    num_accepted = torch.zeros_like(at)
    for node in range(1, num_nodes):
        tried = parents[:, node] == at
        token = tokens[:, node].clamp_min(0)
        p_token = residual.gather(1, token[:, None]).squeeze(1)
        if rule == "random_children":
            q = draft_probs[rows, at]  # [batch, vocab] the drafter's distribution at the parent
            q_token = q.gather(1, token[:, None]).squeeze(1)
            accept = tried & (draws[:, node - 1] * mass * q_token < p_token)
        else:
            accept = tried & (draws[:, node - 1] * mass < p_token)
        reject = tried & ~accept
        if rule == "specinfer":
            residual[rows[reject], token[reject]] = 0.0
        elif rule == "only_last":
            original = target_probs[rows, at].clone()
            original[rows, token] = 0.0
            residual = torch.where(reject[:, None], original, residual)
        elif rule == "random_children":
            residual = torch.where(reject[:, None], (residual / mass[:, None] - q).clamp_min(0), residual)
        if rule != "no_zeroing":
            mass = torch.where(reject, residual.sum(dim=-1), mass)
        residual = torch.where(accept[:, None], target_probs[:, node], residual)
        mass = torch.where(accept, 1.0, mass)
        path[rows[accept], num_accepted[accept]] = node
        num_accepted += accept
        at = torch.where(accept, node, at)
    total = residual.sum(dim=-1, keepdim=True)
    final = torch.where(total > 0, residual / total.clamp_min(torch.finfo(total.dtype).tiny), target_probs[rows, at])
    return verify._tree_verdict(tokens, path, num_accepted, verify.draw(final, generator))


SHAPES = {  # (top_k, max_depth, max_nodes)
    "chain": (1, 3, 3),
    "wide": (3, 1, 3),
    "balanced": (2, 2, 6),
    "eagle": (3, 3, 8),
}


def _counts(tokens: torch.Tensor) -> torch.Tensor:
    codes = tokens[:, 0] * VOCAB**2 + tokens[:, 1] * VOCAB + tokens[:, 2]
    return torch.bincount(codes, minlength=VOCAB**3)


@pytest.mark.parametrize("shape", SHAPES)
def test_tree_sampling_follows_the_joint_distribution_of_three_tokens(shape):
    tokens, accepted = simulate(library_rule, SHAPES[shape])
    assert fits(_counts(tokens), exact_joint())
    # The loop really accepted drafts, and really rejected some (else the residual went untested).
    assert accepted.float().mean() > 0.3 and (accepted < SHAPES[shape][1]).float().mean() > 0.2


def test_the_negative_controls_walker_is_the_library_rule_when_unchanged():
    tokens, parents = torch.tensor([[0, 1, 2, 3, 4]]).repeat(300, 1), torch.tensor([[-1, 0, 0, 0, 1]]).repeat(300, 1)
    target = _random_probs((300, 5, VOCAB), seed=9)
    tree = DraftTree(tokens=tokens, parents=parents, valid=tokens >= 0)
    mine = walk(tree, target, target, torch.Generator().manual_seed(1), "specinfer")
    library = library_rule(tree, target, target, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(mine, library))


@pytest.mark.parametrize("rule", ["specinfer", "no_zeroing", "only_last", "random_children"])
def test_wrong_residual_rules_fail_the_same_test(rule):
    # The "eagle" shape (3 children per node, 3 deep): every wrong rule changes the first token's law.
    tokens, _ = simulate(lambda *args: walk(*args, rule=rule), SHAPES["eagle"])
    assert fits(_counts(tokens), exact_joint()) == (rule == "specinfer")
