"""The speculative decoding loop: ask the schedule -> draft and verify (a chain or a tree step) -> commit -> roll back,
for a whole batch at once.

Contract: `speculative_decode` is called by generate() as its `custom_generate`, after generate() prepared the
generation config, logits processors and stopping criteria; it returns what generate() returns, and each row's tokens
follow the target's own (processed) distribution exactly, whatever the schedule decides.
"""

from __future__ import annotations

import time

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel, StoppingCriteriaList

from hf_specdec import compat, costs
from hf_specdec.cache import CachedModel, check_starts_empty, prefers_position_masks
from hf_specdec.drafters.base import Draft, DraftContext, Drafter
from hf_specdec.errors import UnsupportedModelError, UnsupportedTreeError
from hf_specdec.output import Rows, SpeculativeDecoderOnlyOutput, commit, finish, new_buffers
from hf_specdec.policy import DraftPolicy, TreeDraftPolicy
from hf_specdec.processing import process_scores, rows_of, rows_selectable
from hf_specdec.stats import SpeculativeStats
from hf_specdec.steps import Call, chain_step, tree_step
from hf_specdec.verify import agreement

__all__ = ["SpeculativeDecoderOnlyOutput", "speculative_decode"]

#: Prompt positions on which the drafter's agreement with the target sets each row's starting acceptance.
PROMPT_POSITIONS = 16


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
    """Speculative decoding of `model` (the target) with `drafter`, each step's draft chosen by `gamma`'s policy.

    Args:
        input_ids: [batch, prompt_len] prompts, left-padded (`attention_mask` in `model_kwargs`).
        logits_processor, stopping_criteria, generation_config: as prepared by generate().
        drafter: proposes tokens (see `hf_specdec.drafters`).
        gamma: an int (a chain of that many drafts), "auto", a DraftPolicy, or None for the default
            (`CostAwareDraftPolicy`).
        generator: explicit RNG for sampling; the global RNG when None.
        stats: a SpeculativeStats to append this call's rows to.
        tokenizer, drafter_tokenizer: used only for the compatibility check.

    Returns:
        [batch, length] token ids, or a SpeculativeDecoderOnlyOutput with `return_dict_in_generate`.
    """
    # 0. Checks, before any forward pass; the call's target cache, drafting state and schedule.
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    compat.check_generation_config(generation_config, synced_gpus, batch, streamer)
    compat.check_processors(logits_processor, batch)
    compat.check_target(model, batch)
    cache = model_kwargs.get(compat.CACHE_KWARG)
    check_starts_empty(model, cache)
    compat.check_model_inputs(model_kwargs, input_ids)
    vocab_size = drafter.check_compatible(model, generation_config, tokenizer, drafter_tokenizer)
    policy = compat.check_gamma(gamma)
    pad_lens = compat.left_padding(model_kwargs.get("attention_mask"), input_ids)  # [batch]
    do_sample = generation_config.do_sample
    target = CachedModel(model, batch, device, cache=cache, position_masks=prefers_position_masks(model, device))
    drafting = drafter.start(model, batch, device)  # this call's drafting state; `drafter` stays shared
    trees = _drafts_trees(target, drafting, refuse=isinstance(policy, TreeDraftPolicy), depth=policy.max_gamma)
    step_costs = {}  # this setting's StepCosts by the loop's row count (`_costs_of`)
    schedule = policy.start(batch, device, costs=_costs_of(step_costs, model, drafter, device, batch, do_sample),
                            trees=trees, prior=drafter.expected_acceptance)
    max_length = generation_config.max_length
    # Like _sample: rows that hit EOS are frozen and padded; without an EOS criterion rows run on until every row has
    # stopped, and all end at the same length.
    freeze_finished = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
    sequences, lens, flagged, done_at, scores_out, logits_out = new_buffers(
        input_ids, generation_config, vocab_size, room=schedule.max_width
    )
    keep_scores = scores_out is not None or logits_out is not None
    step_stats = SpeculativeStats.empty(batch, schedule.max_depth)

    def process(scores: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        return process_scores(logits_processor, sequences, lengths, scores, rows)

    call = Call(target, drafting, process, logits_processor, vocab_size, do_sample, generator,
                drafter.feature_layers(model), policy.min_confidence)
    # A plain step should cost what plain generate()'s step costs: it skips the draft's bookkeeping.
    no_draft = Draft.none(batch, device, vocab_size)
    plain_steps = torch.zeros(batch, dtype=torch.long, device=device)  # [batch] plain steps each row took
    drafter_forwards = 0  # of a drafting state let go before the call's end
    # Rows that are done may leave the batch when every per-row state can follow them (see `_rows_to_keep`).
    droppable = freeze_finished and batch > 1 and target.rows_selectable and streamer is None and rows_selectable(
        logits_processor, stopping_criteria
    )
    whole = None  # every row's state for generate()'s output, once the loop runs on a subset of the rows
    num_left = batch  # active rows when the batch last considered dropping rows
    timed = None  # (kind, depth, width, rows, draft ms or None, when verifying began) of the last step, recorded at the next
    prefill, drafted = True, False  # drafted: whether a step drafted yet (the drafter's first one reads the prompt too)
    fed_before = False  # whether the step before drafted (the drafter is caught up but for its last verification)
    while True:
        # 1. Which rows still generate (the step's one host sync: on a GPU it waits for the device, so the time from
        # here to the next step's sync is the step's wall time).
        if freeze_finished:  # a flagged row is done; once every row is, none is active
            active = (lens < max_length) & ~flagged  # [batch]
        else:  # every row runs until the last one stops, as generate() returns them
            active = lens < torch.where(flagged.all(), done_at.max(), max_length)
        left = int(active.sum())
        started = time.perf_counter()
        if timed is not None:
            kind, depth, width, rows, draft_ms, verifying = timed
            _costs_of(step_costs, model, drafter, device, rows, do_sample).record(
                kind, depth, width, draft_ms, (started - verifying) * 1e3)
        if not left:
            break
        if droppable and 2 * left <= len(active) and (left < num_left or drafting is not None) and (
            drafting is None or not schedule.drafting_pays(active)
        ):
            # Rows that are done stop costing the target's forwards (generate() keeps computing them) where the
            # drafter no longer pays; it goes with them (its state is per row). `whole` keeps every row for the output.
            num_left = left
            keep = _rows_to_keep(active, left, lambda rows: _plain_ms(step_costs, model, drafter, device, rows, do_sample))
            if keep is not None:
                if drafting is not None:
                    drafter_forwards, drafting, call.drafting, call.feature_layers = drafting.num_forwards, None, None, ()
                whole = Rows.store(whole, sequences, lens, flagged, done_at, plain_steps)
                whole.index = whole.index[keep]
                sequences, lens, flagged, done_at, plain_steps, pad_lens, active = (
                    t[keep] for t in (sequences, lens, flagged, done_at, plain_steps, pad_lens, active)
                )
                target.select_rows(keep)
                logits_processor = rows_of(logits_processor, keep, len(no_draft.num_drafted))
                call.processors = logits_processor
                no_draft = Draft.none(len(keep), device, vocab_size)

        # 2. Draft and verify: the schedule's tree, or its chain lengths (0 everywhere: a plain step), never past
        # max_length (the target's token after the drafts comes for free).
        room = (max_length - lens - 1).clamp_min(0)  # [batch]
        tree = schedule.tree if drafting is not None else None
        num_draft = None
        if tree is None and drafting is not None and schedule.drafts():
            num_draft = torch.where(active, torch.minimum(schedule.lengths, room), 0)  # [batch]
            num_draft = num_draft if int(num_draft.max()) > 0 else None
        if tree is not None:
            if left < len(active):  # a plain step fed done rows their last token, which is a tree's root: uncache it
                target.rollback(torch.minimum(target.num_cached, lens - pad_lens - 1), slack=schedule.max_width)
            step = tree_step(call, sequences, pad_lens, lens, active, room, tree, schedule.max_rank, keep_scores)
        else:
            extra = 0
            if prefill and drafting is not None and schedule.wants_prior:  # never widen the prefill's chunk: a model
                extra = min(PROMPT_POSITIONS, int((lens - pad_lens).max()) - 1)  # placing tokens itself would shift
            step = chain_step(call, sequences, pad_lens, lens, active, left, num_draft, no_draft, keep_scores,
                              caught_up=not prefill, extra_logits=extra, path_stop=schedule.path_stop)
        fed_drafts = step.width > 1 or step.nodes is not None  # (a tree step feeds its roots even where none drafted)

        # 3. Commit, checking the stopping criteria after every token, not only at the step's end.
        num_new = torch.where(active, step.num_accepted + 1, 0) if step.width > 1 else active.long()  # [batch]
        num_new, flagged, done_at = commit(
            sequences, lens, step.committed, num_new, stopping_criteria, flagged, done_at, freeze_finished, streamer
        )
        if keep_scores:
            for out, values in ((scores_out, step.scores), (logits_out, step.logits)):
                if out is not None:
                    rows, cols = (torch.arange(values.shape[1], device=device) < num_new[:, None]).nonzero(as_tuple=True)
                    at = rows if whole is None else whole.index[rows]  # the call's rows
                    out[at, lens[rows] - prompt_len + cols] = values[rows, cols]
        lens = lens + num_new

        # 4. Roll back both caches to the committed tokens; the last one is fed again next step. A plain step fed
        # committed tokens only: the target's cache keeps them all (unless windows let it forget old ones).
        num_valid = lens - pad_lens - 1  # [batch]
        if fed_drafts or target.layout.bounded:
            target.rollback(torch.minimum(target.num_cached, num_valid), slack=schedule.max_width)
        if drafting is not None:
            drafting.observe(num_valid, step.features)
        if fed_drafts:
            step_stats.record_step(active, step.num_drafted, step.num_accepted, num_new)
            if step.nodes is not None:
                step_stats.record_tree(active, step.nodes, schedule.max_width - 1)
        else:  # one token per active row (a stopping criterion cuts nothing from one token)
            plain_steps += active

        # 5. Learn: the schedule hears what was accepted (and, after the prefill, how the drafter did on the prompt);
        # the step's wall time is recorded at the next step's sync.
        if drafting is not None:
            schedule.update(active, step.num_drafted, step.num_accepted, step.outcomes, step.width > 1, left,
                            step.confidence)
            if prefill and step.prompt_logits is not None and step.prompt_logits.shape[1]:
                ctx = DraftContext(sequences, pad_lens, lens, active, vocab_size, do_sample, generator, process)
                guess = drafting.score_prompt(ctx, step.prompt_logits.shape[1])
                if guess is not None:
                    schedule.set_prior(*agreement(step.prompt_logits, *guess, pad_lens, lens, do_sample,
                                                  generation_config.temperature if do_sample else 1.0))
        timed = None
        if not prefill and schedule.timed and (drafted or not fed_drafts):  # (a call's first draft prices no shape)
            # depth: the levels drafted (a tree drafts every level its rows have room for; its kept nodes may end higher)
            kind = "tree" if step.nodes is not None else "chain"
            depth = min(tree.max_depth, int(room[active].max())) if kind == "tree" else step.width - 1
            if kind == "chain" or depth:  # (a tree of the root alone, where no row had room, prices no shape)
                # After plain steps a drafter first catches up on their tokens: that drafting time prices no level.
                draft_ms = (step.drafted_at - started) * 1e3 if fed_before else None
                timed = (kind, depth, step.width, len(lens), draft_ms, step.drafted_at)
        prefill, drafted, fed_before = False, drafted or fed_drafts, fed_drafts

    if whole is not None:  # every row again, for the output
        whole = Rows.store(whole, sequences, lens, flagged, done_at, plain_steps)
        sequences, lens, flagged, done_at, plain_steps = (
            whole.sequences, whole.lens, whole.flagged, whole.done_at, whole.plain_steps
        )
    step_stats.record_plain_steps(plain_steps)
    schedule.done()
    return finish(
        sequences, lens, flagged, done_at, prompt_len, generation_config._pad_token_tensor, scores_out, logits_out,
        generation_config, step_stats, stats, target.num_forwards,
        drafter_forwards if drafting is None else drafting.num_forwards, streamer,
    )


def _drafts_trees(target: CachedModel, drafting, refuse: bool, depth: int) -> bool:
    """Whether this target and the drafter's state (`drafting`) can draft and score trees; with `refuse` (a tree
    policy), the reason they cannot as an UnsupportedModelError / UnsupportedTreeError, before any forward."""
    try:
        target.check_trees()
        if not drafting.drafts_trees:
            raise UnsupportedTreeError(
                f"{type(drafting).__name__} drafts chains only (its drafts_trees is False); hf_specdec's model, "
                f"feature-head and prompt-lookup drafters draft trees. Pass gamma={depth} (a chain) with this drafter."
            )
        drafting.check_trees()
    except (UnsupportedModelError, UnsupportedTreeError):
        if refuse:
            raise
        return False
    return True


#: A batch drops rows that are done only where a plain step over the rows it keeps costs at most this share of one over
#: all of its rows (a forward's cost need not grow with its rows: fp32 on a Zen 4 measured 115 ms at 3 rows, 87 at 4).
DROP_ROWS_BELOW = 0.9


def _costs_of(step_costs: dict, model, drafter, device, rows: int, do_sample: bool) -> costs.StepCosts:
    """The StepCosts of this setting over `rows` rows, kept in the call's `step_costs` once asked for."""
    if rows not in step_costs:
        step_costs[rows] = costs.costs_for(model, drafter, device, rows, do_sample)
    return step_costs[rows]


def _plain_ms(step_costs: dict, model, drafter, device, rows: int, do_sample: bool) -> float | None:
    """The measured plain step over `rows` rows of this setting, None while unmeasured."""
    return _costs_of(step_costs, model, drafter, device, rows, do_sample).estimate(None)


def _rows_to_keep(active: torch.Tensor, left: int, plain_ms) -> torch.Tensor | None:
    """The rows ([kept] long, ascending) a batch whose `active` rows ([rows] bool) number `left` should keep, or None
    to keep them all: the active rows, padded with done ones up to a power of two where that step is cheaper, if at
    most half the rows are active and that step costs under DROP_ROWS_BELOW of the whole batch's by `plain_ms(rows)`
    (a size not measured yet is tried: its time is then measured for the next call)."""
    rows = active.shape[0]
    if not 0 < 2 * left <= rows:
        return None
    full = plain_ms(rows)
    sizes = sorted({left, 1 << (left - 1).bit_length()})  # e.g. 3 rows left: 3 or 4
    priced = {size: plain_ms(size) for size in sizes if size < rows}
    unknown = [size for size, ms in priced.items() if ms is None]
    if unknown:
        size = max(unknown)  # a power of two where one is untried
    else:
        size = min(priced, key=priced.get, default=None)
        if size is None or full is None or priced[size] > DROP_ROWS_BELOW * full:
            return None
    done = (~active).nonzero().squeeze(1)[: size - left]  # done rows that pad the batch to `size`
    return torch.cat([active.nonzero().squeeze(1), done]).sort().values
