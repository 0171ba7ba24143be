"""generate(drafter=model, gamma=TreeDraftPolicy(...)): greedy token-identical to plain generate() in fp32,
alone and in left-padded batches; sampled, the joint of the first 3 tokens follows the target's processed
distribution (chi-square, N = 6000 rows in one batched call, seed 0, 0.999 quantile, as test_distribution),
with negative controls; drafters that cannot draft trees are refused before any forward."""

import pytest
import torch

import hf_specdec
import tiny_models
from hf_specdec import steps
from hf_specdec.errors import UnsupportedTreeError
from hf_specdec.policy import TreeDraftPolicy
from hf_specdec.drafters.base import Draft, StatelessDrafter


class ChainOnly(StatelessDrafter):
    """A drafter that implements chains only (proposes nothing)."""

    def propose(self, ctx, num_tokens):
        return Draft(tokens=num_tokens.new_empty(num_tokens.shape[0], 0), num_drafted=torch.zeros_like(num_tokens))
from joint_util import sample_continuations
from stats_util import fits

SHAPES = {
    "chain": TreeDraftPolicy(top_k=1, max_depth=4, max_nodes=4),
    "wide": TreeDraftPolicy(top_k=4, max_depth=1, max_nodes=4),
    "eagle": TreeDraftPolicy(top_k=3, max_depth=4, max_nodes=10),
}


def greedy(model, input_ids, attention_mask=None, **kwargs):
    kwargs.setdefault("max_new_tokens", 24)
    return model.generate(input_ids, attention_mask=attention_mask, do_sample=False, **kwargs)


def speculate(model, drafter, input_ids, attention_mask=None, policy=SHAPES["eagle"], **kwargs):
    stats = hf_specdec.SpeculativeStats()
    return greedy(model, input_ids, attention_mask, drafter=drafter, gamma=policy, stats=stats, **kwargs), stats


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["self", "unrelated", "partial"])
def test_greedy_trees_equal_target_alone(target, unrelated_drafter, partial_drafter, kind, shape):
    drafter = {"self": target, "unrelated": unrelated_drafter, "partial": partial_drafter}[kind]
    input_ids, mask = tiny_models.prompts(1, seed=len(shape), min_len=6)
    out, stats = speculate(target, drafter, input_ids, mask, policy=SHAPES[shape])
    assert torch.equal(out, greedy(target, input_ids, mask))
    if kind == "self":  # every step that drafted accepted its top-1 path (as deep as the node budget let it go)
        assert int(stats.accepted_histogram[0, 1:].sum()) == int(stats.drafted_histogram[0, 1:].sum()) > 0
    elif kind == "partial":
        assert stats.acceptance_rate > 0.0


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_greedy_trees_in_padded_batches_equal_target(arch):
    model = tiny_models.BUILDERS[arch](seed=0)
    drafter = tiny_models.perturbed(model, scale=0.1)
    input_ids, mask = tiny_models.prompts(5, seed=3)
    out, stats = speculate(model, drafter, input_ids, mask, max_new_tokens=30)
    assert torch.equal(out, greedy(model, input_ids, mask, max_new_tokens=30))
    assert len(set(stats.row_acceptance_rate.tolist())) > 1  # rows accepted differently in the same steps


def test_a_tree_beats_the_chain_of_its_depth_in_target_forwards(target):
    # Not a speed claim: the point of trees, on the tiny pair where the drafter is right about half the time
    # (noise 0.3; measured 30 target forwards for the chain, 16 for the tree, for 4 rows x 40 tokens).
    drafter = tiny_models.perturbed(target, scale=0.3)
    input_ids, mask = tiny_models.prompts(4, seed=11)
    chain_policy, tree_policy = TreeDraftPolicy(top_k=1, max_depth=4, max_nodes=4), TreeDraftPolicy(top_k=4, max_depth=4, max_nodes=24)
    chain_out, chain = speculate(target, drafter, input_ids, mask, policy=chain_policy, max_new_tokens=40)
    tree_out, tree = speculate(target, drafter, input_ids, mask, policy=tree_policy, max_new_tokens=40)
    assert torch.equal(chain_out, tree_out)
    assert tree.target_forwards < 0.75 * chain.target_forwards


def test_batch_row_equals_same_prompt_alone(target, partial_drafter):
    input_ids, mask = tiny_models.prompts(4, seed=5)
    batched, _ = speculate(target, partial_drafter, input_ids, mask)
    for row in range(4):
        real = mask[row].bool()
        alone, _ = speculate(target, partial_drafter, input_ids[row : row + 1, real])
        pad = int((~real).sum())
        assert torch.equal(batched[row, pad : pad + alone.shape[1]], alone[0])


def test_eos_inside_an_accepted_path_and_context_processors(target, partial_drafter):
    input_ids, mask = tiny_models.prompts(3, seed=7)
    reference = greedy(target, input_ids, mask, max_new_tokens=20)
    eos = [int(reference[0, input_ids.shape[1] + 4]), int(reference[2, input_ids.shape[1] + 6])]
    # min_new_tokens masks EOS by length and repetition_penalty reads the tokens: both per node, on its path.
    kwargs = dict(max_new_tokens=20, eos_token_id=eos, min_new_tokens=3, repetition_penalty=1.5)
    out, _ = speculate(target, target, input_ids, mask, **kwargs)
    assert torch.equal(out, greedy(target, input_ids, mask, **kwargs))
    out, _ = speculate(target, partial_drafter, input_ids, mask, **kwargs)
    assert torch.equal(out, greedy(target, input_ids, mask, **kwargs))


def test_windowed_model_trees_past_the_window():
    model = tiny_models.windowed("mistral", window=8)
    drafter = tiny_models.perturbed(model, scale=0.3)
    input_ids, mask = tiny_models.prompts(3, seed=5, min_len=3, max_len=10)
    out, stats = speculate(model, drafter, input_ids, mask, max_new_tokens=40)
    assert torch.equal(out, greedy(model, input_ids, mask, max_new_tokens=40))
    assert 0.0 < stats.acceptance_rate < 1.0


def test_scores_and_logits_are_the_targets_along_the_accepted_path(target, partial_drafter):
    ids, mask = tiny_models.prompts(3, seed=3)
    kwargs = dict(attention_mask=mask, max_new_tokens=9, do_sample=False, return_dict_in_generate=True,
                  output_scores=True, output_logits=True, repetition_penalty=1.3)
    expected = target.generate(ids, **kwargs)
    out = target.generate(ids, drafter=partial_drafter, gamma=SHAPES["eagle"], **kwargs)
    assert torch.equal(out.sequences, expected.sequences) and len(out.scores) == 9
    for ours, theirs in zip(out.scores + out.logits, expected.scores + expected.logits):
        assert torch.allclose(ours, theirs, atol=1e-4)


def test_drafters_without_trees_are_refused_before_any_forward(target):
    calls = []
    hook = target.register_forward_hook(lambda *args: calls.append(1))
    try:
        with pytest.raises(UnsupportedTreeError, match="gamma=3"):
            target.generate(tiny_models.prompts(2)[0], drafter=ChainOnly(), gamma=TreeDraftPolicy(max_depth=3),
                            max_new_tokens=4)
    finally:
        hook.remove()
    assert calls == []


# ---- sampling: the joint of the first 3 tokens (test_distribution's setup) -------------------------------
VOCAB, NEW, N = 10, 3, 6000
PROMPT = torch.tensor([[1, 5, 7, 3, 5]])
SETTINGS = {
    "temperature": dict(temperature=0.9),
    "top_k": dict(temperature=1.3, top_k=5),
    "repetition_penalty": dict(temperature=1.6, repetition_penalty=1.8),  # reads each node's own path
}


def _model(seed, scale=None):
    model = tiny_models.llama(seed=0, vocab=VOCAB, hidden=32)
    with torch.no_grad():
        model.lm_head.weight.mul_(0.15)  # every token keeps some mass
    model.generation_config.eos_token_id = None
    return model if scale is None else tiny_models.perturbed(model, scale=scale, seed=seed)


@pytest.fixture(scope="module")
def pair():
    return _model(0), _model(1, scale=0.6)


def _counts(target, drafter, policy, kwargs):
    tokens, stats = sample_continuations(target, PROMPT, drafter, policy, num_samples=N, num_tokens=NEW, seed=0, **kwargs)
    assert stats.acceptance_rate > 0.1 and int((stats.drafted - stats.accepted).sum()) >= 200  # both paths taken
    return torch.bincount((tokens * torch.tensor([VOCAB**2, VOCAB, 1])).sum(dim=1), minlength=VOCAB**NEW)


@pytest.mark.parametrize("shape", ["wide", "eagle"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_sampled_trees_follow_the_joint_distribution(pair, setting, shape):
    from test_distribution import exact_joint

    target, drafter = pair
    kwargs = SETTINGS[setting]
    assert fits(_counts(target, drafter, SHAPES[shape], kwargs), exact_joint(target, kwargs))


def _wrong_rule(rule):
    """Negative control: verify_tree_stochastic with one place changed (test_tree_verify.walk): rejected children
    not zeroed ("no_zeroing"), or only the last rejected child zeroed in the node's original p ("only_last")."""
    from test_tree_verify import walk
    from hf_specdec.tree import DraftTree

    def verifier(tokens, parents, target_probs, generator):
        tree = DraftTree(tokens=tokens, parents=parents, valid=tokens >= 0)
        return walk(tree, target_probs, target_probs, generator, rule)

    return verifier


def _committed_context_only(processors, sequences, lens, tree, logits, rows):
    """A wrong node_scores: every node processed with the row's committed tokens, not its own path. Too small
    an error for this chi-square (measured 876-935 against a threshold of 1036 with repetition_penalty); the
    greedy tests with repetition_penalty (output scores, EOS) fail with it instead."""
    from hf_specdec.processing import process_scores

    depths = tree.depths()
    return torch.stack([process_scores(processors, sequences, lens + depths[:, node], logits[:, node], rows)
                        for node in range(tree.tokens.shape[1])], dim=1)


# Measured (N = 6000, seed 0): no_zeroing 2202 against 178 (top_k, eagle); only_last 2471 against 1036
# (repetition_penalty, wide).
@pytest.mark.parametrize("rule, setting, shape", [("no_zeroing", "top_k", "eagle"), ("only_last", "repetition_penalty", "wide")])
def test_negative_controls_fail(pair, monkeypatch, rule, setting, shape):
    from test_distribution import exact_joint

    target, drafter = pair
    monkeypatch.setattr(steps, "verify_tree_stochastic", _wrong_rule(rule))
    kwargs = SETTINGS[setting]
    assert not fits(_counts(target, drafter, SHAPES[shape], kwargs), exact_joint(target, kwargs))


@pytest.mark.parametrize("name", ["test_eos_inside_an_accepted_path_and_context_processors",
                                  "test_scores_and_logits_are_the_targets_along_the_accepted_path"])
def test_negative_control_nodes_processed_without_their_path_fail_the_greedy_tests(target, partial_drafter, monkeypatch, name):
    monkeypatch.setattr(steps, "node_scores", _committed_context_only)
    with pytest.raises(AssertionError):
        globals()[name](target, partial_drafter)


@pytest.mark.parametrize("model_type", ["bloom", "bart"])  # ALiBi from a 2D mask; positions from the cache length
def test_models_that_take_no_position_ids_are_refused_for_trees_even_alone(model_type):
    # Chains run them at batch 1 (docs/support.md); a tree's siblings share a position they cannot be told.
    import arch_zoo

    model = arch_zoo.build(model_type)
    calls = []
    hook = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        with pytest.raises(hf_specdec.UnsupportedModelError, match="takes no position_ids"):
            model.generate(torch.tensor([[5, 6, 7, 8]]), drafter=model, gamma=SHAPES["eagle"], max_new_tokens=4,
                           do_sample=False)
    finally:
        hook.remove()
    assert calls == []


def test_trees_through_a_text_generation_pipeline_in_batches(target, partial_drafter):
    from transformers import pipeline

    import _tiny

    pipe = pipeline("text-generation", model=target, tokenizer=_tiny.chat_tokenizer())
    prompts = ["w5 w6 w7", "w9", "w10 w11 w12 w13 w14", "w20 w21"]
    greedy_kwargs = {"max_new_tokens": 12, "do_sample": False, "return_tensors": True, "batch_size": 2}
    expected = pipe(prompts, **greedy_kwargs)
    got = pipe(prompts, drafter=partial_drafter, gamma=SHAPES["eagle"], **greedy_kwargs)
    ids = lambda outputs: [torch.as_tensor(out[0]["generated_token_ids"]).tolist() for out in outputs]
    assert ids(got) == ids(expected)


def test_stats_count_tree_sizes_and_accepted_depths(target, partial_drafter):
    input_ids, mask = tiny_models.prompts(3, seed=2)
    policy = TreeDraftPolicy(top_k=3, max_depth=3, max_nodes=7)
    stats = hf_specdec.SpeculativeStats()
    greedy(target, input_ids, mask, drafter=partial_drafter, gamma=policy, stats=stats, max_new_tokens=20)
    sizes = stats.tree_size_histogram  # [rows, max_nodes + 1]
    assert sizes.shape == (3, 8) and torch.equal(sizes.sum(dim=1), stats.steps)  # one tree per row and step
    assert int(sizes[:, 7].sum()) > 0  # full trees were drafted
    assert stats.accepted_histogram.shape == (3, 4)  # accepted depth 0..max_depth
    by_size = {n: int(count) for n, count in enumerate(sizes.sum(dim=0)) if count}
    assert 7 in by_size and f"tree_sizes={by_size}" in stats.summary()
    chain_only = hf_specdec.SpeculativeStats()  # a chain call (the chain loop) drafts no trees
    greedy(target, input_ids, mask, drafter=partial_drafter, gamma=3, stats=chain_only, max_new_tokens=5)
    assert "tree_sizes" not in chain_only.summary()
    # Chain calls merged with a tree call keep one row per row.
    stats.merge(speculate(target, partial_drafter, input_ids, mask, policy=SHAPES["chain"])[1])
    chain_stats = hf_specdec.SpeculativeStats()
    greedy(target, input_ids, mask, drafter=partial_drafter, gamma=3, stats=chain_stats, max_new_tokens=5)
    stats.merge(chain_stats)
    assert stats.tree_size_histogram.shape[0] == 9 and int(stats.tree_size_histogram[6:].sum()) == 0
    assert stats.to_dict()["tree_size_histogram"][0] == sizes[0].tolist()


def test_the_cli_spells_a_tree_policy(tmp_path, target, partial_drafter, capsys):
    import _tiny
    from hf_specdec.cli import main

    tokenizer = _tiny.chat_tokenizer()
    for name, model in (("target", target), ("drafter", partial_drafter)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    args = ["generate", "--target", str(tmp_path / "target"), "--drafter", str(tmp_path / "drafter"), "--max-new-tokens", "8"]
    assert main([*args, "w5 w6 w7", "w9"]) == 0
    expected = capsys.readouterr().out
    assert main([*args, "--gamma", "tree:3,4,10", "w5 w6 w7", "w9"]) == 0
    assert capsys.readouterr().out == expected
    for bad, message in (("tree:0,4,10", "top_k must be an int >= 1"), ("tree:3,4", "tree:TOP_K,MAX_DEPTH,MAX_NODES"),
                         ("tree:a,b,c", "tree:TOP_K,MAX_DEPTH,MAX_NODES")):
        with pytest.raises(SystemExit) as info:
            main([*args, "--gamma", bad, "w5"])
        assert info.value.code == 2 and message in capsys.readouterr().err, bad
