"""Sampling with a drafter from encoder-decoder targets follows the target's own distribution: chi-square on the
joint distribution of the first 3 sampled tokens (BART, T5, Whisper), each against the exact joint enumerated from
the target's forwards, with a negative control that must fail: the same samples against the drafter's joint (what
skipping verification would sample; a tiny random encoder hardly changes its decoder's joint, so another input's is
too close to tell apart)."""

import pytest
import torch
from transformers import GenerationMixin, LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper
from transformers.modeling_outputs import BaseModelOutput

import hf_specdec
from hf_specdec import TreeDraftPolicy

import tiny_models
import tiny_seq2seq
from joint_util import joint_chi_square

TEMPERATURE, TOP_K, NUM_TOKENS = 1.2, 4, 3


@torch.no_grad()
def exact_joint(model, encoder_inputs: dict, prefix: list[int]) -> dict[tuple[int, ...], float]:
    """{(x1, x2, x3): probability} of plain sampling (temperature, then top-k) after the decoder prompt `prefix`, from
    `model`'s logits given `encoder_inputs` (an encoder-decoder model's, or a reader's encoder_outputs)."""
    processors = LogitsProcessorList([TemperatureLogitsWarper(TEMPERATURE), TopKLogitsWarper(TOP_K)])
    joint = {(): 1.0}
    for _ in range(NUM_TOKENS):
        prefixes = list(joint)
        decoder = torch.tensor([prefix + list(p) for p in prefixes], dtype=torch.long)  # [prefixes, step]
        repeated = {name: value.repeat(len(prefixes), *[1] * (value.dim() - 1)) for name, value in encoder_inputs.items()}
        if "encoder_outputs" in repeated:
            repeated["encoder_outputs"] = BaseModelOutput(last_hidden_state=repeated["encoder_outputs"])
        tokens = {"input_ids" if "encoder_outputs" in repeated else "decoder_input_ids": decoder}
        logits = model(**repeated, **tokens).logits[:, -1].float()
        probs = processors(decoder, logits).softmax(dim=-1).double()
        joint = {p + (token,): joint[p] * float(probs[i, token]) for i, p in enumerate(prefixes)
                 for token in probs[i].nonzero().squeeze(1).tolist()}
    return joint


def _fits(samples, joint, other_joint):
    statistic, threshold = joint_chi_square(samples, joint)
    assert statistic < threshold, (statistic, threshold)
    statistic, threshold = joint_chi_square(samples, other_joint)  # the control: must be told apart
    assert statistic > threshold, (statistic, threshold)


#: Samples per test, and the calls' seed: a text target's batch is refused, so its samples come one call each.
NUM_TEXT, NUM_WHISPER, SEED = 600, 1200, 0


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_text_target_samples_follow_its_joint(family):
    """N = 600 batch-1 calls (seeds 0..599), gamma 2, a perturbed copy as drafter; threshold: chi-square 0.999;
    control: the drafter's joint."""
    target = tiny_seq2seq.text(family)
    drafter = tiny_models.perturbed(target, scale=0.3)
    sources, _ = tiny_seq2seq.sources(1, seed=7, min_len=6, max_len=6)
    start = target.generation_config.decoder_start_token_id
    rows = []
    for seed in range(SEED, SEED + NUM_TEXT):
        out = target.generate(
            input_ids=sources[:1], do_sample=True, temperature=TEMPERATURE, top_k=TOP_K, max_new_tokens=NUM_TOKENS,
            drafter=drafter, gamma=2, generator=torch.Generator().manual_seed(seed),
        )
        rows.append(out[0, 1:])
    samples = torch.stack(rows)  # [N, 3]
    _fits(samples, exact_joint(target, {"input_ids": sources[:1]}, [start]),
          exact_joint(drafter, {"input_ids": sources[:1]}, [start]))


@pytest.mark.parametrize("gamma", [3, TreeDraftPolicy(top_k=2, max_depth=3, max_nodes=6)], ids=["chains", "trees"])
def test_whisper_samples_follow_its_joint(gamma):
    """N = 1200 rows of one batched call (seed 0), chains of 3 or a draft tree (Whisper's decoder takes
    decoder_position_ids), the distil-whisper-shaped reader as drafter; threshold: chi-square 0.999; control: the
    drafter's joint."""
    target = tiny_seq2seq.whisper()
    drafter = tiny_seq2seq.whisper_reader(target, layers=1)
    features = tiny_seq2seq.audio(1, seed=4)
    prefix = [tiny_seq2seq.WHISPER_TOKENS[name] for name in ("sot", "en", "transcribe", "no_timestamps")]
    stats = hf_specdec.SpeculativeStats()
    out = GenerationMixin.generate(  # the loop directly, without Whisper's own generate()'s temperature fallback
        target, features.repeat(NUM_WHISPER, 1, 1), decoder_input_ids=torch.tensor([prefix] * NUM_WHISPER),
        do_sample=True, temperature=TEMPERATURE, top_k=TOP_K, max_new_tokens=NUM_TOKENS, drafter=drafter, gamma=gamma,
        generator=torch.Generator().manual_seed(SEED), stats=stats,
    )
    assert int(stats.tree_size_histogram[:, 1:].sum()) > 0 if isinstance(gamma, TreeDraftPolicy) else stats.drafted.sum()
    samples = out[:, len(prefix):]
    hidden = target.get_encoder()(features).last_hidden_state
    _fits(samples, exact_joint(target, {"input_features": features}, prefix),
          exact_joint(drafter, {"encoder_outputs": hidden}, prefix))
