"""Every causal-LM type of the installed transformers is exact or refused before decoding: never other
tokens than plain generate(), never an error after the first forward.

Each type's tiny seeded model (tests/arch_zoo.py) runs the sweep's cases (tests/arch_sweep.py: alone,
left-padded batches, a ragged batch, past the window for sliding-window models; BERT-like types also
built as encoders), each against plain generate() on the same batch. The common families
below run in the default suite with the class they must keep (a model that stops being exact fails
too); the whole sweep runs with `make test-sweep` (`pytest -m sweep`, about two minutes).
"""

import pytest

import arch_sweep
import arch_zoo
import hf_specdec

#: Common families and what they must stay: "exact", "batch 1" (exact alone, refused in batches), "refused".
FAST = {
    "llama": "exact", "mistral": "exact", "qwen2": "exact", "qwen3": "exact", "qwen3_moe": "exact",
    "gemma2": "exact", "gemma3_text": "exact", "gemma3": "exact", "phi3": "exact", "gpt2": "exact",
    "gpt_neox": "exact", "opt": "exact", "falcon": "exact", "bloom": "exact", "mpt": "exact", "olmo2": "exact",
    "starcoder2": "exact", "gpt_oss": "exact", "cohere2": "exact", "llama4_text": "exact", "mixtral": "exact",
    "marian": "batch 1", "whisper": "batch 1", "git": "batch 1",
    "mamba": "refused", "rwkv": "refused", "qwen3_next": "refused", "jamba": "refused", "moshi": "refused",
}
BROKEN = (arch_sweep.DIFFERS, arch_sweep.CRASH, arch_sweep.REFUSED_AFTER, arch_sweep.IGNORED)


def _check(model_type: str, expected: str | None = None) -> None:
    record = arch_sweep.sweep_model(hf_specdec, model_type, stress=True)
    if record["overall"] == arch_sweep.SKIPPED:
        pytest.skip(f"{model_type} cannot be built small: {record['skip_reason']}")
    if record["overall"] == arch_sweep.PLAIN_FAILS:
        pytest.skip(f"plain generate() itself fails for {model_type}: {arch_sweep.support_row(record)[2]}")
    broken = [(case["case"], case["cls"], arch_sweep._reason(case)) for case in record["cases"] if case["cls"] in BROKEN]
    assert not broken, broken
    if expected is not None:
        status = arch_sweep.support_row(record)[1]
        assert status == {"batch 1": "exact at batch 1; refused in batches"}.get(expected, expected), status


@pytest.mark.parametrize("model_type", sorted(FAST))
def test_common_families_are_exact_or_refused_before_decoding(model_type):
    _check(model_type, FAST[model_type])


def test_bert_built_as_an_encoder_is_refused_before_decoding():
    """BertConfig's default is_decoder=False makes BertLMHeadModel attend bidirectionally: a verification
    forward would let each token see the drafts after it (it gave other tokens than plain generate() in a
    padded batch before hf_specdec refused it)."""
    _check("bert" + arch_sweep.ENCODER, "refused")


@pytest.mark.sweep
@pytest.mark.parametrize("model_type", [t for t in arch_sweep.sweep_names(arch_zoo.MODEL_TYPES) if t not in FAST])
def test_every_causal_lm_type_is_exact_or_refused_before_decoding(model_type):
    _check(model_type)
