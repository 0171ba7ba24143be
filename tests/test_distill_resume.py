"""Resumable feature-head training: a run interrupted half way and resumed from its checkpoint
ends with the same weights, optimizer state and losses, bit for bit (CPU, fp32), as a run that never
stopped; the checkpoint loads with weights_only=True; other data or settings are refused on resume."""

from __future__ import annotations

import pytest
import torch

import tiny_models
from hf_specdec.distill.data import Record
from hf_specdec.distill.feature_head import batch_indices, build_feature_head, train_feature_head
from hf_specdec.distill.features import FeatureStore, extract_features

STEPS = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    target = tiny_models.llama(seed=0, layers=4)
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, tiny_models.VOCAB, (5, 6), generator=generator)
    out = target.generate(prompts, do_sample=False, max_new_tokens=20, pad_token_id=0)
    records = [Record(row.tolist(), 6, True) for row in out]  # 5 records, batch 2: epochs wrap mid-batch
    directory = tmp_path_factory.mktemp("features")
    extract_features(target, records, directory, layers=[1, 2, 4], progress=False)
    return target, records, FeatureStore(directory)


def train(setup, checkpoint, stop_at=None, resume=False, **overrides):
    torch.set_num_threads(1)
    target, records, store = setup
    head = build_feature_head(target, "eagle3", draft_vocab=list(range(2, tiny_models.VOCAB)))

    def on_log(step, losses, tokens_seen, minutes):
        curve["points"].append([step, tokens_seen])
        curve["minutes"].append(minutes)
        if step == stop_at:
            raise KeyboardInterrupt  # the machine restarts here

    curve = {"points": [], "minutes": []}
    args = dict(steps=STEPS, batch_size=2, lr=3e-3, warmup=2, progress=False, log_every=1, on_log=on_log,
                checkpoint=str(checkpoint), checkpoint_every=1, resume=resume, extra_state=curve)
    args.update(overrides)
    losses = train_feature_head(head, target, records, store, **args)
    return head, losses, curve


def test_resumed_training_equals_uninterrupted_training_bit_for_bit(setup, tmp_path):
    whole, whole_losses, whole_curve = train(setup, tmp_path / "whole.pt")
    with pytest.raises(KeyboardInterrupt):
        train(setup, tmp_path / "part.pt", stop_at=STEPS // 2 + 1)  # checkpoint of step STEPS // 2 is on disk
    saved = torch.load(tmp_path / "part.pt", weights_only=True)
    assert saved["step"] == STEPS // 2
    resumed, resumed_losses, resumed_curve = train(setup, tmp_path / "part.pt", resume=True)

    assert resumed_losses == whole_losses and len(whole_losses) == STEPS
    for name, tensor in whole.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], tensor), name
    whole_opt = torch.load(tmp_path / "whole.pt", weights_only=True)["optimizer"]["state"]
    resumed_opt = torch.load(tmp_path / "part.pt", weights_only=True)["optimizer"]["state"]
    for index, state in whole_opt.items():
        for key, value in state.items():
            assert torch.equal(resumed_opt[index][key], value), (index, key)
    assert resumed_curve["points"] == whole_curve["points"]  # the learning curve carries across the restart
    # and so does the training clock: the resumed run's times continue the interrupted one's
    assert resumed_curve["minutes"] == sorted(resumed_curve["minutes"]) and len(resumed_curve["minutes"]) == STEPS
    assert [tokens for _, tokens in whole_curve["points"]] == sorted({t for _, t in whole_curve["points"]})

    # Resuming the finished run again trains nothing and changes nothing.
    again, again_losses, _ = train(setup, tmp_path / "part.pt", resume=True)
    assert again_losses == whole_losses and torch.equal(again.fc.weight, whole.fc.weight)
    # Negative controls: the second half did move the weights, and a resume that lost the optimizer's moments
    # ends elsewhere, so the equality above needs everything restored.
    assert not torch.equal(saved["head"]["fc.weight"], whole.fc.weight)
    saved["optimizer"]["state"] = {}
    torch.save(saved, tmp_path / "amnesic.pt")
    amnesic, _, _ = train(setup, tmp_path / "amnesic.pt", resume=True)
    assert not torch.equal(amnesic.fc.weight, whole.fc.weight)


def test_resuming_with_other_settings_or_data_is_refused(setup, tmp_path):
    train(setup, tmp_path / "run.pt", steps=2)
    with pytest.raises(ValueError, match="batch_size"):
        train(setup, tmp_path / "run.pt", resume=True, steps=2, batch_size=3)
    target, records, store = setup
    with pytest.raises(ValueError, match="records"):
        train((target, records[:4], store), tmp_path / "run.pt", resume=True, steps=2)


def test_every_record_is_read_once_per_epoch_in_a_seeded_order():
    reads = [i for step in range(10) for i in batch_indices(7, 3, step, seed=5)]  # 30 reads, epochs of 7
    for epoch in range(4):
        assert sorted(reads[7 * epoch : 7 * epoch + 7]) == list(range(7))
    assert reads[:7] != reads[7:14]  # a new order each epoch
    assert batch_indices(7, 3, 4, seed=5) == reads[12:15] and batch_indices(7, 3, 4, seed=6) != reads[12:15]


def test_the_store_reads_records_from_disk_lazily_as_extracted(setup):
    from hf_specdec.distill.features import features_in_memory

    target, records, store = setup
    fresh = FeatureStore(store.directory)
    assert fresh.tensors == {} and len(fresh) == len(records)  # nothing read until asked for
    in_memory = features_in_memory(target, records, [1, 2, 4])
    for record in records:
        assert torch.equal(fresh[record], in_memory[record].half())


def test_live_features_serve_what_the_store_holds(setup):
    from hf_specdec.distill.features import LiveFeatures

    target, records, store = setup
    live = LiveFeatures(target, store.layers)
    for record in records:
        assert record in live and live[record].dtype == torch.float16
        # The records are all 26 tokens, so the store's batched forward had no padding: the same sums.
        assert torch.equal(live[record], store[record])


def test_a_store_records_the_dtype_its_states_were_computed_in_and_grows_only_in_it(setup, tmp_path):
    import copy
    import json

    from hf_specdec.distill.features import MANIFEST

    target, records, store = setup
    bf16 = copy.deepcopy(target).to(torch.bfloat16)
    directory = tmp_path / "bf16"
    extract_features(bf16, records[:3], directory, layers=[1, 2, 4], progress=False)
    assert json.loads((directory / MANIFEST).read_text())["dtype"] == "bfloat16"
    stored = FeatureStore(directory)
    for record in records[:3]:  # bfloat16's states: near the float32 store's, not equal to them
        error = (stored[record].float() - store[record].float()).norm() / store[record].float().norm()
        assert 0 < error < 0.05
    with pytest.raises(ValueError, match="bfloat16.*float32"):
        extract_features(target, records, directory, layers=[1, 2, 4], progress=False)  # would mix precisions
    extract_features(bf16, records, directory, layers=[1, 2, 4], progress=False)  # same dtype: grows
    assert len(FeatureStore(directory)) == len(records)
    assert json.loads((store.directory / MANIFEST).read_text())["dtype"] == "float32"
    legacy = json.loads((directory / MANIFEST).read_text())
    del legacy["dtype"]  # written before the key existed: float32 states
    (directory / MANIFEST).write_text(json.dumps(legacy))
    extract_features(bf16, records, directory, layers=[1, 2, 4], progress=False)  # nothing to add: no refusal
    more = Record(records[0].ids + [5], records[0].prompt_len, True)
    with pytest.raises(ValueError, match="float32.*bfloat16"):
        extract_features(bf16, [more], directory, layers=[1, 2, 4], progress=False)


def test_the_rejection_term_adds_the_rate_sampling_would_reject_the_heads_drafts(setup, tmp_path):
    """With the weights frozen (lr 0), each step's loss with `tv_weight` w exceeds the KL loss by w times
    Σ_k 0.8^k · mean(1 − Σ_x min(p, q)) over that step's batch, computed here from the head's and the target's
    distributions (the module's batch helpers, an independent sum)."""
    import torch.nn.functional as F

    from hf_specdec.distill.feature_head import _draft_head_weight, _scores, _step_targets, make_batch, unrolled_states

    target, records, store = setup
    kl = train(setup, tmp_path / "kl.pt", steps=3, lr=0.0)[1]
    with_tv = train(setup, tmp_path / "tv.pt", steps=3, lr=0.0, tv_weight=0.5)[1]
    head = build_feature_head(target, "eagle3", draft_vocab=list(range(2, tiny_models.VOCAB)))
    embed = target.get_input_embeddings().weight.detach().float()
    label_weight = _draft_head_weight(head, target)
    for step in range(3):
        chosen = [records[i] for i in batch_indices(len(records), 2, step, seed=0)]
        batch = make_batch(chosen, store, head.feature_layers_for(4), 4)
        expected = 0.0
        with torch.no_grad():
            for k, state in enumerate(unrolled_states(head, lambda ids: F.embedding(ids, embed), batch, 3)):
                target_log_probs, mask = _step_targets(head, label_weight, batch, k)
                p = target_log_probs[mask].exp()
                q = _scores(head, state[mask], label_weight).softmax(-1)
                expected += 0.8**k * float((1 - torch.minimum(p, q).sum(-1)).mean())
        assert 0.05 < expected < 2.44  # a random head is mostly rejected, never always
        assert with_tv[step] - kl[step] == pytest.approx(0.5 * expected, rel=1e-4)
    with pytest.raises(ValueError, match="tv_weight"):  # a run resumes only with its own objective
        train(setup, tmp_path / "tv.pt", steps=3, lr=0.0, resume=True)
