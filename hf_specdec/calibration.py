"""What a step costs on the user's own models and device: timed forwards and timed loop steps, measured
once and reused.

Contract: `step_costs(target, drafter, batch_size, device, widths, do_sample)` returns a `StepCosts` (ms
of one drafter step, ms of a target forward scoring w tokens per row, and ms of whole steps of the
decoding loop with 0, 1 and 2 drafts) for this target, drafter, device, dtype, batch size, sampling mode
and torch thread count. The first request times a few forwards on scratch caches and a few steps of
scratch generate() calls (never the call's own) and stores the result in a process-wide registry; later
requests, from any thread, get the stored numbers, so decisions made from them repeat exactly within a
process.
`stored_costs(...)` returns what is stored for the same arguments without timing anything (None if
nothing is). `reset_calibration()` empties the registry (say, after moving a model to another device or once a
busy machine is idle again); timings taken on a busy machine are only as good as the machine was.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import statistics
import threading
import time
import weakref
from dataclasses import dataclass, field

import torch

from hf_specdec.cache import CachedModel
from hf_specdec.drafters.base import DraftContext, Drafter
from hf_specdec.policy import DraftPolicy, DraftSchedule, TreeDraftPolicy
from hf_specdec.tree_schedule import TreeSchedule

logger = logging.getLogger(__name__)

#: Tokens of context the timed forwards see; attention over it is a small share of a step.
CONTEXT = 128
REPEATS = 5
#: Fresh drafter sessions whose first draft (reading CONTEXT tokens) is timed for `StepCosts.catch_up_ms`.
CATCH_UP_REPEATS = 3
#: Scratch generate() calls that time whole loop steps: prompt tokens, steps per call, calls per draft length (at
#: least LOOP_ROUNDS; more, up to LOOP_MAX_ROUNDS, until each length's two fastest calls agree within LOOP_AGREEMENT).
LOOP_CONTEXT = CONTEXT  # as long as the forwards' context: attention over it grows with the width
LOOP_STEPS = 6
LOOP_ROUNDS = 2
#: Why more rounds on a noisy machine: on an AMD EPYC Zen 4 VM (avx512_bf16, no AMX) a call's median step varied by up
#: to 70 % between rounds (bf16 batch 4, plain: 56-96 ms), and with two rounds the 1-draft step of one setting
#: measured 1.04-1.19x the plain step in five calibrations of one process; the fastest of six rounds 1.17-1.19x, of
#: four nearly as close (docs/bench/issue24/calib-spread/). Four, not six: every round re-times a prompt's prefill
#: per length, and six took up to 48 s at batch 8 there. On a quiet machine two rounds agree and nothing more is timed.
LOOP_MAX_ROUNDS = 4
LOOP_AGREEMENT = 0.03
#: The most drafts per row whose whole loop steps are timed (longer drafts are priced from the longest timed).
#: Two, not one: scaling the plain step by the forwards' width ratio priced a 2-draft step at batch 4 at 1.22x a
#: 1-draft step where the bench measured ~1.1x, so the default drafted 1 where 2 paid (1.09x against 1.23x plain;
#: docs/bench/issue24/b4-pricing). The ratio scales the loop's own work too, which does not grow with the width.
LOOP_DRAFTS = 2


@dataclass(frozen=True)
class StepCosts:
    """Milliseconds of one drafting step (one drafted token per row) and of target forwards that score
    `w` tokens per row, at one batch size; widths that were not timed are interpolated linearly.

    `loop_ms` are whole steps of the decoding loop with 0, 1 (and 2) drafts per row ({0: ms, 1: ms, 2: ms}),
    timed through generate(): they hold what isolated forwards leave out (the loop's own work per step and per
    drafted token, the drafter's processing and sampling), and `step_ms` prices every draft length from
    them. Without them (costs pinned by hand) a step is priced from the forwards alone.

    `catch_up_ms` is what the drafter pays per token it has not read yet, per row (one column of the batch): it reads
    the prompt at its first draft and, after plain steps, every token committed since (measured: a fresh session's
    first draft after CONTEXT tokens, less a drafter step, per token). Loop steps price the one or two tokens a
    drafting step catches up on; the tokens of a run of plain steps are paid by the probe after it.

    `StepCosts(draft_ms=3.0, target_ms={1: 60.0, 2: 66.0, 5: 90.0})` pins costs by hand (for
    `CostAwareDraftPolicy(costs=...)`): decisions then repeat exactly across processes and machines.
    """

    draft_ms: float
    target_ms: tuple[tuple[int, float], ...]  # (width, ms), widths ascending
    loop_ms: tuple[tuple[int, float], ...] = ()  # (drafts per row, ms of a whole loop step): 0, 1 (, 2), or none
    catch_up_ms: float = 0.0  # ms the drafter's forward adds per token it reads per row (its prefill, its catch-up)

    def __post_init__(self) -> None:
        for name in ("target_ms", "loop_ms"):
            value = getattr(self, name)
            pairs = value.items() if isinstance(value, dict) else value
            object.__setattr__(self, name, tuple(sorted((int(w), float(ms)) for w, ms in pairs)))
        if not self.target_ms or self.target_ms[0][0] != 1:
            raise ValueError("StepCosts needs the cost of a 1-token target forward (width 1).")
        if not self.catch_up_ms >= 0:
            raise ValueError(f"StepCosts.catch_up_ms must be >= 0 ms, got {self.catch_up_ms!r}.")
        if self.loop_ms and [k for k, _ in self.loop_ms] not in ([0, 1], [0, 1, 2]):
            raise ValueError("StepCosts.loop_ms holds the loop steps with 0, 1 and optionally 2 drafts per row "
                             "({0: ms, 1: ms} or {0: ms, 1: ms, 2: ms}).")

    def verify_ms(self, width: int) -> float:
        table = dict(self.target_ms)
        if width in table:
            return table[width]
        widths = sorted(table)
        if len(widths) == 1:
            return table[1] * width
        if width > widths[-1]:  # extrapolate from the last two timed widths
            low, high = widths[-2], widths[-1]
        else:
            high = next(w for w in widths if w > width)
            low = max(w for w in widths if w < width)
        slope = (table[high] - table[low]) / (high - low)
        return table[low] + slope * (width - low)

    def draft_overhead_ms(self) -> float:
        """What one drafted token per row adds to a loop step besides the wider forward: the drafter's step and
        the loop's work for it (processing, drawing, the drafter's catch-up), from the measured steps: the
        1-draft step less the plain step scaled by the forwards' width ratio v(2) / v(1); never below 0.
        Without measured loop steps, the timed drafter step alone."""
        if not self.loop_ms:
            return self.draft_ms
        loop = dict(self.loop_ms)
        return max(0.0, loop[1] - loop[0] * self.verify_ms(2) / self.verify_ms(1))

    def step_ms(self, num_drafts: int) -> float:
        """Milliseconds of a loop step that drafts `num_drafts` tokens per row (0: a plain step). With measured
        loop steps: the measured step for a timed length; a longer one is the longest timed step plus what
        `_scaled_ms` adds from there (absolute times come from the loop steps alone, timed in turns, and only
        ratios from the forwards, timed at another moment). Without: num_drafts * draft_ms + verify_ms(num_drafts + 1)."""
        if not self.loop_ms:
            return num_drafts * self.draft_ms + self.verify_ms(num_drafts + 1)
        loop = dict(self.loop_ms)
        if num_drafts in loop:
            return loop[num_drafts]
        longest = max(loop)
        return loop[longest] + self._scaled_ms(num_drafts) - self._scaled_ms(longest)

    def _scaled_ms(self, num_drafts: int) -> float:
        """The plain loop step scaled by the forwards' width ratio v(k + 1) / v(1), plus k times
        `draft_overhead_ms` (the measured steps at k = 0 and 1, unless that overhead was clamped). It overprices
        long drafts at batch > 1 (the loop's own work does not grow with the width), so it prices only beyond the
        timed steps."""
        plain = dict(self.loop_ms)[0]
        return plain * self.verify_ms(num_drafts + 1) / self.verify_ms(1) + num_drafts * self.draft_overhead_ms()


#: The tree whose loop steps are timed for `TreeCosts` (top_k, depth, nodes): two levels, so that what a tree
#: costs per level and per node can be told apart from what a chain of one costs.
TREE_PROBE = (4, 2, 8)


@dataclass(frozen=True)
class TreeCosts:
    """What a call run as draft trees costs per step: `chain` (the chain loop's StepCosts, with forward widths up to
    the largest tree) and whole steps of the tree loop, timed like `StepCosts.loop_ms`: `plain_ms` (the root
    alone), `chain_ms` (a chain of one) and `tree_ms` (a tree of TREE_PROBE's shape).

    A shape with D levels and N drafted nodes is priced as plain_ms * v(N + 1) / v(1) + D * per_level + N * per_node
    (`shape_ms`): the width ratio from the forwards, and the two extras (the drafter's forward per level; the
    processing and bookkeeping per node) solved from the chain of one and the probe tree, never below 0.
    `TreeCosts(chain=StepCosts(...), plain_ms=.., chain_ms=.., tree_ms=..)` pins tree decisions by hand.
    """

    chain: StepCosts
    plain_ms: float
    chain_ms: float
    tree_ms: float

    def _ratio(self, nodes: int) -> float:
        return self.chain.verify_ms(nodes + 1) / self.chain.verify_ms(1)

    def extras(self) -> tuple[float, float]:
        """(ms per level, ms per node) a tree adds besides its wider forward."""
        _, depth, nodes = TREE_PROBE
        one = max(0.0, self.chain_ms - self.plain_ms * self._ratio(1))  # a level and a node
        probe = max(0.0, self.tree_ms - self.plain_ms * self._ratio(nodes))  # `depth` levels and `nodes` nodes
        per_node = (probe - depth * one) / (nodes - depth)
        if per_node < 0:  # levels explain it all (and overprice the probe: the safe side)
            return one, 0.0
        if per_node > one:  # nodes explain it all
            return 0.0, probe / nodes
        return one - per_node, per_node

    def shape_ms(self, shape) -> float:
        """Milliseconds of a tree-loop step drafting `shape` (a TreeDraftPolicy: top_k, max_depth, max_nodes)."""
        per_level, per_node = self.extras()
        return self.plain_ms * self._ratio(shape.max_nodes) + shape.max_depth * per_level + shape.max_nodes * per_node

    @property
    def catch_up_ms(self) -> float:
        """The drafter's catch-up per token and row (`StepCosts.catch_up_ms`): the same in either loop."""
        return self.chain.catch_up_ms

    def step_ms(self, num_drafts: int) -> float:
        """A chain of `num_drafts` in the tree loop (0: a plain step), as `StepCosts.step_ms`."""
        if num_drafts == 0:
            return self.plain_ms
        return self.shape_ms(TreeDraftPolicy(top_k=1, max_depth=num_drafts, max_nodes=num_drafts))


#: Measured costs (StepCosts, TreeCosts) and mask choices (bool), by setting.
_registry: dict[tuple, tuple[weakref.ref, weakref.ref | None, object]] = {}
_lock = threading.RLock()


def reset_calibration() -> None:
    """Forgets every measured cost and mask choice; the next call of each model pair times its forwards again."""
    with _lock:
        _registry.clear()


def prefers_position_masks(target, batch_size: int, device: torch.device) -> bool:
    """Whether the loop should hand `target` 4D masks it builds itself rather than a 2D mask: measured once per
    target, device, dtype, batch size and torch thread count, and only in half precision with eager / sdpa
    attention. Why: for a 2D mask without padding transformers passes no mask, and on a CPU that computes
    bf16 (AMD EPYC Zen 5, avx512_bf16) SDPA's unmasked 1-token path measured 8 % (batch 1) to 19 % (batch 4)
    slower than with a mask (SmolLM2-135M, 27.6 vs 25.4 and 35.9 vs 29.2 ms), which also made 2-token forwards
    look cheaper than 1-token ones. Float32 keeps generate()'s own path (no gain measured there), so its
    outputs stay token-identical to generate()'s; half precision is identical up to near-ties either way."""
    dtype = next(target.parameters()).dtype
    if dtype not in (torch.bfloat16, torch.float16) or target.config._attn_implementation not in ("eager", "sdpa"):
        return False
    key = ("masks", id(target), str(device), str(dtype), batch_size, torch.get_num_threads())
    with _lock:  # reentrant: `measure` asks while it holds the lock
        choice = _lookup(key, target, None)
        if choice is None:
            choice = _time_mask_styles(target, batch_size, device)
            _registry[key] = (weakref.ref(target), None, choice)
        return choice


@torch.no_grad()
def _time_mask_styles(target, batch_size: int, device: torch.device) -> bool:
    """True when 1- and 2-token forwards after CONTEXT unpadded tokens, with 4D position masks, take at most 97 %
    of their time with a 2D mask (in turns, REPEATS rounds, the fastest of each)."""
    verify = {style: _scratch_verify(target, batch_size, device, style, seed=2) for style in (False, True)}
    for style in verify:
        verify[style](1)  # warm-up
    rounds = {(style, width): [] for style in verify for width in (1, 2)}
    for _ in range(REPEATS):
        for style, width in rounds:
            rounds[style, width].append(_time_ms(lambda: verify[style](width)))
    totals = {style: sum(min(rounds[style, width]) for width in (1, 2)) for style in verify}
    return totals[True] <= 0.97 * totals[False]


def _scratch_verify(target, rows: int, device: torch.device, position_masks: bool, seed: int):
    """A scratch CachedModel of `target` over `rows` rows holding CONTEXT random tokens each, and a function that runs
    one verification of `width` tokens on it (a forward, then a rollback to CONTEXT), for timing forwards as the loop
    runs them."""
    generator = torch.Generator().manual_seed(seed)
    vocab = target.config.get_text_config().vocab_size
    sequences = torch.randint(0, vocab, (rows, CONTEXT + 3), generator=generator).to(device)
    pad_lens = torch.zeros(rows, dtype=torch.long, device=device)
    context = torch.full((rows,), CONTEXT, dtype=torch.long, device=device)
    cached = CachedModel(target, rows, device, position_masks=position_masks)
    cached.forward(sequences, pad_lens, context, 1)

    def verify(width: int) -> None:
        cached.forward(sequences, pad_lens, context + width, width)
        cached.rollback(context.clone(), slack=CONTEXT)

    return verify


def plain_forward_ms(target, rows: int, device: torch.device, position_masks: bool = False) -> float:
    """The time of one of the loop's plain forwards of `target` over `rows` rows (one token each, after CONTEXT
    tokens): measured once per target, device, dtype, row count, mask style and torch thread count (the fastest of
    REPEATS, after a warm-up), for the loop's choice of how many rows a batch keeps once some are done
    (`loop._rows_to_keep`): a forward's cost need not grow with its rows (fp32 SmolLM2 on Zen 4 measured 115 ms at
    3 rows, 87 at 4, 108 at 8)."""
    dtype = next(target.parameters()).dtype
    key = ("plain", id(target), str(device), str(dtype), rows, bool(position_masks), torch.get_num_threads())
    with _lock:
        ms = _lookup(key, target, None)
        if ms is None:
            verify = _scratch_verify(target, rows, device, position_masks, seed=3)
            verify(1)  # warm-up
            ms = _fastest_ms(lambda: verify(1))
            _registry[key] = (weakref.ref(target), None, ms)
        return ms


def _time_ms(run) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e3


def _fastest_ms(run, repeats: int = REPEATS) -> float:
    return min(_time_ms(run) for _ in range(repeats))


@torch.no_grad()
def measure(
    target, drafter: Drafter, batch_size: int, device: torch.device, widths: tuple[int, ...], do_sample: bool = False,
    loop_steps: bool = True, vocab_size: int | None = None, generation_config=None,
) -> StepCosts:
    """Times target forwards of each width, the drafter's one-token step and a fresh drafter session's first draft
    (its catch-up per token) on scratch caches after CONTEXT random tokens (a warm-up of each first). The widths are timed in turns, REPEATS rounds, so a
    machine that slows down meanwhile slows every width alike and their ratios, which decide, hold; each
    keeps its fastest round, because noise (another process, a frequency dip) only ever adds time: a
    median let one slow stretch of 1-token forwards (72 vs 94 ms in two calibrations on this machine) make
    every wider forward look cheap. With `loop_steps`, whole steps of the loop with 0 and 1 drafts are
    timed too, and with 2 where `widths` reach 3 (`measure_loop_steps`)."""
    generator = torch.Generator().manual_seed(0)
    vocab = target.config.get_text_config().vocab_size
    length = CONTEXT + max(widths) + 2
    sequences = torch.randint(0, vocab, (batch_size, length), generator=generator).to(device)
    pad_lens = torch.zeros(batch_size, dtype=torch.long, device=device)
    context = torch.full((batch_size,), CONTEXT, dtype=torch.long, device=device)
    scratch = CachedModel(target, batch_size, device, position_masks=prefers_position_masks(target, batch_size, device))
    feature_layers = drafter.feature_layers(target)
    _, features = scratch.forward(sequences, pad_lens, context, 1, feature_layers=feature_layers)

    def verify(width: int) -> None:  # as the loop verifies: with the hidden states the drafter reads
        scratch.forward(sequences, pad_lens, context + width, width, feature_layers=feature_layers)
        scratch.rollback(context.clone(), slack=length)

    for width in widths:
        verify(width)  # warm-up
    rounds = {width: [] for width in widths}
    for _ in range(REPEATS):
        for width in widths:
            rounds[width].append(_time_ms(lambda: verify(width)))
    target_ms = {width: min(times) for width, times in rounds.items()}

    # The drafter drafts one token after CONTEXT + 1 tokens and is rolled back by two, so each timed step
    # feeds what a step after a verification feeds (the last confirmed tokens) and drafts one token. It
    # samples it (softmax and a draw; a greedy draft's argmax costs a little less).
    session = drafter.start(target, batch_size, device)
    session.observe(context, features)
    ctx = DraftContext(
        sequences=sequences.clone(), pad_lens=pad_lens, lens=context + 1,
        active=torch.ones(batch_size, dtype=torch.bool, device=device), vocab_size=vocab, do_sample=True,
        generator=torch.Generator(device=device).manual_seed(0), process=lambda scores, lengths, rows: scores,
    )
    ones = torch.ones(batch_size, dtype=torch.long, device=device)

    def draft() -> None:
        session.propose(ctx, ones)
        session.observe(context - 1, None)

    draft()  # warm-up (and the drafter's own prefill)
    draft_ms = _fastest_ms(draft)

    def first_draft() -> None:  # a fresh session reads all CONTEXT + 1 tokens, then drafts one
        fresh = drafter.start(target, batch_size, device)
        fresh.observe(context, features)
        fresh.propose(ctx, ones)

    first_draft()  # warm-up
    # draft() reads 2 tokens per row, first_draft() CONTEXT + 1: what the other CONTEXT - 1 cost, per token.
    catch_up_ms = max(0.0, (_fastest_ms(first_draft, CATCH_UP_REPEATS) - draft_ms) / (CONTEXT - 1))
    most = max(1, min(LOOP_DRAFTS, max(widths) - 1))  # a policy that never drafts 2 needs no 2-draft step
    loop_ms = measure_loop_steps(target, drafter, batch_size, device, do_sample, vocab_size, generation_config,
                                 most) if loop_steps else ()
    return StepCosts(draft_ms=draft_ms, target_ms=target_ms, loop_ms=loop_ms, catch_up_ms=catch_up_ms)


class _ClockedSchedule(DraftSchedule):
    """A fixed number of drafts per row every step, and the time of every verification."""

    def __init__(self, num_drafts: int, batch_size: int, device: torch.device):
        self.lengths = torch.full((batch_size,), num_drafts, dtype=torch.long, device=device)
        self.times: list[float] = []

    def update(self, active, num_drafted, num_accepted) -> None:
        self.times.append(time.perf_counter())


@dataclass(frozen=True, kw_only=True)
class _ClockedPolicy(DraftPolicy):
    """Drafts `num_drafts` tokens per row (0: plain steps) and hands each call's clocked schedule to `schedules`
    (private to the calibration, used for one scratch call)."""

    num_drafts: int = 0
    schedules: list = field(default_factory=list)

    def start(self, target, drafter, batch_size, device, *args, **kwargs) -> DraftSchedule:
        schedule = _ClockedSchedule(self.num_drafts, batch_size, device)
        self.schedules.append(schedule)
        return schedule


class _ClockedTreeSchedule(TreeSchedule):
    """A fixed tree shape every step (None: plain steps of the tree loop), and the time of every verification."""

    def __init__(self, policy: "_ClockedTreePolicy"):
        super().__init__(policy)
        self.shape = None if policy.plain else policy
        self.times: list[float] = []

    def update(self, active, num_drafted, num_accepted) -> None:
        self.times.append(time.perf_counter())


@dataclass(frozen=True, kw_only=True)
class _ClockedTreePolicy(TreeDraftPolicy):
    """Drafts this tree every step (`plain`: the root alone) and hands each call's clocked schedule to `schedules`."""

    plain: bool = False
    schedules: list = field(default_factory=list)

    def tree_schedule(self) -> TreeSchedule:
        schedule = _ClockedTreeSchedule(self)
        self.schedules.append(schedule)
        return schedule


class _Vetted(Drafter):
    """A drafter the asking call already checked against the target with its own tokenizers: the scratch calls
    use the vocabulary width that check agreed on instead of checking again without them (a padded head
    passes only with `tokenizer=`)."""

    def __init__(self, drafter: Drafter, vocab_size: int):
        self.drafter, self.vocab_size = drafter, vocab_size

    def start(self, target, batch_size: int, device: torch.device):
        return self.drafter.start(target, batch_size, device)

    def feature_layers(self, target) -> tuple[int, ...]:
        return self.drafter.feature_layers(target)

    def check_compatible(self, target, generation_config, tokenizer=None, drafter_tokenizer=None) -> int:
        return self.vocab_size


def measure_loop_steps(
    target, drafter: Drafter, batch_size: int, device: torch.device, do_sample: bool, vocab_size: int | None = None,
    generation_config=None, most_drafts: int = LOOP_DRAFTS,
) -> dict[int, float]:
    """{0: ms, 1: ms, ...}: whole steps of the decoding loop (draft, verify, process, commit, roll back, the
    drafter's catch-up) with 0 to `most_drafts` (1 or 2) drafts per row, each the time between consecutive
    verifications of a scratch generate() call over LOOP_CONTEXT random tokens per row (the median of its
    LOOP_STEPS steps; the fastest of LOOP_ROUNDS to LOOP_MAX_ROUNDS calls, taken in turns like the forwards, as
    many as `_rounds_agree` asks for).
    Drafts after random tokens are mostly rejected, so a step scores 1 + drafts tokens and commits one, as a
    useless drafter's would. `vocab_size`: the width the asking call's check agreed on (None: check here,
    without tokenizers); `generation_config`: the asking call's, so the scratch steps run its processors."""
    if most_drafts not in (1, 2):
        raise ValueError(f"most_drafts must be 1 or 2, got {most_drafts!r}.")
    policies = {k: _ClockedPolicy(max_gamma=max(1, k), num_drafts=k) for k in range(most_drafts + 1)}
    return _time_scratch_steps(target, drafter, batch_size, device, do_sample, vocab_size, generation_config, policies)


def _time_scratch_steps(
    target, drafter: Drafter, batch_size: int, device: torch.device, do_sample: bool, vocab_size: int | None,
    generation_config, policies: dict,
) -> dict:
    """{label: ms of a step} for each clocked policy (`_ClockedPolicy` or `_ClockedTreePolicy`), timed in scratch
    generate() calls as `measure_loop_steps` says; {} (and a warning) if a scratch call fails."""
    from hf_specdec.dispatch import generate_with_drafter  # the loop itself, as a user's call runs it

    if vocab_size is not None:
        drafter = _Vetted(drafter, vocab_size)
    generator = torch.Generator().manual_seed(1)
    vocab = target.config.get_text_config().vocab_size
    input_ids = torch.randint(0, vocab, (batch_size, LOOP_CONTEXT), generator=generator).to(device)
    # The asking call's generation config (its processors), else the target's own; one plain sampled or greedy
    # sequence per row, no early stop. Its lengths are the call's, not ours: generate() resolved its min_new_tokens
    # into min_length (prompt + min_new_tokens), which a scratch call would find unfeasible (a warning) and, with
    # no eos here, could not use (transformers builds min-length processors only with an eos token).
    config = copy.deepcopy(generation_config if generation_config is not None else target.generation_config)
    config.update(max_new_tokens=LOOP_STEPS + 1, min_new_tokens=None, min_length=0, max_length=None,
                  do_sample=do_sample, num_beams=1, num_return_sequences=1, eos_token_id=None, stop_strings=None,
                  return_dict_in_generate=False, output_scores=False, output_logits=False)
    rounds: dict = {label: [] for label in policies}
    try:
        for attempt in range(LOOP_MAX_ROUNDS):  # no warm-up call: the forwards above warmed up, and a median skips step 1
            if attempt >= LOOP_ROUNDS and _rounds_agree(rounds):
                break
            for label, times in rounds.items():
                policy = dataclasses.replace(policies[label], schedules=[])  # a fresh clock per call
                generate_with_drafter(
                    target, drafter, input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config,
                    gamma=policy, generator=torch.Generator(device=device).manual_seed(attempt),
                )
                (schedule,) = policy.schedules
                steps = [b - a for a, b in zip(schedule.times, schedule.times[1:])]
                if steps:
                    times.append(statistics.median(steps) * 1e3)
    except Exception as error:  # a scratch call our own setup made invalid: never fail the user's valid call for it
        logger.warning("hf_specdec: could not time loop steps (%s: %s); pricing drafts from timed forwards alone.",
                       type(error).__name__, error)
        return {}
    if not all(rounds.values()):
        return {}
    return {label: min(times) for label, times in rounds.items()}


def _rounds_agree(rounds: dict) -> bool:
    """Whether every label's two fastest timed calls (ms of a step) lie within LOOP_AGREEMENT of each other: noise only
    adds time, so the fastest of two calls that agree is the machine's own speed, while a fastest call that stands alone
    may be the only one a slow stretch spared, or two calls a slow stretch hit alike (the length then mispriced against
    the others). A label with fewer than two calls, or none at all, has not agreed."""
    for times in rounds.values():
        if len(times) < 2:
            return False
        fastest, second = sorted(times)[:2]
        if second > fastest * (1 + LOOP_AGREEMENT):
            return False
    return True


def _cost_identity(drafter: Drafter):
    """The object whose compute a drafter's cost is (its model or head), so a new wrapper around the
    same model reuses the calibration."""
    for name in ("model", "head"):
        if getattr(drafter, name, None) is not None:
            return getattr(drafter, name)
    return drafter


#: The generation-config fields that decide which processors a sampled step runs (and so what it costs).
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
                   "repetition_penalty", "no_repeat_ngram_size")


def _sampling(do_sample: bool, generation_config) -> tuple:
    """What of a call's decoding its costs depend on: greedy, or sampling with these processor settings."""
    if not do_sample:
        return (False,)
    return (True, *(getattr(generation_config, name, None) for name in SAMPLING_FIELDS)) if generation_config else (True,)


def _key(target, identity, batch_size: int, device: torch.device, widths: tuple[int, ...], sampling: tuple) -> tuple:
    dtype = next(target.parameters()).dtype
    return (id(target), id(identity), str(device), str(dtype), batch_size, torch.get_num_threads(), widths, sampling)


def _lookup(key: tuple, target, identity, missing=None):
    """What is stored under `key` for this target and identity, else `missing`."""
    stored = _registry.get(key)
    if stored is not None and stored[0]() is target and (stored[1] is None or stored[1]() is identity):
        return stored[2]
    return missing


def stored_costs(
    target, drafter: Drafter, batch_size: int, device: torch.device, widths: tuple[int, ...], do_sample: bool = False,
    generation_config=None,
) -> StepCosts | None:
    """The StepCosts `step_costs` would return for these arguments if they were measured already, else
    None; never times anything (for reports of what a call decided with). Without `generation_config`, a
    sampled setting matches whichever sampling settings were measured (the first stored)."""
    identity = _cost_identity(drafter)
    key = _key(target, identity, batch_size, device, widths, _sampling(do_sample, generation_config))
    with _lock:
        if do_sample and generation_config is None:
            key = next((k for k in _registry if k[:-1] == key[:-1] and k[-1][0]), key)
        return _lookup(key, target, identity)


def step_costs(
    target, drafter: Drafter, batch_size: int, device: torch.device, widths: tuple[int, ...], do_sample: bool = False,
    vocab_size: int | None = None, generation_config=None,
) -> StepCosts:
    """The stored StepCosts for this pair and setting, measured on first use (see the module doc). `vocab_size`:
    the width the asking call's compatibility check agreed on (with its tokenizers), for the scratch calls;
    `generation_config`: the call's, whose sampling processors the scratch calls run (part of the setting)."""
    identity = _cost_identity(drafter)
    key = _key(target, identity, batch_size, device, widths, _sampling(do_sample, generation_config))
    with _lock:  # one thread measures, the others wait for its numbers instead of timing a busy machine
        costs = _lookup(key, target, identity)
        if costs is not None:
            return costs
        costs = measure(target, drafter, batch_size, device, widths, do_sample, vocab_size=vocab_size,
                        generation_config=generation_config)
        _store(key, target, identity, costs)
        return costs


_MISSING = object()


def tree_costs(
    target, drafter: Drafter, batch_size: int, device: torch.device, chain: StepCosts, widths: tuple[int, ...],
    do_sample: bool = False, vocab_size: int | None = None, generation_config=None,
) -> TreeCosts | None:
    """The stored TreeCosts for this pair and setting, measured on first use: target forwards of every width in
    `widths` (tree sizes; their ratios replace `chain`'s, whose drafter step and loop steps are kept), then scratch
    generate() calls of the tree loop, in turns with one of the chain loop's plain steps, which puts them in
    `chain`'s time base. None when the tree loop's steps could not be timed (the call drafts chains)."""
    identity = _cost_identity(drafter)
    key = ("trees", *_key(target, identity, batch_size, device, widths, _sampling(do_sample, generation_config)))
    with _lock:
        stored = _lookup(key, target, identity, missing=_MISSING)  # None is stored too: tree steps that failed
        if stored is not _MISSING:
            return stored
        wide = measure(target, drafter, batch_size, device, widths, do_sample, loop_steps=False)
        chain = dataclasses.replace(chain, target_ms=wide.target_ms)
        top_k, depth, nodes = TREE_PROBE
        policies = {
            "chain loop": _ClockedPolicy(max_gamma=1, num_drafts=0),  # the time base, timed in the same turns
            "plain": _ClockedTreePolicy(top_k=1, max_depth=1, max_nodes=1, plain=True),
            "chain": _ClockedTreePolicy(top_k=1, max_depth=1, max_nodes=1),
            "tree": _ClockedTreePolicy(top_k=top_k, max_depth=depth, max_nodes=nodes),
        }
        steps = _time_scratch_steps(target, drafter, batch_size, device, do_sample, vocab_size, generation_config, policies)
        costs = None
        if steps:
            # In the chain's time base: its plain step was timed at another moment, and load changes absolute times.
            scale = chain.step_ms(0) / steps["chain loop"]
            costs = TreeCosts(chain, steps["plain"] * scale, steps["chain"] * scale, steps["tree"] * scale)
        _store(key, target, identity, costs)
        return costs


def _store(key: tuple, target, identity, value) -> None:
    """Keeps `value` in the registry for as long as `target` and `identity` (the drafter's model or head) live."""
    try:
        identity_ref = weakref.ref(identity)
    except TypeError:
        identity_ref = None
    _registry[key] = (weakref.ref(target), identity_ref, value)
