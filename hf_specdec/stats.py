"""Speculative decoding statistics: what was drafted, accepted and emitted, per row and in total.

Contract: the loop calls `record_step` once per verification step (or counts its plain steps and records them at
once, `record_plain_steps`); everything users read (acceptance rate, tokens per target forward, histograms) is
derived from the counters, never stored twice.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

import torch


#: Serializes `SpeculativeStats.merge` across threads (one lock for all: a merge is a few small concatenations a call).
_MERGE_LOCK = threading.Lock()


@dataclass
class SpeculativeStats:
    """Counters of one or more speculative generate() calls.

    Per-row tensors have one entry per row of the batch (rows of later calls are appended by `merge`).
    `accepted_histogram[b, k]` counts the steps in which row b accepted exactly k drafts,
    `drafted_histogram[b, k]` those in which it was proposed k (0: a plain target step).
    """

    drafted: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # [rows]
    accepted: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # [rows]
    emitted: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # [rows]
    steps: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))  # [rows]
    accepted_histogram: torch.Tensor = field(
        default_factory=lambda: torch.zeros(0, 1, dtype=torch.long)
    )  # [rows, max_gamma + 1]
    drafted_histogram: torch.Tensor = field(
        default_factory=lambda: torch.zeros(0, 1, dtype=torch.long)
    )  # [rows, max_gamma + 1]
    target_forwards: int = 0
    drafter_forwards: int = 0
    #: Draft trees (`TreeDraftPolicy`): tree_size_histogram[b, n] counts the steps in which row b's tree had n
    #: drafted nodes (for a tree step, `drafted` counts its depth). Zero columns for chain calls.
    tree_size_histogram: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 1, dtype=torch.long))  # [rows, max_nodes + 1]

    @classmethod
    def empty(cls, batch_size: int, max_gamma: int) -> "SpeculativeStats":
        zeros = torch.zeros(batch_size, dtype=torch.long)
        return cls(
            drafted=zeros.clone(),
            accepted=zeros.clone(),
            emitted=zeros.clone(),
            steps=zeros.clone(),
            accepted_histogram=torch.zeros(batch_size, max_gamma + 1, dtype=torch.long),
            drafted_histogram=torch.zeros(batch_size, max_gamma + 1, dtype=torch.long),
        )

    def __getitem__(self, row: int) -> "SpeculativeStats":
        """Row `row`'s counters (the forward counts are the calls'): what code splitting generate()'s output by row
        gets (Whisper's generate() does, and rebuilds the output from the fields it knows, leaving this one out)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["tree_size_histogram"] = self._tree_sizes()
        return SpeculativeStats(**{name: value[row : row + 1] if isinstance(value, torch.Tensor) else value
                                   for name, value in values.items()})

    def cpu(self) -> "SpeculativeStats":
        """Itself: the counters live on the CPU."""
        return self

    def record_step(
        self,
        active: torch.Tensor,  # [batch] bool, rows that took part in this step
        num_drafted: torch.Tensor,  # [batch] drafts proposed to each row
        num_accepted: torch.Tensor,  # [batch] drafts accepted
        num_emitted: torch.Tensor,  # [batch] tokens committed (after stopping criteria)
    ) -> None:
        # One copy to the host (on a GPU each copy waits for the device), not four.
        active, num_drafted, num_accepted, num_emitted = torch.stack(
            [active.long(), num_drafted.long(), num_accepted.long(), num_emitted.long()]
        ).cpu()
        self.drafted += num_drafted * active
        self.accepted += num_accepted * active
        self.emitted += num_emitted * active
        self.steps += active
        rows = torch.arange(len(active))  # every row adds its step, inactive rows add 0
        self.accepted_histogram.index_put_((rows, num_accepted), active, accumulate=True)
        self.drafted_histogram.index_put_((rows, num_drafted), active, accumulate=True)

    def record_plain_steps(self, steps: torch.Tensor) -> None:
        """`steps[b]` ([batch] long) plain steps of row b (no drafts, one token each), counted at once: cheaper than
        a `record_step` per step."""
        steps = steps.cpu()
        self.emitted += steps
        self.steps += steps
        self.accepted_histogram[:, 0] += steps
        self.drafted_histogram[:, 0] += steps

    def merge(self, other: "SpeculativeStats") -> None:
        """Appends the rows of another call (e.g. the next pipeline batch) and adds its forward counts. Calls that share
        one stats object from several threads (a pipeline built with `stats=` in a web app) merge one at a time, and
        the counters change together, so a reader sees them before or after a merge, never half of one."""
        with _MERGE_LOCK:
            width = max(self.accepted_histogram.shape[1], other.accepted_histogram.shape[1],
                        self.drafted_histogram.shape[1], other.drafted_histogram.shape[1])

            def widen(hist: torch.Tensor) -> torch.Tensor:
                return torch.nn.functional.pad(hist, (0, width - hist.shape[1]))

            own, theirs = self._tree_sizes(), other._tree_sizes()
            sizes = max(own.shape[1], theirs.shape[1])
            pad = lambda hist: torch.nn.functional.pad(hist, (0, sizes - hist.shape[1]))  # noqa: E731
            merged = {name: torch.cat([getattr(self, name), getattr(other, name)])
                      for name in ("drafted", "accepted", "emitted", "steps")}
            merged.update(
                accepted_histogram=torch.cat([widen(self.accepted_histogram), widen(other.accepted_histogram)]),
                drafted_histogram=torch.cat([widen(self.drafted_histogram), widen(other.drafted_histogram)]),
                tree_size_histogram=torch.cat([pad(own), pad(theirs)]),
                target_forwards=self.target_forwards + other.target_forwards,
                drafter_forwards=self.drafter_forwards + other.drafter_forwards,
            )
            self.__dict__.update(merged)  # one step under the GIL: every counter at once

    def record_tree(self, active: torch.Tensor, num_nodes: torch.Tensor, max_nodes: int) -> None:
        """A tree step: row b (if `active[b]`) drafted a tree of `num_nodes[b]` nodes ([batch] long, the root
        not counted), at most `max_nodes`."""
        hist = self._tree_sizes()
        if hist.shape[1] < max_nodes + 1:
            hist = torch.nn.functional.pad(hist, (0, max_nodes + 1 - hist.shape[1]))
        rows = torch.arange(len(active))
        num_nodes, active = torch.stack([num_nodes.long(), active.long()]).cpu()  # one copy to the host
        hist.index_put_((rows, num_nodes), active, accumulate=True)
        self.tree_size_histogram = hist

    def _tree_sizes(self, rows: int | None = None) -> torch.Tensor:
        """tree_size_histogram with one row per row of the counters (`rows` of them; rows of chain calls: zeros)."""
        rows = len(self.drafted) if rows is None else rows
        hist = self.tree_size_histogram
        if hist.shape[0] != rows:
            hist = torch.zeros(rows, max(hist.shape[1], 1), dtype=torch.long)
        return hist

    @property
    def tree_sizes(self) -> torch.Tensor:
        """[max_nodes + 1] steps whose tree had exactly n drafted nodes, summed over rows (trees only)."""
        return self._tree_sizes().sum(dim=0)

    @property
    def acceptance_rate(self) -> float:
        """alpha: accepted drafts / drafted tokens, over all rows."""
        return int(self.accepted.sum()) / max(int(self.drafted.sum()), 1)

    @property
    def row_acceptance_rate(self) -> torch.Tensor:
        """[rows] float, alpha of each row."""
        return self.accepted / self.drafted.clamp_min(1)

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a row commits per target forward it takes part in (1 = no speed-up)."""
        return int(self.emitted.sum()) / max(int(self.steps.sum()), 1)

    @property
    def row_tokens_per_step(self) -> torch.Tensor:
        """[rows] float, tokens committed per target forward, per row."""
        return self.emitted / self.steps.clamp_min(1)

    @property
    def histogram(self) -> torch.Tensor:
        """[max_gamma + 1] steps that accepted exactly k drafts, summed over rows."""
        return self.accepted_histogram.sum(dim=0)

    @property
    def draft_lengths(self) -> torch.Tensor:
        """[max_gamma + 1] steps that proposed exactly k drafts (0: plain steps), summed over rows."""
        return self.drafted_histogram.sum(dim=0)

    def summary(self) -> str:
        """One line for logs and the CLI; after tree steps, `tree_sizes={nodes: steps}` for the sizes drafted (the
        drafted histogram then counts each tree's depth)."""
        line = (
            f"alpha={self.acceptance_rate:.3f} tokens/target-forward={self.tokens_per_step:.2f} "
            f"emitted={int(self.emitted.sum())} target_forwards={self.target_forwards} "
            f"drafter_forwards={self.drafter_forwards} accepted_hist={self.histogram.tolist()} "
            f"drafted_hist={self.draft_lengths.tolist()}"
        )
        sizes = {n: count for n, count in enumerate(self.tree_sizes.tolist()) if count}
        return f"{line} tree_sizes={sizes}" if sizes else line

    def to_dict(self) -> dict:
        return {
            "acceptance_rate": self.acceptance_rate,
            "tokens_per_step": self.tokens_per_step,
            "target_forwards": self.target_forwards,
            "drafter_forwards": self.drafter_forwards,
            "drafted": self.drafted.tolist(),
            "accepted": self.accepted.tolist(),
            "emitted": self.emitted.tolist(),
            "steps": self.steps.tolist(),
            "accepted_histogram": self.accepted_histogram.tolist(),
            "drafted_histogram": self.drafted_histogram.tolist(),
            "tree_size_histogram": self._tree_sizes().tolist(),
        }
