"""generate()'s processors on rows of ragged length: each row processed as plain generate() would at its
length, in as few calls as that allows."""

import torch
from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper
from transformers import TopKLogitsWarper, TopPLogitsWarper

from hf_specdec.processing import process_scores


class Counting(LogitsProcessorList):
    calls = 0

    def __call__(self, input_ids, scores, **kwargs):
        type(self).calls += 1
        return super().__call__(input_ids, scores, **kwargs)


def _ragged():
    generator = torch.Generator().manual_seed(0)
    sequences = torch.randint(0, 50, (3, 12), generator=generator)
    lengths = torch.tensor([7, 9, 9])
    scores = torch.randn(3, 50, generator=generator)
    return sequences, lengths, scores


def _one_row_at_a_time(processors, sequences, lengths, scores, rows):
    out = torch.zeros_like(scores)
    for b in rows.nonzero().squeeze(1).tolist():
        out[b] = processors(sequences[b : b + 1, : int(lengths[b])], scores[b : b + 1].clone())[0]
    return out


def test_score_only_processors_take_ragged_rows_in_one_call():
    sequences, lengths, scores = _ragged()
    rows = torch.tensor([True, True, False])
    processors = Counting([TemperatureLogitsWarper(0.7), TopKLogitsWarper(10), TopPLogitsWarper(0.9)])
    Counting.calls = 0
    out = process_scores(processors, sequences, lengths, scores, rows)
    assert Counting.calls == 1
    assert torch.equal(out, _one_row_at_a_time(processors, sequences, lengths, scores, rows))
    assert torch.equal(out[2], torch.zeros(50))  # unselected rows come back as zeros


def test_processors_that_read_the_tokens_go_length_by_length():
    sequences, lengths, scores = _ragged()
    rows = torch.tensor([True, True, True])
    processors = LogitsProcessorList([TemperatureLogitsWarper(0.7), RepetitionPenaltyLogitsProcessor(1.5)])
    out = process_scores(processors, sequences, lengths, scores, rows)
    # Lengths 7 and 9: each row's penalty sees only its own tokens so far.
    assert torch.equal(out, _one_row_at_a_time(processors, sequences, lengths, scores, rows))
    # Negative control: all rows processed at the longest length penalize tokens row 0 has not produced yet.
    wrong = processors(sequences[:, :9], scores.clone())
    assert not torch.equal(out[0], wrong[0])


def test_max_length_and_eos_criteria_check_ragged_rows_in_one_pass_as_length_by_length():
    from transformers import EosTokenCriteria, MaxLengthCriteria, StoppingCriteria, StoppingCriteriaList

    from hf_specdec import processing

    gen = torch.Generator().manual_seed(3)
    sequences = torch.randint(0, 20, (6, 14), generator=gen)
    lengths = torch.tensor([9, 14, 11, 9, 12, 13])
    sequences[0, 8] = 7  # row 0 ends with EOS 7; row 1 reaches max_length 14; row 3 has EOS before its end only
    sequences[3, 5] = 7
    sequences[3, 8] = 2
    rows = torch.tensor([True, True, True, True, False, True])
    criteria = StoppingCriteriaList([MaxLengthCriteria(max_length=14), EosTokenCriteria(eos_token_id=[7, 19])])
    calls = []

    class Counting(StoppingCriteria):  # a criterion of another class: length by length, as before
        def __call__(self, input_ids, scores, **kwargs):
            calls.append(input_ids.shape[1])
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    expected = torch.zeros(6, dtype=torch.bool)
    for b in range(6):  # the oracle: each selected row alone, at its own length
        if rows[b]:
            expected[b] = bool(criteria(sequences[b : b + 1, : lengths[b]], None)[0])
    assert expected.tolist() == [True, True, bool(sequences[2, 10] in (7, 19)), False, False, bool(sequences[5, 12] in (7, 19))]
    assert torch.equal(processing.check_stopping(criteria, sequences, lengths, rows), expected)
    mixed = StoppingCriteriaList([*criteria, Counting()])
    assert torch.equal(processing.check_stopping(mixed, sequences, lengths, rows), expected)
    assert sorted(calls) == [9, 11, 13, 14]  # one call per distinct selected length


def test_min_length_processors_act_without_their_vocabulary_wide_isin(monkeypatch):
    from transformers import MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor

    sequences, lengths, scores = _ragged()  # lengths 7, 9, 9
    rows = torch.tensor([True, True, True])
    eos = [3, 17, 999]  # 999 lies outside the 50 scores: it matches nothing, as in transformers' isin
    # Each masks EOS below length 9 (9 tokens; 5 of prompt + 4 new), alone and together.
    alone = [[MinLengthLogitsProcessor(9, eos)], [MinNewTokensLengthLogitsProcessor(5, 4, eos)]]
    processors = LogitsProcessorList([*alone[0], *alone[1], TemperatureLogitsWarper(0.7)])
    seen = []  # the lengths each processor was called at

    def spied(original):
        def call(self, input_ids, scores):
            seen.append(input_ids.shape[1])
            return original(self, input_ids, scores)
        return call

    for cls in (MinLengthLogitsProcessor, MinNewTokensLengthLogitsProcessor, TemperatureLogitsWarper):
        monkeypatch.setattr(cls, "__call__", spied(cls.__call__))
    for at in (lengths, lengths + 2, torch.tensor([7, 7, 7]), torch.tensor([10, 10, 10])):
        expected = _one_row_at_a_time(processors, sequences, at, scores, rows)  # the processors' own results
        seen.clear()
        out = process_scores(processors, sequences, at, scores, rows)
        assert torch.equal(out, expected), at
        below = at < 9
        assert (out[below][:, [3, 17]] == float("-inf")).all() and torch.isfinite(out[~below][:, [3, 17]]).all()
        # Only temperature ran: once where the rows share a length or are all past both minimums, else per length.
        assert seen == ([12] if not below.any() and at.unique().numel() > 1 else sorted(set(at.tolist()))), (at, seen)
    for each in alone:
        for at in (lengths, torch.tensor([8, 8, 8])):
            expected = _one_row_at_a_time(LogitsProcessorList(each), sequences, at, scores, rows)
            assert torch.equal(process_scores(LogitsProcessorList(each), sequences, at, scores, rows), expected)
            assert (expected[at < 9][:, 3] == float("-inf")).all()
    # Off a CPU the processors themselves run below their minimums (their isin is one kernel there); past them, none.
    from hf_specdec.processing import _live

    assert list(_live(processors, 8, on_cpu=False)) == list(processors)
    assert list(_live(processors, 9, on_cpu=False)) == [processors[2]]
    # Without temperature, rows of one length past both minimums get their logits back untouched.
    seen.clear()
    out = process_scores(LogitsProcessorList(processors[:2]), sequences, torch.tensor([10, 10, 10]), scores, rows)
    assert seen == [] and torch.equal(out, scores)


def test_a_subclass_of_a_min_length_processor_is_always_called():
    from transformers import MinLengthLogitsProcessor

    class AlwaysMasks(MinLengthLogitsProcessor):  # reads more than the length: not left out past the minimum
        def __call__(self, input_ids, scores):
            return scores.index_fill(1, self.eos_token_id, float("-inf"))

    sequences, lengths, scores = _ragged()
    rows = torch.tensor([True, True, True])
    for processors in ([AlwaysMasks(2, 3)], [AlwaysMasks(2, 3), TemperatureLogitsWarper(0.7)]):
        processors = LogitsProcessorList(processors)
        for at in (lengths, torch.tensor([9, 9, 9])):
            out = process_scores(processors, sequences, at, scores, rows)
            assert torch.equal(out, _one_row_at_a_time(processors, sequences, at, scores, rows))
            assert (out[:, 3] == float("-inf")).all()
