"""The feature drafter (EAGLE-1 / EAGLE-3 heads on the target's hidden states) is exact, drafts what its
training computation predicts, and loads heads written in the published layouts."""

import copy
import json

import pytest
import torch
from safetensors.torch import save_file
from torch.nn import functional as F

import hf_specdec
import tiny_models
from hf_specdec.distill.data import Record
from hf_specdec.distill.feature_head import Batch, build_feature_head, train_feature_head, unrolled_states
from hf_specdec.distill.features import FeatureStore, extract_features
from hf_specdec.drafters.feature import FeatureDrafter
from hf_specdec.eagle import is_feature_head, load_feature_head, save_feature_head
from joint_util import exact_joint, joint_chi_square, sample_continuations

LAYERS = 4


@pytest.fixture(scope="module")
def feature_target():
    model = tiny_models.llama(seed=0, layers=LAYERS)
    model.generation_config.eos_token_id = None
    return model


@pytest.fixture(scope="module")
def heads(feature_target, tmp_path_factory):
    """An EAGLE-3 head (draft vocabulary: ids 3-95) and an EAGLE-1 head, trained briefly on the target's
    own text so that they agree with it part of the time."""
    generator = torch.Generator().manual_seed(0)
    records = []
    for i in range(6):
        prompts = torch.randint(3, tiny_models.VOCAB, (8, 6), generator=generator)
        out = feature_target.generate(prompts, do_sample=i % 2 == 1, max_new_tokens=40, pad_token_id=0)
        records += [Record(row.tolist(), 6, i % 2 == 0) for row in out]
    directory = tmp_path_factory.mktemp("features")
    extract_features(feature_target, records, directory, layers=[1, 2, LAYERS], progress=False)
    store = FeatureStore(directory)
    trained = {}
    for kind in ("eagle3", "eagle1"):
        vocab = list(range(3, tiny_models.VOCAB)) if kind == "eagle3" else None
        head = build_feature_head(feature_target, kind, draft_vocab=vocab)
        train_feature_head(head, feature_target, records, store, steps=60, lr=3e-3, progress=False)
        trained[kind] = head
    return trained


def _greedy(model, input_ids, mask=None, **kwargs):
    return model.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=30, **kwargs)


@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_feature_drafter_greedy_equals_target(feature_target, heads, kind, gamma):
    input_ids, mask = tiny_models.prompts(4, seed=gamma)
    stats = hf_specdec.SpeculativeStats()
    out = _greedy(feature_target, input_ids, mask, drafter=FeatureDrafter(heads[kind]), gamma=gamma, stats=stats)
    assert torch.equal(out, _greedy(feature_target, input_ids, mask))
    assert 0.0 < stats.acceptance_rate < 1.0


def _replayed_acceptances(target, head, sequence: torch.Tensor, prompt_len: int, gamma: int) -> int:
    """Accepted drafts of greedy decoding at `gamma`, recomputed independently of the loop: the unrolled
    training computation over the final text gives, at every anchor, the drafts the head makes as long as
    the ones before were right; each step accepts the leading run of those that match the text."""
    with torch.no_grad():
        states = target(sequence[None], output_hidden_states=True).hidden_states
        layers = head.feature_layers_for(LAYERS)
        batch = Batch(
            sequence[None], torch.cat([states[i] for i in layers], -1), states[-1], torch.ones(1, len(sequence), dtype=torch.bool)
        )
        unrolled = unrolled_states(head, lambda ids: F.embedding(ids, target.get_input_embeddings().weight), batch, gamma)
        ids = head.draft_ids()
        weight = target.get_output_embeddings().weight
        drafts = [(state[0] @ weight.T).argmax(-1) if ids is None else ids[head.scores(state[0]).argmax(-1)] for state in unrolled]
    total, lens, accepted = len(sequence), prompt_len + 1, 0  # the first step drafts nothing
    while lens < total:
        run = 0
        while run < min(gamma, total - lens - 1) and drafts[run][lens - 2] == sequence[lens + run]:
            run += 1
        accepted += run
        lens += run + 1
    return accepted


@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
@pytest.mark.parametrize("gamma", [1, 2, 4])
def test_the_loop_accepts_exactly_what_the_heads_training_computation_predicts(feature_target, heads, kind, gamma):
    input_ids, mask = tiny_models.prompts(3, seed=10 + gamma)
    stats = hf_specdec.SpeculativeStats()
    out = _greedy(feature_target, input_ids, mask, drafter=FeatureDrafter(heads[kind]), gamma=gamma, stats=stats)
    for row in range(3):
        real = mask[row].bool()
        prompt_len = int(real.sum())
        sequence = torch.cat([input_ids[row, real], out[row, input_ids.shape[1] :]])
        assert int(stats.accepted[row]) == _replayed_acceptances(feature_target, heads[kind], sequence, prompt_len, gamma)
    assert int(stats.accepted.sum()) > 0


N = 6000


def test_feature_drafter_sampling_follows_the_target_distribution():
    """Chi-square on the exact joint of 3 sampled tokens (temperature 1.2, top-k 6), N = 6000, seed 0,
    threshold the 0.999 quantile; an EAGLE-3 head over a 7-token draft vocabulary (the other 3 tokens only
    ever come from the residual). The negative control: the samples against another target's joint fail."""
    vocab = 10
    target = tiny_models.llama(seed=0, vocab=vocab, hidden=32, layers=LAYERS)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.15)
    target.generation_config.eos_token_id = None
    head = build_feature_head(target, "eagle3", draft_vocab=[0, 1, 3, 4, 5, 7, 9])
    prompt = torch.tensor([[1, 5, 7, 3, 5]])
    samples, stats = sample_continuations(
        target, prompt, FeatureDrafter(head), 2, num_samples=N, temperature=1.2, top_k=6
    )
    assert 0.05 < stats.acceptance_rate < 0.95
    statistic, threshold = joint_chi_square(samples, exact_joint(target, prompt, 3, 1.2, 6))
    assert statistic < threshold, (statistic, threshold)
    other = tiny_models.llama(seed=3, vocab=vocab, hidden=32, layers=LAYERS)
    with torch.no_grad():
        other.lm_head.weight.mul_(0.15)
    statistic, threshold = joint_chi_square(samples, exact_joint(other, prompt, 3, 1.2, 6))
    assert statistic > threshold, (statistic, threshold)


def test_one_feature_drafter_serves_concurrent_calls(feature_target, heads):
    from test_threads import _run_concurrently

    drafter = FeatureDrafter(heads["eagle3"])
    inputs = {job: tiny_models.prompts(1 + job % 3, seed=60 + job) for job in range(6)}
    results = _run_concurrently(
        lambda job: _greedy(feature_target, *inputs[job], drafter=drafter, gamma=3), [[0, 2, 4], [1, 3, 5]]
    )
    for job, (input_ids, mask) in inputs.items():
        assert torch.equal(results[job], _greedy(feature_target, input_ids, mask)), job


@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_saved_heads_use_the_published_layout_and_load_back(feature_target, heads, kind, tmp_path):
    head = heads[kind]
    save_feature_head(head, tmp_path, dtype=torch.float32)
    names = set(__import__("safetensors.torch", fromlist=["load_file"]).load_file(str(tmp_path / "model.safetensors")))
    hidden = feature_target.config.hidden_size
    if kind == "eagle3":
        expected = {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d", "midlayer.hidden_norm.weight",
                    "midlayer.input_layernorm.weight", "midlayer.self_attn.q_proj.weight", "midlayer.mlp.down_proj.weight"}
    else:
        expected = {"fc.weight", "layers.0.self_attn.q_proj.weight", "layers.0.post_attention_layernorm.weight"}
        assert not any("input_layernorm" in name or name.startswith(("norm", "lm_head")) for name in names)
    assert expected <= names
    assert is_feature_head(tmp_path)
    loaded = load_feature_head(tmp_path)
    assert loaded.kind == kind and loaded.fc.weight.shape[1] == (3 if kind == "eagle3" else 2) * hidden
    for name, value in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    input_ids, mask = tiny_models.prompts(2, seed=3)
    out = _greedy(feature_target, input_ids, mask, drafter=str(tmp_path), gamma=3)  # a path, as users pass it
    assert torch.equal(out, _greedy(feature_target, input_ids, mask))


def _write_published(directory, tensors: dict, config: dict, pickled: bool = False):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    if pickled:
        torch.save(tensors, directory / "pytorch_model.bin")
    else:
        save_file(tensors, str(directory / "model.safetensors"))
    return directory


def _published_tensors(kind: str, hidden: int, intermediate: int, heads: int, kv_heads: int, draft_vocab=None, prefix=None):
    """Random tensors with exactly the names and shapes SafeAILab/EAGLE checkpoints use."""
    generator = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=generator) * 0.05  # noqa: E731
    head_dim = hidden // heads
    width = 2 * hidden  # EAGLE-1: fc input; EAGLE-3: attention input
    layer = prefix or ("midlayer." if kind == "eagle3" else "layers.0.")
    tensors = {
        f"{layer}self_attn.q_proj.weight": rand(heads * head_dim, width if kind == "eagle3" else hidden),
        f"{layer}self_attn.k_proj.weight": rand(kv_heads * head_dim, width if kind == "eagle3" else hidden),
        f"{layer}self_attn.v_proj.weight": rand(kv_heads * head_dim, width if kind == "eagle3" else hidden),
        f"{layer}self_attn.o_proj.weight": rand(hidden, heads * head_dim),
        f"{layer}mlp.gate_proj.weight": rand(intermediate, hidden),
        f"{layer}mlp.up_proj.weight": rand(intermediate, hidden),
        f"{layer}mlp.down_proj.weight": rand(hidden, intermediate),
        f"{layer}post_attention_layernorm.weight": torch.ones(hidden),
    }
    if kind == "eagle1":
        tensors |= {"fc.weight": rand(hidden, 2 * hidden), "fc.bias": rand(hidden)}
    else:
        ids = torch.tensor(draft_vocab)
        tensors |= {
            "fc.weight": rand(hidden, 3 * hidden), "norm.weight": torch.ones(hidden), "lm_head.weight": rand(len(ids), hidden),
            f"{layer}input_layernorm.weight": torch.ones(hidden), f"{layer}hidden_norm.weight": torch.ones(hidden),
            "d2t": ids - torch.arange(len(ids)), "t2d": torch.zeros(tiny_models.VOCAB, dtype=torch.bool).index_fill(0, ids, True),
            "embed_tokens.weight": rand(tiny_models.VOCAB, hidden),  # present in some checkpoints: ignored
        }
    return tensors


@pytest.mark.parametrize(
    "kind, pickled, prefix, extra_config, expected_layers",
    [
        ("eagle1", True, None, {"bias": True}, (LAYERS,)),  # pytorch_model.bin, fc with bias, no input norm
        ("eagle3", False, None, {}, (2, LAYERS // 2, LAYERS - 3)),  # official layout: default layers
        ("eagle3", False, "layers.0.", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}}, (1, 2, 3)),
        ("eagle3", False, None, {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}, (1, 2, 4)),
    ],
)
def test_published_checkpoints_load_and_decode_exactly(feature_target, tmp_path, kind, pickled, prefix, extra_config, expected_layers):
    config = feature_target.config
    llama = {
        "architectures": ["LlamaForCausalLM"], "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
        "num_hidden_layers": 1, "vocab_size": tiny_models.VOCAB, "rms_norm_eps": 1e-5, "max_position_embeddings": 256,
    }
    if kind == "eagle3":
        llama |= {"draft_vocab_size": 60}
    tensors = _published_tensors(
        kind, config.hidden_size, config.intermediate_size, config.num_attention_heads, config.num_key_value_heads,
        draft_vocab=list(range(3, 63)), prefix=prefix,
    )
    directory = _write_published(tmp_path / "head", tensors, llama | extra_config, pickled=pickled)
    drafter = hf_specdec.drafters.resolve_drafter(str(directory))
    assert isinstance(drafter, FeatureDrafter) and drafter.head.kind == kind
    assert drafter.feature_layers(feature_target) == expected_layers
    if kind == "eagle1":
        assert drafter.head.fc.bias is not None
    input_ids, mask = tiny_models.prompts(3, seed=1)
    out = _greedy(feature_target, input_ids, mask, drafter=drafter, gamma=3)
    assert torch.equal(out, _greedy(feature_target, input_ids, mask))


def test_a_head_for_another_target_is_refused_before_any_forward(heads):
    other = tiny_models.llama(seed=0, layers=LAYERS, hidden=32)
    calls = []
    other.register_forward_pre_hook(lambda *args: calls.append(1))
    with pytest.raises(hf_specdec.IncompatibleDrafterError, match="another target"):
        other.generate(torch.tensor([[5, 6, 7]]), drafter=FeatureDrafter(heads["eagle3"]), max_new_tokens=4)
    assert calls == []


def test_a_head_drafts_in_the_targets_bf16_where_the_cpu_computes_it(monkeypatch):
    from hf_specdec.drafters import feature

    head = build_feature_head(tiny_models.llama(seed=0), "eagle3", draft_vocab=list(range(2, 40)))
    drafter, fixed = FeatureDrafter(head), FeatureDrafter(head, match_target=False)
    target16 = tiny_models.llama(seed=0).to(torch.bfloat16)
    monkeypatch.setattr(feature, "computes_bf16", lambda: True)
    used = drafter.compute_head(target16)
    assert used.q_proj.weight.dtype == torch.bfloat16 and head.q_proj.weight.dtype == torch.float32  # shared head kept
    assert drafter.compute_head(target16) is used  # cast once
    assert torch.equal(used.d2t, head.d2t) and torch.equal(used.q_proj.weight, head.q_proj.weight.to(torch.bfloat16))
    with torch.no_grad():
        head.q_proj.weight.add_(1.0)  # trained on: a new copy
    assert torch.equal(drafter.compute_head(target16).q_proj.weight, head.q_proj.weight.to(torch.bfloat16))
    session = drafter.start(target16, 1, torch.device("cpu"))
    assert session.bound.dtype == torch.bfloat16
    for other, reason in ((fixed, "an explicit dtype"), (drafter, "a float32 target")):
        target = target16 if other is fixed else tiny_models.llama(seed=0)
        assert other.compute_head(target) is head, reason
    twin = copy.deepcopy(drafter)  # a description: copies (and pickles) keep the head, not the lock or the cast copies
    assert twin.compute_head(target16).q_proj.weight.dtype == torch.bfloat16 and twin.compute_head(target16) is not used
    monkeypatch.setattr(feature, "computes_bf16", lambda: False)  # bf16 emulated (AVX2): float32 drafts faster
    assert drafter.compute_head(target16) is head
