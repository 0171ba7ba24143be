"""The speculative decoding loop: draft -> verify -> commit -> roll back, for a whole batch at once.

Contract: `speculative_decode` is called by generate() as its `custom_generate`, after generate()
prepared the generation config, logits processors and stopping criteria; it returns what generate()
returns, and each row's tokens follow the target's own (processed) distribution exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

from hf_specdec import calibration, compat
from hf_specdec.cache import CachedModel, check_starts_empty
from hf_specdec.drafters.base import Draft, DraftContext, Drafter
from hf_specdec.policy import CostAwareDraftPolicy, DraftPolicy, TreeDraftPolicy
from hf_specdec.tree_schedule import TreeSchedule
from hf_specdec.processing import check_stopping, process_scores, rows_of, rows_selectable
from hf_specdec.stats import SpeculativeStats
from hf_specdec.verify import verify_greedy, verify_stochastic


@dataclass
class SpeculativeDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """generate()'s output with `return_dict_in_generate=True`, plus `speculative_stats`."""

    speculative_stats: SpeculativeStats | None = None


def _write(sequences: torch.Tensor, lens: torch.Tensor, tokens: torch.Tensor, counts: torch.Tensor) -> None:
    """sequences[b, lens[b] + j] = tokens[b, j] for j < counts[b]."""
    if tokens.shape[1] == 1:  # a plain step's one token per row: fewer tensor ops than indexing the selected rows
        index = lens[:, None]  # [batch, 1]
        sequences.scatter_(1, index, torch.where(counts[:, None] > 0, tokens, sequences.gather(1, index)))
        return
    rows, cols = (torch.arange(tokens.shape[1], device=tokens.device) < counts[:, None]).nonzero(as_tuple=True)
    sequences[rows, lens[rows] + cols] = tokens[rows, cols]


def speculative_decode(
    model: PreTrainedModel,
    input_ids: torch.LongTensor,  # [batch, prompt_len] left-padded
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    synced_gpus: bool = False,
    streamer=None,
    *,
    drafter: Drafter,
    gamma: int | str | DraftPolicy | None = None,
    generator: torch.Generator | None = None,
    stats: SpeculativeStats | None = None,
    tokenizer=None,
    drafter_tokenizer=None,
    **model_kwargs,
) -> torch.LongTensor | SpeculativeDecoderOnlyOutput:
    """Speculative decoding of `model` (the target) with `drafter`, up to `gamma` drafts per step.

    Args:
        input_ids: [batch, prompt_len] prompts, left-padded (`attention_mask` in `model_kwargs`).
        logits_processor, stopping_criteria, generation_config: as prepared by generate().
        drafter: proposes tokens (see `hf_specdec.drafters`).
        gamma: drafts per step: an int, "auto", a DraftPolicy (per-row lengths, confidence stop), or None
            for the cost-aware default (`CostAwareDraftPolicy`).
        generator: explicit RNG for sampling; the global RNG when None.
        stats: a SpeculativeStats to append this call's rows to.
        tokenizer, drafter_tokenizer: used only for the compatibility check.

    Returns:
        [batch, length] token ids, or a SpeculativeDecoderOnlyOutput with `return_dict_in_generate`.
    """
    # 0. Checks, before any forward pass.
    compat.check_generation_config(generation_config, synced_gpus, input_ids.shape[0], streamer)
    compat.check_processors(logits_processor, input_ids.shape[0])
    compat.check_target(model, input_ids.shape[0])
    check_starts_empty(model, model_kwargs.get(compat.CACHE_KWARG))  # before the default's calibration runs the target
    compat.check_model_inputs(model_kwargs, input_ids)
    vocab_size = drafter.check_compatible(model, generation_config, tokenizer, drafter_tokenizer)
    policy = compat.check_gamma(gamma)
    max_gamma = policy.max_gamma
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    pad_lens = compat.left_padding(model_kwargs.get("attention_mask"), input_ids)  # [batch]
    max_new = generation_config.max_length - prompt_len
    schedule = _schedule(model, drafter, policy, batch, device, max_new, generation_config, vocab_size, model_kwargs)
    if isinstance(schedule, TreeSchedule):  # draft trees: their own loop, hf_specdec/tree_loop.py
        from hf_specdec.tree_loop import tree_decode

        return tree_decode(
            model, input_ids, logits_processor, stopping_criteria, generation_config, streamer, drafter=drafter,
            schedule=schedule, vocab_size=vocab_size, pad_lens=pad_lens, generator=generator, stats=stats,
            cache=model_kwargs.get(compat.CACHE_KWARG),
        )
    max_length = generation_config.max_length
    do_sample = generation_config.do_sample
    pad_token = generation_config._pad_token_tensor
    # Like _sample: rows that hit EOS are frozen and padded; without an EOS criterion rows run on
    # until every row has stopped, and all end at the same length.
    freeze_finished = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
    sequences, lens, flagged, done_at, scores_out, logits_out = new_buffers(
        input_ids, generation_config, vocab_size, room=max_gamma + 1
    )

    masks = calibration.prefers_position_masks(model, batch, device)  # measured once per setting
    target = CachedModel(model, batch, device, cache=model_kwargs.get(compat.CACHE_KWARG), position_masks=masks)
    session = drafter.start(model, batch, device)  # this call's drafting state; `drafter` stays shared
    feature_layers = drafter.feature_layers(model)  # () unless the drafter reads the target's hidden states
    drafter_forwards = 0  # of a session let go before the call's end
    step_stats = SpeculativeStats.empty(batch, max_gamma)

    def process(scores: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        return process_scores(logits_processor, sequences, lengths, scores, rows)

    # A plain step (the policy drafts nothing, as the default does once drafting does not pay) should cost what
    # plain generate()'s step costs: it skips the draft's bookkeeping and is counted in `plain_steps` [batch].
    no_draft = Draft.none(batch, device, vocab_size)
    plain_steps = torch.zeros(batch, dtype=torch.long, device=device)  # [batch] plain steps each row took
    first_token = pad_lens + 1  # [batch] lens - first_token: a row's tokens before its last one
    # Rows that are done may leave the batch at a step that drafts nothing, where every per-row state can follow them
    # (the target's cache; processors and criteria without state of their own; no drafter): see `_rows_to_keep`.
    droppable = freeze_finished and batch > 1 and target.rows_selectable and streamer is None and rows_selectable(
        logits_processor, stopping_criteria
    )
    whole = None  # every row's state for generate()'s output, once the loop runs on a subset of the rows
    num_left = batch  # active rows when the batch last considered dropping rows
    # The first forward feeds each row's prompt; after it, each step leaves every row at most its last token
    # uncached, so a step's chunk is its verified width (the target need not sync to find it).
    caught_up = False
    while True:
        if freeze_finished:  # a flagged row is done; once every row is, none is active
            active = (lens < max_length) & ~flagged  # [batch]
        else:  # every row runs until the last one stops, as generate() returns them
            active = lens < torch.where(flagged.all(), done_at.max(), max_length)
        left = int(active.sum())  # (the step's one host sync: on a GPU each waits for the device)
        if not left:
            break
        if session is not None and schedule.drafting_over:
            # The schedule will draft nothing more in this call (the default, where drafting does not pay and no probe
            # would come before the end): the drafter's session goes, and with it its catch-up and the target's
            # features, so the remaining plain steps cost what plain generate()'s do.
            drafter_forwards, session, feature_layers = session.num_forwards, None, ()
        if droppable and 2 * left <= len(active) and (session is not None or left < num_left):
            # 0. Rows that are done stop costing the target's forwards (generate() keeps computing them) where a
            # forward over fewer rows measured cheaper; `whole` keeps every row for the output. While the default's
            # drafter is there, only where that beats what its drafts are expected to give (under 1 / speedup_to_beat
            # of the whole batch's forward), and the drafter goes with the rows (its state is per row).
            speedup = 1.0 if session is None else schedule.speedup_to_beat(active)  # None: a caller's policy
            keep = None
            if speedup is not None:
                num_left = left
                bar = min(DROP_ROWS_BELOW, 1 / speedup)
                keep = _rows_to_keep(model, device, target.position_masks, active, left, bar)
            if keep is not None:
                if session is not None:
                    drafter_forwards, session, feature_layers = session.num_forwards, None, ()
                whole = _Rows.store(whole, sequences, lens, flagged, done_at, plain_steps)
                whole.index = whole.index[keep]
                sequences, lens, flagged, done_at, plain_steps, pad_lens, first_token, active = (
                    t[keep] for t in (sequences, lens, flagged, done_at, plain_steps, pad_lens, first_token, active)
                )
                target.select_rows(keep)
                logits_processor = rows_of(logits_processor, keep, len(no_draft.num_drafted))
                no_draft = Draft.none(len(keep), device, vocab_size)

        # 1. Draft: never past max_length (the target's token after the drafts comes for free).
        draft, num_drafted, width = no_draft, no_draft.num_drafted, 0
        if session is not None and bool(schedule.lengths.any()):
            room = (max_length - lens - 1).clamp_min(0)  # [batch]
            num_draft = torch.where(active, torch.minimum(schedule.lengths, room), 0)  # [batch], 0 for inactive rows
            if int(num_draft.max()) > 0:
                ctx = DraftContext(
                    sequences, pad_lens, lens, active, vocab_size, do_sample, generator, process, policy.min_confidence
                )
                draft = session.propose(ctx, num_draft)
                num_drafted = torch.minimum(draft.num_drafted, num_draft)  # [batch]
                # Verify only as many columns as some row drafted: a drafter may return a wider tensor (prompt
                # lookup finding no match), and every extra column would cost the target a masked token.
                width = int(num_drafted.max())
                draft = draft.first(width)  # tokens [batch, width]
                if width > 0:
                    _write(sequences, lens, draft.tokens, num_drafted)

        # 2. Verify: one target forward over each row's unseen tokens and its drafts.
        ends, anchors = (lens + num_drafted, lens + width) if width else (lens, lens)  # inactive rows drafted nothing
        target_logits, features = target.forward(
            sequences, pad_lens, ends, width + 1, anchors=anchors, feature_layers=feature_layers,
            width=width + 1 if caught_up else None,
        )
        caught_up = True
        if target_logits.shape[-1] != vocab_size:
            target_logits = target_logits[..., :vocab_size]  # [batch, width + 1, vocab]
        # Column j scores the token after a row's j-th draft (rows that drafted fewer sit it out).
        processed = [process(target_logits[:, 0], lens, active if left < len(active) else None)]
        processed += [process(target_logits[:, j], lens + j, active & (j <= num_drafted)) for j in range(1, width + 1)]
        target_scores = torch.stack(processed, dim=1) if width else processed[0][:, None]  # [batch, width + 1, vocab]
        if do_sample:
            committed, num_accepted = verify_stochastic(
                draft.tokens, draft.draft_probs(vocab_size), target_scores.softmax(dim=-1), generator, num_drafted
            )
        else:
            committed, num_accepted = verify_greedy(draft.tokens, target_scores, num_drafted)
        if session is not None:  # (without a drafter the schedule is never read again; its rows are the call's)
            schedule.update(active, num_drafted, num_accepted)

        # 3. Commit, checking the stopping criteria after every token, not only at the step's end.
        num_new = torch.where(active, num_accepted + 1, 0) if width else active.long()  # [batch]
        num_new, flagged, done_at = commit(
            sequences, lens, committed, num_new, stopping_criteria, flagged, done_at, freeze_finished, streamer
        )
        for out, values in ((scores_out, target_scores), (logits_out, target_logits)):
            if out is not None:
                rows, cols = (torch.arange(width + 1, device=device) < num_new[:, None]).nonzero(as_tuple=True)
                at = rows if whole is None else whole.index[rows]  # the call's rows
                out[at, lens[rows] - prompt_len + cols] = values[rows, cols]
        lens = lens + num_new

        # 4. Roll back both caches to the committed tokens; the last one is fed again next step. A plain step fed
        # committed tokens only: the target's cache keeps them all (unless windows let it forget old ones).
        num_valid = lens - first_token  # [batch]
        if width or target.layout.bounded:
            target.rollback(torch.minimum(target.num_cached, num_valid), slack=max_gamma + 1)
        if session is not None:
            session.observe(num_valid, features)
        if width:
            step_stats.record_step(active, num_drafted, num_accepted, num_new)
        else:  # one token per active row (a stopping criterion cuts nothing from one token)
            plain_steps += active

    if whole is not None:  # every row again, for the output
        whole = _Rows.store(whole, sequences, lens, flagged, done_at, plain_steps)
        sequences, lens, flagged, done_at, plain_steps = (
            whole.sequences, whole.lens, whole.flagged, whole.done_at, whole.plain_steps
        )
    step_stats.record_plain_steps(plain_steps)
    return finish(
        sequences, lens, flagged, done_at, prompt_len, pad_token, scores_out, logits_out, generation_config,
        step_stats, stats, target.num_forwards, drafter_forwards if session is None else session.num_forwards, streamer,
    )


#: A batch drops rows that are done only where a plain forward over the rows it keeps measured at most this share of one
#: over all of its rows (`calibration.plain_forward_ms`).
DROP_ROWS_BELOW = 0.9


def _rows_to_keep(
    model, device: torch.device, position_masks: bool, active: torch.Tensor, left: int, bar: float = DROP_ROWS_BELOW
) -> torch.Tensor | None:
    """The rows ([kept] long, ascending) a batch whose `active` rows ([rows] bool) are left should keep, or None to
    keep them all: the active rows, padded with done ones up to a power of two when that forward is cheaper, if at most
    half the rows are active and that forward measured under `bar` of the whole batch's (a forward's cost need not grow
    with its rows, e.g. fp32 on Zen 4: 115 ms at 3 rows, 87 at 4, 108 at 8). `left` is the active rows' count, which
    the loop has (counting them again would read the device again)."""
    rows = active.shape[0]
    if not 0 < 2 * left <= rows:
        return None
    full = calibration.plain_forward_ms(model, rows, device, position_masks)
    sizes = sorted({left, 1 << (left - 1).bit_length()})  # e.g. 3 rows left: 3 or 4
    costs = {size: calibration.plain_forward_ms(model, size, device, position_masks) for size in sizes if size < rows}
    size = min(costs, key=costs.get, default=None)
    if size is None or costs[size] > bar * full:
        return None
    done = (~active).nonzero().squeeze(1)[: size - left]  # done rows that pad the batch to `size`
    return torch.cat([active.nonzero().squeeze(1), done]).sort().values


@dataclass
class _Rows:
    """The call's rows while the loop runs on a subset of them: buffers over every row (a row's state is written back
    when it leaves the loop and at the end), and `index` [kept], the call's row of each of the loop's rows."""

    sequences: torch.Tensor  # [batch, buffer]
    lens: torch.Tensor  # [batch]
    flagged: torch.Tensor  # [batch] bool
    done_at: torch.Tensor  # [batch]
    plain_steps: torch.Tensor  # [batch]
    index: torch.Tensor  # [kept] long

    @staticmethod
    def store(whole: "_Rows | None", *rows: torch.Tensor) -> "_Rows":
        """`whole` with the loop's rows (sequences, lens, flagged, done_at, plain_steps) written in; the first time, the
        loop's tensors are every row's and become the buffers."""
        if whole is None:
            return _Rows(*rows, index=torch.arange(rows[0].shape[0], device=rows[0].device))
        for buffer, values in zip((whole.sequences, whole.lens, whole.flagged, whole.done_at, whole.plain_steps), rows):
            buffer.index_copy_(0, whole.index, values)
        return whole


def _schedule(model, drafter: Drafter, policy: DraftPolicy, batch: int, device: torch.device, max_new: int,
              generation_config: GenerationConfig, vocab_size: int, model_kwargs: dict):
    """This call's schedule (what it learns about its drafts): a TreeSchedule for the tree loop (a TreeDraftPolicy, or
    the default when it finds trees pay here), else the chain schedule of draft lengths."""
    if isinstance(policy, TreeDraftPolicy):
        return policy.tree_schedule()
    trees = {}  # whether trees can run, for the default only (a user's own policy's start need not take it)
    if isinstance(policy, CostAwareDraftPolicy) and policy.trees:
        from hf_specdec.tree_loop import can_draft_trees

        # Asked only where the costs leave trees a chance: the check builds a CachedModel and a drafter session.
        trees["trees_possible"] = lambda: can_draft_trees(model, drafter, batch, device, model_kwargs.get(compat.CACHE_KWARG))
    return policy.start(
        model, drafter, batch, device, max_new, generation_config.do_sample, vocab_size,
        generation_config=generation_config, **trees,
    )


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
