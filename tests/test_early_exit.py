"""EarlyExit(k): the target's first k layers draft; exact, sharing the target's weights, refused where it cannot run."""

import contextlib
import threading

import pytest
import torch

import hf_specdec
import tiny_models
from joint_util import padded_pair_fits


def greedy(model, input_ids, mask, **kwargs):
    return model.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=24, **kwargs)


def identity_beyond(model, num_layers: int):
    """`model` with every decoder layer from `num_layers` on made the identity (attention and MLP outputs zeroed):
    its first `num_layers` layers, norm and head then predict exactly what the whole model does."""
    with torch.no_grad():
        for layer in model.get_decoder().layers[num_layers:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


TREE = hf_specdec.TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=8)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("gamma", [3, None, "tree"])
def test_greedy_padded_batch_equals_plain(arch, gamma):
    if arch == "gpt2" and gamma == "tree":
        pytest.skip("GPT-2 drafts chains only (its attention builds its own masks)")
    model = tiny_models.BUILDERS[arch](seed=0, layers=4)
    input_ids, mask = tiny_models.prompts(4, seed=2)
    plain = greedy(model, input_ids, mask)
    for k in (1, 3):
        out = greedy(model, input_ids, mask, drafter=hf_specdec.EarlyExit(k), gamma=TREE if gamma == "tree" else gamma)
        assert torch.equal(out, plain), (arch, k)


@pytest.mark.parametrize("gamma", [4, "tree"])
def test_drafts_with_the_first_k_layers(gamma):
    # Layers 2 and 3 do nothing, so the first two predict every token (acceptance 1); with the view
    # running any other layers, or skipping the final norm, acceptance falls (the control: EarlyExit(1)).
    model = identity_beyond(tiny_models.llama(seed=0, layers=4), 2)
    input_ids, mask = tiny_models.prompts(3, seed=4)
    policy = TREE if gamma == "tree" else gamma
    rates = {}
    for k in (1, 2):
        stats = hf_specdec.SpeculativeStats()
        out = greedy(model, input_ids, mask, drafter=hf_specdec.EarlyExit(k), gamma=policy, stats=stats)
        assert torch.equal(out, greedy(model, input_ids, mask))
        rates[k] = stats.acceptance_rate
    # (a tree's rate counts a step's depth drafted against the path kept, which the output's end can cut short)
    assert rates[2] == 1.0 if gamma == 4 else rates[2] > 0.95
    assert rates[1] < 0.9


def test_shares_weights_and_leaves_the_target_unchanged():
    from hf_specdec.drafters.early_exit import early_exit_view

    model = tiny_models.llama(seed=0, layers=4)
    before = model.config.to_dict()
    view = early_exit_view(model, 2)
    target_params = {param.data_ptr() for param in model.parameters()}
    assert all(param.data_ptr() in target_params for param in view.parameters())
    assert len(view.get_decoder().layers) == 2 and view.config.num_hidden_layers == 2
    assert len(model.get_decoder().layers) == 4 and model.config.to_dict() == before
    # The view's logits are the target's state after layer 2, normalized and scored by its head.
    input_ids = torch.tensor([[1, 5, 9, 14, 3]])
    with torch.no_grad():
        hidden = model(input_ids, output_hidden_states=True).hidden_states[2]
        expected = model.lm_head(model.model.norm(hidden))
        torch.testing.assert_close(view(input_ids).logits, expected)


@pytest.mark.parametrize("k", [0, -1, 4, 7])
def test_bad_k_is_refused_before_any_forward(k):
    model = tiny_models.llama(seed=0, layers=4)
    before = (model.config.to_dict(), model.generation_config.to_dict())
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    input_ids, mask = tiny_models.prompts(1, seed=0)
    with pytest.raises(hf_specdec.EarlyExitError, match="EarlyExit"):
        greedy(model, input_ids, mask, drafter=hf_specdec.EarlyExit(k), gamma=3)
    assert not calls
    assert (model.config.to_dict(), model.generation_config.to_dict()) == before
    assert issubclass(hf_specdec.EarlyExitError, ValueError)


def test_inseparable_layers_are_refused():
    # A decoder whose layer list is not the config's N layers: the norm and head cannot be told apart from them.
    model = tiny_models.llama(seed=0, layers=4)
    model.model.layers = torch.nn.ModuleList(list(model.model.layers)[:3])
    input_ids, mask = tiny_models.prompts(1, seed=0)
    with pytest.raises(hf_specdec.EarlyExitError, match="cannot be separated"):
        greedy(model, input_ids, mask, drafter=hf_specdec.EarlyExit(1), gamma=3)


def test_sampling_keeps_the_target_distribution():
    # The exact joint of 3 tokens (temperature 1.2, top-k 6) of two prompts, N = 2,000 rows each in one left-padded
    # batch, seed 0, chi-square at the 0.999 quantile; the control (prompt A's samples against prompt B's joint)
    # must fail. A 10-token vocabulary with a flattened head, so that drafts are rejected often.
    target = tiny_models.llama(seed=0, vocab=10, hidden=32, layers=3)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.15)
    target.generation_config.eos_token_id = None
    with columns_per_layer(target, (0, 1)) as counts:
        _, _, stats = padded_pair_fits(target, hf_specdec.EarlyExit(1), 3, 4000)
    assert 0.05 < stats.acceptance_rate < 0.95
    assert counts[0] == counts[1]  # with one cache: the verification recomputed no drafted column


def test_one_description_serves_two_targets_in_two_threads():
    drafter = hf_specdec.EarlyExit(1)
    models = [tiny_models.llama(seed=0, layers=3), tiny_models.qwen2(seed=1, layers=2)]
    input_ids, mask = tiny_models.prompts(2, seed=6)
    outputs, errors = {}, []

    def run(index):
        try:
            outputs[index] = greedy(models[index], input_ids, mask, drafter=drafter, gamma=3)
        except Exception as error:  # noqa: BLE001  (re-raised below)
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for index, model in enumerate(models):
        assert torch.equal(outputs[index], greedy(model, input_ids, mask))


@pytest.mark.parametrize("name, value, ours", [("assistant_early_exit", 2, "EarlyExit"),
                                               ("assistant_tokenizer", "tok", "drafter_tokenizer")])
def test_transformers_keywords_name_ours(name, value, ours):
    model = tiny_models.llama(seed=0, layers=4)
    input_ids, mask = tiny_models.prompts(1, seed=0)
    with pytest.raises(hf_specdec.UnsupportedGenerationError, match=ours):
        greedy(model, input_ids, mask, drafter=hf_specdec.EarlyExit(1), **{name: value})


def test_pipeline_takes_early_exit():
    from transformers import pipeline

    import _tiny

    model = tiny_models.llama(seed=0, layers=3)
    pipe = pipeline("text-generation", model=model, tokenizer=_tiny.chat_tokenizer())
    options = {"max_new_tokens": 12, "do_sample": False, "return_tensors": True}
    prompts = ["w5 w6 w7", "w9 w10"]
    expected = pipe(prompts, batch_size=2, **options)
    got = pipe(prompts, batch_size=2, drafter=hf_specdec.EarlyExit(2), gamma=3, **options)
    assert [out[0]["generated_token_ids"] for out in got] == [out[0]["generated_token_ids"] for out in expected]


@pytest.mark.parametrize("model_type, reason", [("gemma4_text", "once per decoder layer"),
                                                ("gemma3n_text", "shares key/value caches")])
def test_layers_that_need_the_others_are_refused_before_any_forward(model_type, reason):
    # Found by running EarlyExit(1) over the architecture zoo: Gemma 4 crashed mid-call before its check.
    import arch_zoo

    model = arch_zoo.build(model_type, 0)
    calls = []
    model.register_forward_hook(lambda *args: calls.append(1))
    input_ids, mask = tiny_models.prompts(2, seed=3)
    with pytest.raises(hf_specdec.EarlyExitError, match=reason):
        greedy(model, input_ids, mask, drafter=hf_specdec.EarlyExit(1), gamma=3)
    assert not calls


@contextlib.contextmanager
def columns_per_layer(model, indices):
    """Yields {i: token columns decoder layer i ran on}, counted by forward pre-hooks while the block runs."""
    from hf_specdec.drafters.early_exit import decoder_layers

    counts = {index: 0 for index in indices}
    _, decoder, name = decoder_layers(model)
    layers = getattr(decoder, name)
    hooks = [layers[index].register_forward_pre_hook(
        lambda module, args, index=index: counts.__setitem__(index, counts[index] + args[0].shape[1]))
        for index in indices]
    try:
        yield counts
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("gamma", [3, hf_specdec.DraftPolicy(max_gamma=4, min_confidence=0.5)])
def test_verification_does_not_recompute_the_drafted_layers(arch, batch, gamma):
    # One cache: layers 0..k-1 run on every column once (in a draft, or in the verification for a row's last draft),
    # so on as many columns as layer k; recomputing the drafted columns would run them on about twice as many.
    # The confidence stop makes rows of a batch draft different numbers of tokens; without EOS every row runs 24 tokens.
    model = tiny_models.BUILDERS[arch](seed=0, layers=4)
    model.generation_config.eos_token_id = None
    input_ids, mask = tiny_models.prompts(batch, seed=2)
    plain = greedy(model, input_ids, mask)
    for k in (1, 3):
        stats = hf_specdec.SpeculativeStats()
        with columns_per_layer(model, sorted({0, k - 1, k})) as counts:
            out = greedy(model, input_ids, mask, drafter=hf_specdec.EarlyExit(k), gamma=gamma, stats=stats)
        assert torch.equal(out, plain), k
        assert 0 < stats.acceptance_rate < 1, k  # drafts were made, some rejected
        assert counts[0] == counts[k - 1] == counts[k], (k, counts)


def test_where_the_cache_cannot_be_shared_the_draft_keeps_its_own():
    # GPT-2's blocks take encoder inputs whose layout along the tokens is not known, and it builds its own masks: the
    # drafter keeps a cache of its own and the verification runs every layer on every column (still exact).
    from hf_specdec.cache import prefix_refusal

    model = tiny_models.gpt2(seed=0, layers=4)
    assert "not laid out as known" in prefix_refusal(model, list(model.transformer.h[:2]))
    input_ids, mask = tiny_models.prompts(3, seed=2)
    counts = {0: 0, 2: 0}
    hooks = [model.transformer.h[i].register_forward_pre_hook(
        lambda module, args, i=i: counts.__setitem__(i, counts[i] + args[0].shape[1])) for i in counts]
    try:
        out = greedy(model, input_ids, mask, drafter=hf_specdec.EarlyExit(2), gamma=3)
    finally:
        for hook in hooks:
            hook.remove()
    assert torch.equal(out, greedy(model, input_ids, mask))
    assert counts[0] > counts[2]


@pytest.mark.parametrize("model_type", [name for name in tiny_models.WINDOWED if name != "llama4_text"])
def test_windowed_models_share_the_cache_exactly(model_type):
    # Sliding-window layers get one mask per layer type; rows run past the window of 8. (EarlyExit refuses Llama 4:
    # its get_decoder() holds no list of its layers.)
    model = tiny_models.windowed(model_type, 8)
    input_ids, mask = tiny_models.prompts(3, seed=5, min_len=3, max_len=10)
    with columns_per_layer(model, (0, 1)) as counts:
        out = model.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=40,
                             drafter=hf_specdec.EarlyExit(1), gamma=3)
    assert torch.equal(out, model.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=40))
    assert counts[0] == counts[1]


def test_a_shared_verification_scores_what_a_whole_forward_scores():
    # The drafter feeds the prompts and some rows' next token through the first 2 layers; the target's next forward
    # takes those columns from layer 2 on and feeds the rest. Its logits at every index a row fed equal those of a
    # forward of every layer over the same tokens, and its cache then serves the next step as that forward's does.
    from hf_specdec.cache import CachedModel, share_prefix
    from hf_specdec.drafters.early_exit import _view, decoder_layers

    model = tiny_models.llama(seed=0, layers=4)
    input_ids, mask = tiny_models.prompts(3, seed=2)
    pad_lens = (mask == 0).sum(dim=1)
    lens = torch.full_like(pad_lens, input_ids.shape[1])
    sequences = torch.cat([input_ids, torch.randint(3, 90, (3, 4), generator=torch.Generator().manual_seed(0))], dim=1)
    _, decoder, name = decoder_layers(model)
    shared, whole = CachedModel(model, 3, torch.device("cpu")), CachedModel(model, 3, torch.device("cpu"))
    prefix = share_prefix(shared, list(getattr(decoder, name)), 2, lambda layers: _view(model, layers))
    assert prefix is not None
    prefix.begin()
    drafted = torch.tensor([2, 1, 0])  # row 0 feeds its next token to the drafter, row 1 none beyond the prompt
    prefix.drafter.forward(sequences, pad_lens, lens, 1)
    prefix.drafter.forward(sequences, pad_lens, torch.where(drafted > 1, lens + 1, lens), 1, lens + 1)
    ends, anchors, num_logits = lens + drafted, lens + 2, 5
    got, _ = shared.forward(sequences, pad_lens, ends, num_logits, anchors=anchors)
    expected, _ = whole.forward(sequences, pad_lens, ends, num_logits, anchors=anchors)
    fed = (anchors[:, None] - num_logits + torch.arange(num_logits)) < ends[:, None]  # [batch, num_logits]
    torch.testing.assert_close(got[fed], expected[fed])
    assert torch.equal(shared.num_cached, whole.num_cached) and not prefix.pending
    next_ends = ends + 2
    got, _ = shared.forward(sequences, pad_lens, next_ends, 2)
    expected, _ = whole.forward(sequences, pad_lens, next_ends, 2)
    torch.testing.assert_close(got, expected)
