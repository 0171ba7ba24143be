"""generate()'s LogitsProcessorList and StoppingCriteriaList, applied to rows of ragged length.

Contract: a processor or criterion sees, for each row, exactly the `input_ids` that row would have in
plain generate() at that point (left-padded prompt + its tokens so far); rows that are at the same
length are processed in one call, so a batch costs one call per distinct length, and processors that
read only the scores (temperature, top-k, top-p, ...) take the whole batch in one call whatever the
lengths; so do the stopping criteria generate() builds from max_length and eos_token_id.
"""

from __future__ import annotations

import copy
import math

import torch
from transformers import LogitsProcessorList, StoppingCriteriaList
from transformers.generation import logits_process, stopping_criteria

#: transformers' processors that read only the scores, never the tokens so far (exact classes: a subclass
#: may read them): rows of different lengths go through them in one call, as generate() calls them.
CONTEXT_FREE = tuple(
    getattr(logits_process, name)
    for name in ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper",
                 "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper")
    if hasattr(logits_process, name)
)


def _row_verdict(criterion, sequences: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor | None:
    """[batch] bool for criteria whose verdict on a row reads only its length and its last token (exact classes:
    transformers' MaxLengthCriteria and EosTokenCriteria, as generate() builds them), for rows of different
    lengths at once; None for any other criterion."""
    if type(criterion) is stopping_criteria.MaxLengthCriteria:
        return lengths >= criterion.max_length
    if type(criterion) is stopping_criteria.EosTokenCriteria:
        last = sequences.gather(1, (lengths - 1).clamp_min(0)[:, None]).squeeze(1)  # [batch]
        return torch.isin(last, criterion.eos_token_id.to(last.device))
    return None


def _groups(lengths: torch.Tensor, rows: torch.Tensor):
    """Yields (length, row indices) for each distinct length among the selected rows."""
    for length in torch.unique(lengths[rows]).tolist():
        yield length, (rows & (lengths == length)).nonzero().squeeze(1)


def _common_length(lengths: torch.Tensor, rows: torch.Tensor) -> int | None:
    """The length of every row when all rows are selected and equally long (every step of plain
    decoding, and most of a batch's), else None: then the batch goes through in one call, as generate()
    makes it."""
    # One small copy of both (on a GPU each copy waits for the device): this runs for every verified column.
    values, selected = torch.stack([lengths, rows.to(lengths)]).tolist()
    return values[0] if min(values) == max(values) and all(selected) else None


#: generate()'s processors that only enforce a minimum length (EOS masked below it): see `_live`.
MIN_LENGTH = (logits_process.MinLengthLogitsProcessor, logits_process.MinNewTokensLengthLogitsProcessor)


class _MaskEos(logits_process.LogitsProcessor):
    """What a min-length processor does to a row below its minimum: its EOS scores -inf, the others unchanged, the
    same values its `torch.where` over a vocabulary-wide `isin` gives, without that `isin`."""

    def __init__(self, eos_token_id: torch.Tensor):
        self.eos_token_id = eos_token_id

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        eos = self.eos_token_id.to(scores.device).reshape(-1)
        eos = eos[(eos >= 0) & (eos < scores.shape[-1])]  # ids outside the scores match nothing, as in the isin
        return scores.index_fill(-1, eos, -math.inf)


def _live(processors: LogitsProcessorList, length: int, on_cpu: bool) -> LogitsProcessorList:
    """The processors as they act on rows of `length` tokens (the list itself when none is a min-length one):
    generate()'s min-length processors (exact classes) leave the scores unchanged past their minimum, so they are
    left out there, and below it, on a CPU, they become `_MaskEos`. Each of them costs a vocabulary-wide `isin` and
    a copy per call (~0.45 ms for 49k scores on one Zen 4 thread, `_MaskEos` ~0.02 ms), which a speculative step
    would pay per verified column and drafted token. (On a GPU that `isin` is one kernel, and `_MaskEos`'s
    selection of the ids in range would wait for the device.)"""
    if not any(type(processor) in MIN_LENGTH for processor in processors):
        return processors
    live = LogitsProcessorList()
    for processor in processors:
        if type(processor) is logits_process.MinLengthLogitsProcessor:
            below = length < processor.min_length
        elif type(processor) is logits_process.MinNewTokensLengthLogitsProcessor:
            below = length - processor.prompt_length_to_skip < processor.min_new_tokens
        else:
            live.append(processor)
            continue
        if below:
            live.append(_MaskEos(processor.eos_token_id) if on_cpu else processor)
    return live


#: Processor attributes that hold one entry per batch row (transformers 5.x), by processor class. (generate() builds
#: EncoderRepetitionPenaltyLogitsProcessor with each prompt's ids, one row per prompt, which it repeats over a prompt's
#: `num_return_sequences` rows itself.)
PER_ROW_STATE = {
    "RepetitionPenaltyLogitsProcessor": ("prompt_ignore_length",),
    "EncoderRepetitionPenaltyLogitsProcessor": ("encoder_input_ids",),
}


#: transformers' processors (exact classes) whose only per-row state is PER_ROW_STATE's: a batch may drop rows under
#: them (`rows_of`), which it may not under a processor that keeps its own per-row state or identifies rows by index.
ROW_SELECTABLE = CONTEXT_FREE + MIN_LENGTH + tuple(
    getattr(logits_process, name)
    for name in ("RepetitionPenaltyLogitsProcessor", "EncoderRepetitionPenaltyLogitsProcessor",
                 "NoRepeatNGramLogitsProcessor", "NoBadWordsLogitsProcessor", "SequenceBiasLogitsProcessor",
                 "SuppressTokensLogitsProcessor", "SuppressTokensAtBeginLogitsProcessor",
                 "ForcedBOSTokenLogitsProcessor", "ForcedEOSTokenLogitsProcessor", "InfNanRemoveLogitsProcessor",
                 "LogitNormalization")
    if hasattr(logits_process, name)
)

#: generate()'s stopping criteria (exact classes) that keep no per-row state.
STATELESS_CRITERIA = tuple(
    getattr(stopping_criteria, name)
    for name in ("MaxLengthCriteria", "EosTokenCriteria", "MaxTimeCriteria", "StopStringCriteria")
    if hasattr(stopping_criteria, name)
)


def rows_selectable(processors: LogitsProcessorList, criteria: StoppingCriteriaList) -> bool:
    """Whether a batch may drop rows under these processors and criteria (`rows_of` gives the kept rows' processors)."""
    return all(type(processor) in ROW_SELECTABLE for processor in processors) and all(
        type(criterion) in STATELESS_CRITERIA for criterion in criteria
    )


def rows_of(processors: LogitsProcessorList, index: torch.Tensor, batch: int) -> LogitsProcessorList:
    """The processors as seen by the rows `index` of a batch of `batch` rows: per-row state (PER_ROW_STATE, e.g. the
    padding lengths RepetitionPenaltyLogitsProcessor skips) is sliced to those rows, after repeating state kept per
    prompt over its rows (as a processor does itself when called with more rows than it holds)."""
    if index.numel() == batch:
        return processors
    sliced = LogitsProcessorList()
    for processor in processors:
        names = [
            name
            for name in PER_ROW_STATE.get(type(processor).__name__, ())
            if isinstance(getattr(processor, name, None), torch.Tensor)
        ]
        if names:
            processor = copy.copy(processor)
            for name in names:
                value = getattr(processor, name)
                if 0 < value.shape[0] < batch and batch % value.shape[0] == 0:  # per prompt: each row's own
                    value = value.repeat_interleave(batch // value.shape[0], dim=0)
                setattr(processor, name, value[index.to(value.device)])
        sliced.append(processor)
    return sliced


def process_scores(
    processors: LogitsProcessorList,
    sequences: torch.Tensor,  # [batch, buffer] left-padded token buffer
    lengths: torch.Tensor,  # [batch] row b's context is sequences[b, :lengths[b]]
    scores: torch.Tensor,  # [batch, vocab] raw logits for the token after that context
    rows: torch.Tensor | None,  # [batch] bool, rows to process (the others come back as zeros); None: every row
) -> torch.Tensor:
    """Returns the processed scores, [batch, vocab]; unselected rows are 0 (finite, never sampled). A caller that
    knows every row is selected passes `rows=None`: then neither greedy nor processors that read only the scores
    (sampling's temperature, top-k, top-p) need a look at the rows (on a GPU each look waits for the device)."""
    if rows is None:
        if all(type(processor) in CONTEXT_FREE for processor in processors):  # (also: no processors)
            return processors(sequences, scores.clone()) if processors else scores
        rows = torch.ones(scores.shape[0], dtype=torch.bool, device=scores.device)
    if not processors:  # greedy with no processors: the logits themselves (every caller only reads them)
        return scores if bool(rows.all()) else torch.where(rows[:, None], scores, 0.0)
    length = _common_length(lengths, rows)
    if length is not None:  # a copy: processors may write into their scores, the caller keeps the logits
        live = _live(processors, length, scores.device.type == "cpu")
        return live(sequences[:, :length], scores.clone()) if live else scores
    live = processors
    if any(type(processor) in MIN_LENGTH for processor in processors):
        selected = lengths[rows]  # past a minimum at the shortest selected row: past it at every one
        live = _live(processors, int(selected.min()), scores.device.type == "cpu") if selected.numel() else processors
    if all(type(processor) in CONTEXT_FREE for processor in live):  # temperature, top-k, top-p, ...
        return torch.where(rows[:, None], live(sequences, scores.clone()) if live else scores, 0.0)
    out = torch.where(rows[:, None], scores, 0.0)
    for length, index in _groups(lengths, rows):
        live = _live(processors, length, scores.device.type == "cpu")
        if live:  # (rows past every minimum keep their scores, already in `out`)
            out[index] = rows_of(live, index, len(rows))(sequences[index, :length], scores[index])
    return out


def check_stopping(
    criteria: StoppingCriteriaList,
    sequences: torch.Tensor,  # [batch, buffer]
    lengths: torch.Tensor,  # [batch] row b's sequence so far is sequences[b, :lengths[b]]
    rows: torch.Tensor,  # [batch] bool, rows to check
) -> torch.Tensor:
    """[batch] bool: the selected rows whose stopping criteria fire at their current length."""
    verdicts = [_row_verdict(criterion, sequences, lengths) for criterion in criteria]
    if verdicts and all(verdict is not None for verdict in verdicts):
        # Max length and EOS: one pass over the rows, ragged or not, in fewer tensor ops than the criteria's own calls.
        done = verdicts[0]
        for verdict in verdicts[1:]:
            done = done | verdict
        return done.to(rows.device) & rows
    length = _common_length(lengths, rows)
    if length is not None:
        return criteria(sequences[:, :length], None).to(rows.device)
    done = torch.zeros_like(rows)
    for length, index in _groups(lengths, rows):
        done[index] = criteria(sequences[index, :length], None).to(done.device)
    return done
