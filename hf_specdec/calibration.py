"""What a step costs on the user's own models and device: timed forwards, measured once and reused.

Contract: `step_costs(target, drafter, batch_size, device, widths)` returns a `StepCosts` (ms of one
drafter step, ms of a target forward scoring w tokens per row) for this target, drafter, device,
dtype, batch size and torch thread count. The first request times a few forwards on scratch caches
(never the call's own) and stores the result in a process-wide registry; later requests, from any
thread, get the stored numbers, so decisions made from them repeat exactly within a process.
`stored_costs(...)` returns what is stored for the same arguments without timing anything (None if
nothing is). `reset_calibration()` empties the registry (say, after moving a model to another device or once a
busy machine is idle again); timings taken on a busy machine are only as good as the machine was.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass

import torch

from hf_specdec.cache import CachedModel
from hf_specdec.drafters.base import DraftContext, Drafter

#: Tokens of context the timed forwards see; attention over it is a small share of a step.
CONTEXT = 128
REPEATS = 5


@dataclass(frozen=True)
class StepCosts:
    """Milliseconds of one drafting step (one drafted token per row) and of target forwards that score
    `w` tokens per row, at one batch size; widths that were not timed are interpolated linearly.

    `StepCosts(draft_ms=3.0, target_ms={1: 60.0, 2: 66.0, 5: 90.0})` pins costs by hand (for
    `CostAwareDraftPolicy(costs=...)`): decisions then repeat exactly across processes and machines.
    """

    draft_ms: float
    target_ms: tuple[tuple[int, float], ...]  # (width, ms), widths ascending

    def __post_init__(self) -> None:
        pairs = self.target_ms.items() if isinstance(self.target_ms, dict) else self.target_ms
        object.__setattr__(self, "target_ms", tuple(sorted((int(w), float(ms)) for w, ms in pairs)))
        if not self.target_ms or self.target_ms[0][0] != 1:
            raise ValueError("StepCosts needs the cost of a 1-token target forward (width 1).")

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


_registry: dict[tuple, tuple[weakref.ref, weakref.ref | None, StepCosts]] = {}
_lock = threading.Lock()


def reset_calibration() -> None:
    """Forgets every measured cost; the next call of each model pair times its forwards again."""
    with _lock:
        _registry.clear()


def _time_ms(run) -> float:
    start = time.perf_counter()
    run()
    return (time.perf_counter() - start) * 1e3


def _fastest_ms(run, repeats: int = REPEATS) -> float:
    return min(_time_ms(run) for _ in range(repeats))


@torch.no_grad()
def measure(target, drafter: Drafter, batch_size: int, device: torch.device, widths: tuple[int, ...]) -> StepCosts:
    """Times target forwards of each width and the drafter's one-token step on scratch caches after
    CONTEXT random tokens (a warm-up of each first). The widths are timed in turns, REPEATS rounds, so a
    machine that slows down meanwhile slows every width alike and their ratios, which decide, hold; each
    keeps its fastest round, because noise (another process, a frequency dip) only ever adds time: a
    median let one slow stretch of 1-token forwards (72 vs 94 ms in two calibrations on this machine) make
    every wider forward look cheap."""
    generator = torch.Generator().manual_seed(0)
    vocab = target.config.get_text_config().vocab_size
    length = CONTEXT + max(widths) + 2
    sequences = torch.randint(0, vocab, (batch_size, length), generator=generator).to(device)
    pad_lens = torch.zeros(batch_size, dtype=torch.long, device=device)
    context = torch.full((batch_size,), CONTEXT, dtype=torch.long, device=device)
    scratch = CachedModel(target, batch_size, device)
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
    return StepCosts(draft_ms=_fastest_ms(draft), target_ms=target_ms)


def _cost_identity(drafter: Drafter):
    """The object whose compute a drafter's cost is (its model or head), so a new wrapper around the
    same model reuses the calibration."""
    for name in ("model", "head"):
        if getattr(drafter, name, None) is not None:
            return getattr(drafter, name)
    return drafter


def _key(target, identity, batch_size: int, device: torch.device, widths: tuple[int, ...]) -> tuple:
    dtype = next(target.parameters()).dtype
    return (id(target), id(identity), str(device), str(dtype), batch_size, torch.get_num_threads(), widths)


def _lookup(key: tuple, target, identity) -> StepCosts | None:
    stored = _registry.get(key)
    if stored is not None and stored[0]() is target and (stored[1] is None or stored[1]() is identity):
        return stored[2]
    return None


def stored_costs(target, drafter: Drafter, batch_size: int, device: torch.device, widths: tuple[int, ...]) -> StepCosts | None:
    """The StepCosts `step_costs` would return for these arguments if they were measured already, else
    None; never times anything (for reports of what a call decided with)."""
    identity = _cost_identity(drafter)
    with _lock:
        return _lookup(_key(target, identity, batch_size, device, widths), target, identity)


def step_costs(target, drafter: Drafter, batch_size: int, device: torch.device, widths: tuple[int, ...]) -> StepCosts:
    """The stored StepCosts for this pair and setting, measured on first use (see the module doc)."""
    identity = _cost_identity(drafter)
    key = _key(target, identity, batch_size, device, widths)
    with _lock:  # one thread measures, the others wait for its numbers instead of timing a busy machine
        costs = _lookup(key, target, identity)
        if costs is not None:
            return costs
        costs = measure(target, drafter, batch_size, device, widths)
        try:
            identity_ref = weakref.ref(identity)
        except TypeError:
            identity_ref = None
        _registry[key] = (weakref.ref(target), identity_ref, costs)
        return costs
