"""`load_drafter` is the one loader for every directory `drafter=` accepts (a causal LM, an EAGLE-1 / EAGLE-3
head): it returns a ready drafter, the same one `generate(drafter="path")` uses, and a directory that is
neither gets a typed error saying what was expected."""

import json
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel, T5Config

import hf_specdec
import tiny_models
from hf_specdec import DrafterLoadError, FeatureDrafter, load_drafter
from hf_specdec.distill.feature_head import build_feature_head
from hf_specdec.drafters import ModelDrafter, resolve_drafter
from hf_specdec.eagle import save_feature_head

SHIPPED = Path(__file__).resolve().parents[1] / "drafters"
GREEDY = {"do_sample": False, "max_new_tokens": 12}


def _state(drafter) -> dict[str, torch.Tensor]:
    return (drafter.head if isinstance(drafter, FeatureDrafter) else drafter.model).state_dict()


@pytest.mark.parametrize("path", sorted(p for p in SHIPPED.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_load_drafter_loads_every_shipped_drafter_without_a_load_report(path, capfd):
    capfd.readouterr()
    loaded = load_drafter(path)
    out, err = capfd.readouterr()
    if (path / "tokenizer_config.json").is_file():  # a causal LM: the model, as load_drafter always returned
        assert isinstance(loaded, PreTrainedModel) and not loaded.training
        assert "LOAD REPORT" not in err and "mismatch" not in err.lower()  # transformers' progress bar may show
    else:  # a feature head: silent
        assert isinstance(loaded, FeatureDrafter) and loaded.head.kind == "eagle3"
        assert not loaded.head.training and loaded.head.fc.weight.dtype == torch.float32
        assert (out, err) == ("", "")
    # generate(drafter="path") resolves through the same loader: the same kind of drafter, the same weights.
    from_path, from_loaded = resolve_drafter(str(path)), resolve_drafter(loaded)
    assert type(from_path) is type(from_loaded)
    assert all(torch.equal(value, _state(from_loaded)[name]) for name, value in _state(from_path).items())


@pytest.fixture(scope="module")
def feature_target():
    return tiny_models.llama(seed=0, layers=4)


@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_load_drafter_returns_a_saved_head_ready_for_drafter(feature_target, kind, tmp_path, capfd):
    head = build_feature_head(feature_target, kind, draft_vocab=list(range(3, 60)) if kind == "eagle3" else None)
    save_feature_head(head, tmp_path, dtype=torch.bfloat16)
    capfd.readouterr()
    drafter = load_drafter(tmp_path)
    assert capfd.readouterr() == ("", "")
    assert isinstance(drafter, FeatureDrafter) and drafter.head.kind == kind
    assert drafter.head.fc.weight.dtype == torch.float32  # as generate(drafter=path) always loaded heads
    assert load_drafter(tmp_path, dtype="auto").head.fc.weight.dtype == torch.bfloat16  # as saved
    assert load_drafter(tmp_path, dtype=torch.bfloat16).head.fc.weight.dtype == torch.bfloat16
    input_ids, mask = tiny_models.prompts(3, seed=2)
    expected = feature_target.generate(input_ids, attention_mask=mask, **GREEDY)
    for ready in (drafter, load_drafter(tmp_path, dtype="auto")):  # a bf16 head drafts for a float32 target too
        stats = hf_specdec.SpeculativeStats()
        out = feature_target.generate(input_ids, attention_mask=mask, drafter=ready, gamma=3, stats=stats, **GREEDY)
        assert torch.equal(out, expected) and stats.drafter_forwards > 0
    by_path = feature_target.generate(input_ids, attention_mask=mask, drafter=str(tmp_path), gamma=3, **GREEDY)
    assert torch.equal(by_path, expected)


def test_a_head_takes_no_quantization_or_device_map(feature_target, tmp_path):
    save_feature_head(build_feature_head(feature_target, "eagle1"), tmp_path)
    with pytest.raises(DrafterLoadError, match="quantization"):
        load_drafter(tmp_path, quantization="int8")
    with pytest.raises(DrafterLoadError, match="device map"):
        load_drafter(tmp_path, device="auto")


def _empty(directory: Path) -> None:
    directory.mkdir()


def _only_a_readme(directory: Path) -> None:
    directory.mkdir()
    (directory / "README.md").write_text("notes, no checkpoint\n")


def _not_a_causal_lm(directory: Path) -> None:
    T5Config(vocab_size=96, d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16).save_pretrained(directory)


def _unknown_model_type(directory: Path) -> None:
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))


def _weights_of_another_shape(directory: Path) -> None:
    # A Llama config.json beside weights that do not fit it (here: another width), as a head in a layout
    # we do not read would look; transformers would raise its own size-mismatch error after its report.
    tiny_models.llama(seed=0, hidden=32).save_pretrained(directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config | {"hidden_size": 64, "intermediate_size": 128}))


def _missing_weights(directory: Path) -> None:
    # transformers would fill the missing layer with random values and go on.
    tiny_models.llama(seed=0, layers=2).save_pretrained(directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 3}))


@pytest.mark.parametrize(
    "make", [_empty, _only_a_readme, _not_a_causal_lm, _unknown_model_type, _weights_of_another_shape, _missing_weights]
)
def test_a_directory_that_is_no_drafter_gets_a_typed_error_saying_what_was_expected(make, tmp_path, target):
    directory = tmp_path / "drafter"
    make(directory)
    with pytest.raises(DrafterLoadError) as info:
        load_drafter(directory)
    assert isinstance(info.value, ValueError)
    assert "save_pretrained" in str(info.value) and "feature head" in str(info.value)
    forwards = []
    hook = target.register_forward_hook(lambda *a: forwards.append(1))
    try:
        with pytest.raises(DrafterLoadError):  # the same error from generate(), before any forward
            target.generate(tiny_models.prompts(1)[0], drafter=str(directory), max_new_tokens=3)
    finally:
        hook.remove()
    assert not forwards


def test_a_copied_causal_lm_directory_loads_as_before(partial_drafter, tmp_path):
    partial_drafter.save_pretrained(tmp_path / "drafter")
    loaded = load_drafter(tmp_path / "drafter")
    assert isinstance(loaded, PreTrainedModel) and isinstance(resolve_drafter(str(tmp_path / "drafter")), ModelDrafter)
    assert all(torch.equal(value, partial_drafter.state_dict()[name]) for name, value in loaded.state_dict().items())
