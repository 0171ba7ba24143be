"""What every step kind shares: the call's buffers, committing tokens with the stopping criteria, and the end of a
call (generate()'s return value).

Contract: `new_buffers` makes a call's running state; `commit` writes a step's accepted tokens and checks the stopping
criteria after every token, as generate() would after each of its steps; `finish` cuts, pads and returns what
generate() returns. `Rows` keeps every row's state while the loop runs on a subset of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput, GenerateEncoderDecoderOutput

from hf_specdec.processing import check_stopping
from hf_specdec.stats import SpeculativeStats


@dataclass
class SpeculativeDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """generate()'s output with `return_dict_in_generate=True`, plus `speculative_stats`."""

    speculative_stats: SpeculativeStats | None = None


@dataclass
class SpeculativeEncoderDecoderOutput(GenerateEncoderDecoderOutput):
    """An encoder-decoder target's generate() output with `return_dict_in_generate=True`, plus `speculative_stats`."""

    speculative_stats: SpeculativeStats | None = None


def _write(sequences: torch.Tensor, lens: torch.Tensor, tokens: torch.Tensor, counts: torch.Tensor) -> None:
    """sequences[b, lens[b] + j] = tokens[b, j] for j < counts[b]."""
    if tokens.shape[1] == 1:  # a plain step's one token per row: fewer tensor ops than indexing the selected rows
        index = lens[:, None]  # [batch, 1]
        sequences.scatter_(1, index, torch.where(counts[:, None] > 0, tokens, sequences.gather(1, index)))
        return
    rows, cols = (torch.arange(tokens.shape[1], device=tokens.device) < counts[:, None]).nonzero(as_tuple=True)
    sequences[rows, lens[rows] + cols] = tokens[rows, cols]


@dataclass
class Rows:
    """The call's rows while the loop runs on a subset of them: buffers over every row (a row's state is written back
    when it leaves the loop and at the end), and `index` [kept], the call's row of each of the loop's rows."""

    sequences: torch.Tensor  # [batch, buffer]
    lens: torch.Tensor  # [batch]
    flagged: torch.Tensor  # [batch] bool
    done_at: torch.Tensor  # [batch]
    plain_steps: torch.Tensor  # [batch]
    index: torch.Tensor  # [kept] long

    @staticmethod
    def store(whole: "Rows | None", *rows: torch.Tensor) -> "Rows":
        """`whole` with the loop's rows (sequences, lens, flagged, done_at, plain_steps) written in; the first time, the
        loop's tensors are every row's and become the buffers."""
        if whole is None:
            return Rows(*rows, index=torch.arange(rows[0].shape[0], device=rows[0].device))
        for buffer, values in zip((whole.sequences, whole.lens, whole.flagged, whole.done_at, whole.plain_steps), rows):
            buffer.index_copy_(0, whole.index, values)
        return whole


def new_buffers(
    input_ids: torch.Tensor,  # [batch, prompt_len] left-padded
    generation_config: GenerationConfig,
    vocab_size: int,
    room: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """A call's running state, chains and trees alike: (sequences [batch, max_length + room] holding the prompts,
    lens [batch], flagged [batch] bool (a stopping criterion fired), done_at [batch] (the length when it fired),
    scores_out and logits_out [batch, max_new, vocab] where generate() returns them, else None). `room`: the most
    tokens a step writes past max_length before the output is cut."""
    batch, prompt_len = input_ids.shape
    device, max_length = input_ids.device, generation_config.max_length
    pad_token = generation_config._pad_token_tensor
    sequences = torch.full((batch, max_length + room), 0 if pad_token is None else int(pad_token), dtype=torch.long,
                           device=device)
    sequences[:, :prompt_len] = input_ids
    lens = torch.full((batch,), prompt_len, dtype=torch.long, device=device)
    flagged = torch.zeros(batch, dtype=torch.bool, device=device)
    done_at = torch.full((batch,), max_length, dtype=torch.long, device=device)
    outputs = []
    for wanted in (generation_config.output_scores, generation_config.output_logits):
        wanted = generation_config.return_dict_in_generate and wanted
        outputs.append(torch.zeros(batch, max_length - prompt_len, vocab_size, device=device) if wanted else None)
    return sequences, lens, flagged, done_at, *outputs


def commit(
    sequences: torch.Tensor,  # [batch, buffer]
    lens: torch.Tensor,  # [batch] each row's length before this step's tokens
    tokens: torch.Tensor,  # [batch, width] this step's tokens per row
    num_new: torch.Tensor,  # [batch] how many of them each row commits
    stopping_criteria: StoppingCriteriaList,
    flagged: torch.Tensor,  # [batch] bool
    done_at: torch.Tensor,  # [batch]
    freeze_finished: bool,
    streamer=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """3. Writes row b's first num_new[b] tokens after its length and checks the stopping criteria after every
    token, not only at the step's end; with an EOS criterion a row that stops keeps its tokens up to there (as
    generate() freezes it). Streams row 0's new tokens. Returns (num_new, flagged, done_at), updated."""
    _write(sequences, lens, tokens, num_new)
    for j in range(tokens.shape[1]):
        rows = (j < num_new) & ~flagged
        if j and not rows.any():  # (every active row commits a first token: no sync to find out)
            break
        length = lens + (j + 1)  # [batch] each row's length with its token j
        done = check_stopping(stopping_criteria, sequences, length, rows)
        done_at = torch.where(done, length, done_at)
        flagged = flagged | done
        if freeze_finished:
            num_new = torch.where(done, j + 1, num_new)
    if streamer is not None and int(num_new[0]) > 0:
        streamer.put(sequences[0, lens[0] : lens[0] + num_new[0]].cpu())
    return num_new, flagged, done_at


def finish(
    sequences: torch.Tensor,  # [batch, buffer]
    lens: torch.Tensor,  # [batch] each row's length
    flagged: torch.Tensor,  # [batch] bool, a stopping criterion fired
    done_at: torch.Tensor,  # [batch] the length at which it fired
    prompt_len: int,
    pad_token: torch.Tensor | None,
    scores_out: torch.Tensor | None,  # [batch, max_new, vocab] with output_scores
    logits_out: torch.Tensor | None,  # [batch, max_new, vocab] with output_logits
    generation_config: GenerationConfig,
    step_stats: SpeculativeStats,
    stats: SpeculativeStats | None,
    target_forwards: int,
    drafter_forwards: int,
    streamer=None,
) -> torch.LongTensor | SpeculativeDecoderOnlyOutput:
    """5. The end of a call, chains and trees alike: the streamer closed, the stats counted (and merged into the
    caller's), every row cut to the longest and padded past its own end, and generate()'s return value."""
    if streamer is not None:
        streamer.end()
    step_stats.target_forwards = target_forwards
    step_stats.drafter_forwards = drafter_forwards
    if stats is not None:
        stats.merge(step_stats)

    out_len = int(torch.where(flagged, done_at, lens).max())
    sequences = sequences[:, :out_len]
    if pad_token is not None:
        beyond = torch.arange(out_len, device=sequences.device)[None, :] >= lens[:, None]
        sequences = sequences.masked_fill(beyond, int(pad_token))
    if not generation_config.return_dict_in_generate:
        return sequences
    num_steps = out_len - prompt_len
    return SpeculativeDecoderOnlyOutput(
        sequences=sequences,
        scores=tuple(scores_out[:, t] for t in range(num_steps)) if scores_out is not None else None,
        logits=tuple(logits_out[:, t] for t in range(num_steps)) if logits_out is not None else None,
        speculative_stats=step_stats,
    )
