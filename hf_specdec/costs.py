"""What the loop's steps cost and deliver on this machine, measured as calls run and remembered per setting.

Contract: `costs_for(target, drafter, device, rows, do_sample)` returns the setting's `StepCosts` (target, drafter
model, device, dtype, rows, torch threads, greedy or sampled), shared by its calls from any thread; the loop `record`s
each of the default's steps' drafting and verifying time (`Schedule.timed`) and the default asks `estimate(shape)`.
Output never depends on them; nothing here runs a model. `reset_costs()` forgets every setting (after moving a model).
"""

from __future__ import annotations

import statistics
import threading
import weakref
from collections import deque

import torch

#: Steps remembered per (part, kind, size); needed to trust their median (a few slow steps do not move it); the setting's
#: steps a size's last sample counts for (then it is unmeasured again, priced to be tried: slow steps never price for good).
SAMPLES, TRUSTED, AGE = 15, 3, 256
CALLS, FADE = 16, 0.99  # calls whose acceptance a setting remembers; the share of a shape's delivery kept per step


class StepCosts:
    """Milliseconds of the loop's steps at one setting: drafting `depth` levels and verifying `width` tokens per row,
    for chains (a plain step is a chain of 0) and trees, and what its recent calls accepted (`accepted`, `ranks`). A
    size's first step is no sample; a size is priced by the median of its latest SAMPLES steps (under TRUSTED: at most
    what the trusted sizes say; none in AGE steps: unmeasured), others by `_curve` up to twice the widest (pinned: not
    beyond). `StepCosts(verify_ms={1: 20.0, 5: 24.0}, draft_ms=2.0)` pins costs, ignoring what calls measure."""

    def __init__(self, verify_ms: dict[int, float] | None = None, draft_ms: float | None = None):
        self.pinned, self._lock = verify_ms is not None, threading.Lock()  # pinned: `record`, `remember` change nothing
        self._samples, self._medians, self._steps = {}, {}, 0  # size -> latest ms; -> (trusted, median, when); steps
        self._median: dict[tuple, float] = {}  # (part, kind, size) -> ms; replaced whole, read without the lock
        self.accepted: tuple[tuple, ...] = ()  # the setting's recent calls' (hits, trials) of rank-1 drafts by depth
        self.ranks, self.odds = (), None  # the last call's tree children by rank; drafts by band (`policy.odds_by_band`)
        self.delivered: dict = {}  # Shape -> (tokens committed, tokens expected) per row, fading; its step count
        self.paths: dict = {}  # tree Shape -> its rank-1 paths' (tokens, a chain's promise), alike (`deliver`'s `record`)
        if self.pinned:
            if 1 not in verify_ms:
                raise ValueError("pinned StepCosts need the plain step's cost: verify_ms[1].")
            self._median = {("draft", "chain", 1): float(draft_ms or 0.0),
                            **{("verify", "chain", int(width)): float(ms) for width, ms in verify_ms.items()}}

    def record(self, kind: str, depth: int, width: int, draft_ms: float | None, verify_ms: float) -> None:
        """A step of `kind` ("chain", "tree") that drafted `depth` levels (`draft_ms` None: no sample), verified `width`."""
        if self.pinned:
            return
        with self._lock:
            self._steps += 1
            for key, ms in ((("draft", kind, draft_ms and depth), draft_ms), (("verify", kind, width), verify_ms)):
                if key[2] and key not in self._samples:
                    self._samples[key] = deque(maxlen=SAMPLES)  # (a size's first step warms kernels: no sample)
                elif key[2]:
                    (samples := self._samples[key]).append(ms)
                    self._medians[key] = (len(samples) >= TRUSTED, statistics.median(samples), self._steps)
            for key in [key for key, (_, _, last) in self._medians.items() if last < self._steps - AGE]:
                self._samples[key].clear(), self._medians.pop(key)  # (not run for AGE steps: measured again when run)
            trusted = {key: ms for key, (sure, ms, _) in self._medians.items() if sure}  # a size with fewer samples: by
            self._median = {key: ms if sure else min(ms, _curve(trusted, *key) or ms)  # them, never above what the
                            for key, (sure, ms, _) in self._medians.items()}  # trusted say (replaced whole)

    def remember(self, accepted: tuple | None, ranks: tuple, odds: torch.Tensor | None = None) -> None:
        """A finished call's (hits, trials) of rank-1 drafts by depth (None: too few drafts to say), its tree children's
        fading (hits, trials) by rank and its drafter's odds by band: where the setting's next call starts."""
        if not self.pinned:
            with self._lock:  # replaced whole, read without the lock
                self.accepted = self.accepted if accepted is None else (*self.accepted, accepted)[-CALLS:]
                self.ranks, self.odds = ranks, odds

    def deliver(self, shape, committed: float, expected: float, record: str = "delivered") -> None:
        """A step of `shape` committed `committed` tokens per row where `expected` were expected (in `record`)."""
        if not self.pinned:
            with self._lock:  # replaced whole, read without the lock
                got, want, steps = (table := getattr(self, record)).get(shape, (0.0, 0.0, 0))
                setattr(self, record, {**table, shape: (FADE * got + committed, FADE * want + expected, steps + 1)})

    def estimate(self, shape) -> float | None:
        """Milliseconds of a step drafting `shape` (a `policy.Shape`; None: a plain step), or None while unpriced."""
        kind = "chain" if shape is None or shape.top_k == 0 else "tree"
        width, depth = (1, 0) if shape is None else (shape.width, shape.depth)
        verify = _curve(table := self._median, "verify", kind, width, reach=1 if self.pinned else 2)  # (one read)
        return None if verify is None else verify + (_curve(table, "draft", kind, depth) if depth else 0.0)

    def measured(self) -> dict[tuple, float]:
        """{(part, kind, size): ms} of everything measured (or pinned) so far."""
        return dict(self._median)


def _curve(table: dict, part: str, kind: str, size: int, reach: int = 0) -> float | None:
    """The `part` cost of `kind` at `size` from the measured points: between two linearly, beyond the widest as the
    widest (`_line`); drafting at the cheapest measured ms per level; a tree's verification as a chain's of its width
    plus the median difference its measured widths showed (nothing measured: no difference)."""
    plain = table.get(("verify", "chain", 1), 0.0)  # no chain verifies below the plain step: a draft nobody takes is not free
    chains = {k[2]: max(ms, plain) for k, ms in table.items() if k[:2] == ("verify", "chain")} if part == "verify" else {}
    points = chains if (part, kind) == ("verify", "chain") else {k[2]: table[k] for k in table if k[:2] == (part, kind)}
    if size in points:
        return points[size]
    if part == "draft":  # levels cost alike: the cheapest measured level's ms (a tree's from the chains' until measured)
        points = points or {key[2]: ms for key, ms in table.items() if key[:2] == ("draft", "chain")}
        return min((ms / level for level, ms in points.items()), default=0.0) * size
    widest = max((key[2] for key in table if key[0] == "verify"), default=0)
    if reach and size > reach * widest:
        return None
    if kind == "chain":  # (its points are the floored chain curve already)
        return _line(points, size)
    base = _line(chains, size)
    offsets = [ms - _line(chains, width) for width, ms in points.items()] if base is not None else []
    return base + max(0.0, statistics.median(offsets)) if offsets else base


def _line(points: dict[int, float], size: int) -> float | None:
    """Linear between two measured points (never falling); beyond them as the nearest: optimistic, so it is tried."""
    if not points or size in points:
        return points.get(size)
    below, above = [w for w in points if w < size], [w for w in points if w > size]
    if not below or not above:
        return points[max(below) if below else min(above)]
    low, high = max(below), min(above)
    return points[low] + max(0.0, (points[high] - points[low]) / (high - low)) * (size - low)


_registry: dict[tuple, tuple[weakref.ref, weakref.ref | None, StepCosts]] = {}
_lock = threading.Lock()


def _identity(drafter):
    """The object whose compute a drafter's cost is (its model or head), so a new wrapper of the same model shares;
    for a drafter without one, its class and settings (`drafter="prompt_lookup"` makes a new object every call)."""
    for name in ("model", "head"):
        if getattr(drafter, name, None) is not None:
            return getattr(drafter, name)
    try:
        return (type(drafter).__qualname__, tuple(sorted(vars(drafter).items())))
    except TypeError:  # settings that do not hash: the object itself
        return drafter


def costs_for(target, drafter, device: torch.device, rows: int, do_sample: bool) -> StepCosts:
    """The StepCosts of this setting, made on first use and kept while the target and the drafter's model live."""
    identity = _identity(drafter)
    described = isinstance(identity, tuple)  # a class and settings: part of the key itself
    key = (id(target), identity if described else id(identity), str(device), str(target.dtype), rows,
           torch.get_num_threads(), bool(do_sample))
    with _lock:
        stored = _registry.get(key)
        if stored is not None and stored[0]() is target and (stored[1] is None or stored[1]() is identity):
            return stored[2]
        costs = StepCosts()
        try:
            identity_ref = None if described else weakref.ref(identity)
        except TypeError:
            identity_ref = None
        _registry[key] = (weakref.ref(target), identity_ref, costs)
        return costs


def reset_costs() -> None:
    """Forgets every measured step cost; the next call of each setting measures afresh."""
    with _lock:
        _registry.clear()
