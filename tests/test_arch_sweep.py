"""Every causal-LM type of the installed transformers is exact or refused before decoding, drafting chains
and drafting trees: never other tokens than plain generate(), never an error after the first forward; and
where trees are refused, the default (no gamma=) drafts chains, exact wherever chains are.

Each type's tiny seeded model (tests/arch_zoo.py) runs the sweep's cases (tests/arch_sweep.py: alone,
left-padded batches, a ragged batch, past the window for sliding-window models; BERT-like types also
built as encoders), each against plain generate() on the same batch. The common families
below run in the default suite with the classes they must keep (a model that stops being exact fails
too); the whole sweep runs with `make test-sweep` (`pytest -m sweep`, about 7 minutes on one core).
"""

import pytest

import arch_sweep
import arch_zoo
import hf_specdec

#: Common families and what chains and trees must stay: "exact", "batch 1" (exact alone, refused in batches),
#: "refused". Trees are refused where the model takes no position_ids (a tree's siblings share one).
EXACT, BATCH1, REFUSED = ("exact", "exact"), ("batch 1", "batch 1"), ("refused", "refused")
FAST = {
    "llama": EXACT, "mistral": EXACT, "qwen2": EXACT, "qwen3": EXACT, "qwen3_moe": EXACT, "gemma2": EXACT,
    "gemma3_text": EXACT, "gemma3": EXACT, "phi3": EXACT, "gpt2": EXACT, "gpt_neox": EXACT, "opt": EXACT,
    "falcon": EXACT, "olmo2": EXACT, "starcoder2": EXACT, "gpt_oss": EXACT, "cohere2": EXACT, "llama4_text": EXACT,
    "mixtral": EXACT, "bloom": ("exact", "refused"), "mpt": ("exact", "refused"),
    "marian": ("batch 1", "refused"), "whisper": ("batch 1", "refused"), "git": BATCH1,
    "mamba": REFUSED, "rwkv": REFUSED, "qwen3_next": REFUSED, "jamba": REFUSED, "moshi": REFUSED,
}
STATUS = {"batch 1": "exact at batch 1; refused in batches"}
#: Not among them: a float32 near-tie (arch_sweep.NEAR_TIE), a difference first where plain generate()'s own top
#: two logits are within 1e-4 and that the same case in float64 does not make (rounding of a wider forward).
BROKEN = (arch_sweep.DIFFERS, arch_sweep.CRASH, arch_sweep.REFUSED_AFTER, arch_sweep.IGNORED)


def _check(model_type: str, expected: tuple[str, str] | None = None) -> None:
    record = arch_sweep.sweep_model(hf_specdec, model_type, stress=True)
    if record["overall"] == arch_sweep.SKIPPED:
        pytest.skip(f"{model_type} cannot be built small: {record['skip_reason']}")
    if record["overall"] == arch_sweep.PLAIN_FAILS:
        pytest.skip(f"plain generate() itself fails for {model_type}: {arch_sweep.support_status(record)[1]}")
    broken = [(mode, case["case"], case["cls"], arch_sweep._reason(case))
              for mode, key, _ in arch_sweep.MODES for case in record.get(key, []) if case["cls"] in BROKEN]
    assert not broken, broken
    # Where trees are refused, the default drafts chains: exact where they are, refused where they refuse.
    default = [(c["case"], c["cls"], arch_sweep._reason(c)) for c in record.get("default_cases", [])]
    assert arch_sweep.default_falls_back(record) is not False, (default, [c["cls"] for c in record["cases"]])
    if expected is not None:
        statuses = (arch_sweep.support_status(record)[0], arch_sweep.support_status(record, "tree_cases")[0])
        assert statuses == tuple(STATUS.get(e, e) for e in expected), statuses


@pytest.mark.parametrize("model_type", sorted(FAST))
def test_common_families_are_exact_or_refused_before_decoding(model_type):
    _check(model_type, FAST[model_type])


def test_bert_built_as_an_encoder_is_refused_before_decoding():
    """BertConfig's default is_decoder=False makes BertLMHeadModel attend bidirectionally: a verification
    forward would let each token see the drafts after it (it gave other tokens than plain generate() in a
    padded batch before hf_specdec refused it)."""
    _check("bert" + arch_sweep.ENCODER, REFUSED)


@pytest.mark.sweep
@pytest.mark.parametrize("model_type", [t for t in arch_sweep.sweep_names(arch_zoo.MODEL_TYPES) if t not in FAST])
def test_every_causal_lm_type_is_exact_or_refused_before_decoding(model_type):
    _check(model_type)


#: Encoder-decoder classes of the default suite and their status; the whole seq2seq sweep runs with `pytest -m sweep`.
#: (chains, trees): decoders told each row's positions (Whisper's decoder_position_ids) draft trees too.
SEQ2SEQ_FAST = {
    ("bart", "BartForConditionalGeneration"): ("exact at batch 1; refused in batches", "refused"),
    ("t5", "T5ForConditionalGeneration"): ("exact at batch 1; refused in batches", "refused"),
    ("whisper", "WhisperForConditionalGeneration"): ("exact", "exact"),
    ("t5gemma", "T5GemmaForConditionalGeneration"): ("exact", "exact"),  # text, decoder_position_ids: source lookup trees
    ("qwen2_audio", "Qwen2AudioForConditionalGeneration"): ("exact", "refused"),  # a decoder-only audio LM, text input
}
SEQ2SEQ_BROKEN = (arch_sweep.DIFFERS, arch_sweep.CRASH, arch_sweep.REFUSED_AFTER)


def _check_seq2seq(model_type: str, class_name: str, expected: tuple[str, str] | None = None) -> None:
    record = arch_sweep.sweep_seq2seq_model(hf_specdec, model_type, class_name)
    if record["overall"] == arch_sweep.SKIPPED:
        pytest.skip(f"{class_name} cannot be built small: {record['skip_reason']}")
    broken = [(key, c["case"], c["cls"], arch_sweep._reason(c)) for key in ("cases", "tree_cases", "default_cases")
              for c in record.get(key, []) if c["cls"] in SEQ2SEQ_BROKEN]
    assert not broken, broken
    assert arch_sweep.default_falls_back(record) in (None, True)  # where trees are refused the default drafts chains
    if expected is not None:
        assert (arch_sweep.seq2seq_status(record)[0], arch_sweep.seq2seq_status(record, "tree_cases")[0]) == expected


@pytest.mark.parametrize("model_type, class_name", sorted(SEQ2SEQ_FAST))
def test_common_encoder_decoder_classes_are_exact_or_refused_before_decoding(model_type, class_name):
    _check_seq2seq(model_type, class_name, SEQ2SEQ_FAST[model_type, class_name])


@pytest.mark.sweep
@pytest.mark.parametrize("model_type, class_name", [c for c in arch_zoo.SEQ2SEQ_CLASSES if c not in SEQ2SEQ_FAST])
def test_every_encoder_decoder_class_is_exact_or_refused_before_decoding(model_type, class_name):
    _check_seq2seq(model_type, class_name)
