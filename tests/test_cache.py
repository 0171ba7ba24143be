"""CachedModel: ragged feeding, rollback and compaction give the logits of a fresh forward."""

import pytest
import torch

import tiny_models
from hf_specdec.cache import CachedModel


def fresh_logits(model, tokens: list[int]) -> torch.Tensor:
    """Logits of the last position of one unpadded sequence, no cache."""
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1].float()


@pytest.mark.parametrize("position_masks", [False, True])
def test_rollback_then_next_logits_equal_a_fresh_forward(target, position_masks):
    # With a 2D mask (transformers builds the 4D one) and with 4D masks built in positions (a speed choice in
    # half precision on a CPU, cache.prefers_position_masks): the same logits, holes and padding included.
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, 96, (n,), generator=gen).tolist() for n in (9, 5, 7)]
    width = 40
    sequences = torch.zeros(3, width, dtype=torch.long)
    pad = torch.tensor([0, 4, 2])
    for b, row in enumerate(rows):
        sequences[b, pad[b] : pad[b] + len(row)] = torch.tensor(row)
    lens = pad + torch.tensor([len(r) for r in rows])
    state = CachedModel(target, 3, torch.device("cpu"), position_masks=position_masks)
    assert state.position_masks == position_masks
    state.forward(sequences, pad, lens, 1)

    for step in range(6):
        # Feed 4 speculative tokens per row, then keep a different number per row (0..4).
        extra = torch.randint(3, 96, (3, 4), generator=gen)
        for b in range(3):
            sequences[b, lens[b] : lens[b] + 4] = extra[b]
        state.forward(sequences, pad, lens + 4, 5, anchors=lens + 4)
        kept = torch.tensor([step % 5, 4 - step % 5, 2])
        lens = lens + kept
        state.rollback(torch.minimum(state.num_cached, lens - pad - 1), slack=5)
        assert state.num_cached.tolist() == (lens - pad - 1).tolist()
        assert state.valid.shape[1] <= int(state.num_cached.max()) + 5  # bounded: longest row + slack

        logits = state.forward(sequences, pad, lens, 1)[0][:, 0]
        for b in range(3):
            expected = fresh_logits(target, sequences[b, pad[b] : lens[b]].tolist())
            assert torch.allclose(logits[b], expected, atol=1e-4), (step, b)


def test_compaction_moves_valid_columns_right_and_keeps_order(target):
    state = CachedModel(target, 2, torch.device("cpu"))
    sequences = torch.randint(3, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    pad = torch.tensor([0, 3])
    state.forward(sequences, pad, torch.tensor([8, 8]), 1)
    state.rollback(torch.tensor([8, 2]), slack=100)  # row 1 keeps 2 of its 5 tokens: a hole
    assert state.valid.shape[1] == 8
    state.compact()
    assert state.valid.shape[1] == 8 and state.valid[1].tolist() == [False] * 6 + [True] * 2
    logits = state.forward(sequences, pad, torch.tensor([9, 6]), 1)[0][:, 0]
    assert torch.allclose(logits[1], fresh_logits(target, sequences[1, 3:6].tolist()), atol=1e-4)
    assert torch.allclose(logits[0], fresh_logits(target, sequences[0, :9].tolist()), atol=1e-4)


def test_a_prefill_spliced_into_a_running_batch_continues_exactly(target):
    sequences = torch.randint(3, 96, (3, 20), generator=torch.Generator().manual_seed(2))
    pad = torch.zeros(3, dtype=torch.long)
    batch = CachedModel(target, 3, torch.device("cpu"))
    batch.forward(sequences, pad, torch.tensor([7, 5, 9]), 1)
    batch.rollback(torch.tensor([7, 0, 9]), slack=20)  # row 1 finished: its columns go
    # Row 1 restarts with a new prompt prefilled on its own, then joins the batch.
    new_prompt = torch.randint(3, 96, (1, 20), generator=torch.Generator().manual_seed(3))
    scratch = CachedModel(target, 1, torch.device("cpu"))
    scratch.forward(new_prompt, pad[:1], torch.tensor([6]), 1)
    batch.splice(torch.tensor([1]), scratch)
    sequences[1] = new_prompt[0]
    logits = batch.forward(sequences, pad, torch.tensor([8, 7, 10]), 1)[0][:, 0]
    for row, end in enumerate((8, 7, 10)):
        assert torch.allclose(logits[row], fresh_logits(target, sequences[row, :end].tolist()), atol=1e-4), row
