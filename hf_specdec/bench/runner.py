"""The benchmark session: models, prompt sets, the methods compared, and a memo of measurements.

Contract: `Bench.run(method, ...)` times one method (a `Method`: a label plus a generate callable) on
one prompt set at one batch size and decoding mode, at most once per session: sections that need the
same measurement (the batch-1 plain baseline, the sweep's best gamma) share it, and every method sees
the same prompts, seeds and generate() arguments. `Bench.run_side_by_side(methods, ...)` times a group
with plain generate() interleaved, batch by batch, for ratios that a drifting machine cannot bend.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel

from hf_specdec.bench import prompts as prompt_sets
from hf_specdec.bench.measure import (
    GenerateFn, Measurement, first_difference, median_interval, paired_ratios, time_side_by_side,
)
from hf_specdec.bench.models import unrelated_drafter
from hf_specdec.distill.evaluate import step_cost_ms

MODES = ("greedy", "sampled")

#: The coverage asked of a paired median's interval (`median_interval`): with 8 calls per method it is 93 %.
INTERVAL_LEVEL = 0.9
# In half precision, a row whose first differing token comes after a position where plain generate()'s own
# top two logits were closer than measure.TIE_TOLERANCE still counts as identical ("tie-identical"); raw
# identity is reported beside it.

@dataclass
class BenchConfig:
    sections: tuple[str, ...] = (
        "plain", "gamma", "hf", "batch", "bound", "default", "feature", "trees", "int8", "datagen", "policy", "lookup",
    )
    modes: tuple[str, ...] = MODES
    max_new_tokens: int = 128
    num_prompts: int = 16
    gammas: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    batch_sizes: tuple[int, ...] = (1, 4, 8)
    lookup_batch_sizes: tuple[int, ...] = (1, 4)
    lookup_tokens: int = 10  # drafts per step for both prompt-lookup implementations
    gamma: int = 4  # used where the best gamma is needed but the sweep did not run
    temperature: float = 0.7
    threads: int = 2
    repeats: int = 1
    min_pairs: int = 0  # side-by-side groups repeat until each method has this many timed calls (batches x repeats)
    seed: int = 0
    drafter_path: str | None = None  # on disk, for sections that reload the drafter (int8)
    dtype: str = "float32"  # the target's, for the report
    ignore_eos: bool = False  # every row generates max_new_tokens (EOS does not stop it) and all are counted
    feature_gammas: tuple[int, ...] = (1, 2, 3, 4)
    tree_shapes: tuple[tuple[int, int, int], ...] = ((4, 4, 16), (4, 3, 8), (8, 6, 32))  # (top_k, depth, nodes)
    datagen_batch_size: int = 32
    out: Path = field(default_factory=lambda: Path("bench-results"))

    def to_dict(self) -> dict[str, Any]:
        return {name: str(value) if isinstance(value, Path) else value for name, value in self.__dict__.items()}


@dataclass(frozen=True)
class Method:
    """A named way to generate: `key` identifies it in the memo, `generate` runs it."""

    key: tuple
    generate: GenerateFn = field(compare=False)


@contextlib.contextmanager
def _overridden(config: GenerationConfig, settings: dict[str, Any]):
    """Sets attributes of a generation config and restores them, even on error."""
    saved = {name: getattr(config, name, None) for name in settings}
    try:
        for name, value in settings.items():
            setattr(config, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


class Bench:
    """One benchmark session over a target, its drafter and a tokenizer."""

    def __init__(
        self,
        target: PreTrainedModel,
        drafter: PreTrainedModel,
        tokenizer,
        config: BenchConfig,
        progress=None,
        feature_drafter=None,
    ):
        self.target, self.drafter, self.tokenizer, self.config = target, drafter, tokenizer, config
        self.feature_drafter = feature_drafter  # a hf_specdec FeatureDrafter, or None
        self._unrelated = None
        self.progress = progress  # anything with update(n) and set_postfix_str(s), e.g. tqdm
        eos = target.generation_config.eos_token_id
        eos = [] if eos is None else eos if isinstance(eos, (list, tuple)) else [eos]
        self.eos_ids = {int(token) for token in eos}
        # Tokens are counted up to each row's first EOS, unless EOS is ignored: then every token counts.
        self.counted_eos = set() if config.ignore_eos else self.eos_ids
        pad = target.generation_config.pad_token_id
        self.pad_token_id = int(pad if pad is not None else min(self.eos_ids, default=0))
        self.prompt_ids = {
            "chat": prompt_sets.encode(tokenizer, prompt_sets.CHAT_PROMPTS[: config.num_prompts]),
            "grounded": prompt_sets.encode(tokenizer, prompt_sets.grounded_prompts()[: config.num_prompts]),
        }
        self.memo: dict[tuple, list[Measurement]] = {}  # one Measurement per method timed together
        self.step_costs: dict[str, float] = {}  # ms of one cached forward, by model name (and width)
        self.best_gamma: dict[str, int] = {}  # per mode, set by the gamma sweep

    # Methods ------------------------------------------------------------------------------------

    def plain(self) -> Method:
        def generate(inputs, stats, **kwargs):
            return self.target.generate(**inputs, **kwargs)

        return Method(("plain",), generate)

    def plain_again(self) -> Method:
        """Plain generate() under a key of its own: timed side by side with plain, an A/A control whose ratio
        (1 but for noise) states the noise floor of its group."""
        return Method(("plain", "again"), self.plain().generate)

    def specdec(self, gamma: int | str | None, drafter: Any = None, label: str = "drafter") -> Method:
        """hf_specdec with `drafter` (the session's drafter by default) and `gamma` (an int, a policy, or
        None for the default policy)."""
        drafter = self.drafter if drafter is None else drafter

        def generate(inputs, stats, **kwargs):
            extra = {} if stats is None else {"stats": stats}
            return self.target.generate(**inputs, drafter=drafter, gamma=gamma, **extra, **kwargs)

        return Method(("hf_specdec", label, gamma), generate)

    def hf_assisted(self, **assistant_settings) -> Method:
        """transformers' assisted generation with the session's drafter; `assistant_settings` are set on
        the assistant's generation config (where transformers reads num_assistant_tokens) for the call."""

        def generate(inputs, stats, **kwargs):
            with _overridden(self.drafter.generation_config, assistant_settings):
                return self.target.generate(**inputs, assistant_model=self.drafter, **kwargs)

        return Method(("hf_assisted", tuple(sorted(assistant_settings.items()))), generate)

    def hf_prompt_lookup(self, num_tokens: int) -> Method:
        def generate(inputs, stats, **kwargs):
            return self.target.generate(**inputs, prompt_lookup_num_tokens=num_tokens, **kwargs)

        return Method(("hf_prompt_lookup", num_tokens), generate)

    @property
    def unrelated(self) -> PreTrainedModel:
        """A drafter that knows nothing: the session drafter's architecture with fresh random weights
        (same vocabulary), for the never-slower-than-plain check. It declares no acceptance (the drafter's
        `hf_specdec_acceptance` is not its own), so the default starts it from 0.5, as any drafter nobody measured."""
        if self._unrelated is None:
            self._unrelated = unrelated_drafter(self.drafter, self.config.seed)
        return self._unrelated

    # Measuring ----------------------------------------------------------------------------------

    def generate_kwargs(self, mode: str) -> dict[str, Any]:
        kwargs = {"max_new_tokens": self.config.max_new_tokens, "pad_token_id": self.pad_token_id}
        if self.config.ignore_eos:
            kwargs["eos_token_id"] = None
        if mode == "greedy":
            return {**kwargs, "do_sample": False}
        # Pure temperature sampling: transformers would otherwise add its default top_k=50.
        return {**kwargs, "do_sample": True, "temperature": self.config.temperature, "top_k": 0, "top_p": 1.0}

    def run(self, method: Method, mode: str, batch_size: int = 1, prompts: str = "chat") -> Measurement:
        """`method` timed on the prompt set `prompts` at `batch_size` in `mode` (memoized)."""
        name = "/".join(str(part) for part in method.key if not isinstance(part, tuple))
        (measurement,) = self._timed((method.key, mode, batch_size, prompts), [method], name, mode, batch_size, prompts)
        return measurement

    def run_side_by_side(
        self, methods: list[Method], mode: str, batch_size: int = 1, prompts: str = "chat"
    ) -> list[Measurement]:
        """`methods` timed side by side (`time_side_by_side`, plain generate() first), memoized as a group:
        measurements of one group are comparable with each other, not with solo ones."""
        methods = [self.plain(), *[method for method in methods if method.key != ("plain",)]]
        key = ("side by side", tuple(method.key for method in methods), mode, batch_size, prompts)
        return self._timed(key, methods, f"{len(methods)} methods side by side", mode, batch_size, prompts)

    def _timed(
        self, key: tuple, methods: list[Method], name: str, mode: str, batch_size: int, prompts: str
    ) -> list[Measurement]:
        """The measurements of `methods` timed together (one method: alone), memoized under `key`."""
        if key not in self.memo:
            if self.progress is not None:
                self.progress.set_postfix_str(f"{name} {mode} b={batch_size} {prompts}")
            batches = prompt_sets.batches(self.prompt_ids[prompts], batch_size, self.pad_token_id)
            repeats = max(self.config.repeats, math.ceil(self.config.min_pairs / len(batches)))
            self.memo[key] = time_side_by_side(
                [method.generate for method in methods],
                batches,
                self.generate_kwargs(mode),
                self.counted_eos,
                seed=self.config.seed,
                repeats=repeats,
                collect_stats=[method.key[0] == "hf_specdec" for method in methods],
            )
            self._tick()
        return self.memo[key]

    def rows_side_by_side(
        self, methods: list[tuple[Method, dict[str, Any]]], mode: str, batch_size: int = 1, prompts: str = "chat"
    ) -> list[dict[str, Any]]:
        """One result row per (method, labels), timed side by side with plain generate(). Each row's
        `speedup` is paired (`paired_speedup`: the median over calls of the ratio to plain's call on the same
        batch in the same repeat); `speedup_of_totals` is the ratio of the median totals over repeats that
        unpaired rows give (see `row`), and `speedup_range` the lowest and highest ratio of one repeat's
        totals, so a reader sees how far the noise of this run moves a ratio; `speedup_interval` is the paired
        median's distribution-free interval (`median_interval` at `INTERVAL_LEVEL`, from 5 calls per method up): a
        ratio whose interval holds the goal's bar is not told apart from it by this run. Every row says it was timed
        so (`timing: side by side`).

        Where the group holds `plain_again()`, plain generate() was timed twice per batch: its row compares the
        two timings (the A/A control), and every other row compares with their mean (`Measurement.mean_of`),
        whose per-call noise is half the variance of one timing's."""
        plain, *measured = self.run_side_by_side([method for method, _ in methods], mode, batch_size, prompts)
        again_key = self.plain_again().key
        is_again = [method.key == again_key for method, _ in methods]
        baseline = Measurement.mean_of([plain, *(m for m, again in zip(measured, is_again) if again)])
        rows = []
        for measurement, (_, labels), again in zip(measured, methods, is_again):
            reference = plain if again else baseline
            row = {**self._row(measurement, reference, mode, batch_size, prompts, labels), "timing": "side by side"}
            row["speedup_of_totals"] = row["speedup"]
            pairs = paired_ratios(measurement, reference)
            row["speedup"] = round(statistics.median(pairs), 4) if pairs else 0.0  # measure.paired_speedup
            row["speedup_pairs"] = [round(ratio, 4) for ratio in pairs]  # JSON only: runs of one setting pool them
            interval = median_interval(pairs, INTERVAL_LEVEL)
            if interval is not None:
                row["speedup_interval"] = [round(interval[0], 4), round(interval[1], 4)]
            ratios = [
                ours / theirs
                for ours, theirs in zip(measurement.repeat_tokens_per_s, reference.repeat_tokens_per_s)
                if theirs > 0
            ]
            if ratios:
                row["speedup_range"] = [round(min(ratios), 4), round(max(ratios), 4)]
            rows.append(row)
        return rows

    def step_cost(self, name: str, model: PreTrainedModel, num_tokens: int = 1) -> float:
        """`step_cost_ms` of `model` feeding `num_tokens` after the first chat prompt, memoized under `name`."""
        if name not in self.step_costs:
            # threads=None: the bench has set torch's threads for the whole run.
            self.step_costs[name] = step_cost_ms(
                model, self.prompt_ids["chat"][0], num_tokens=num_tokens, steps=20, threads=None
            )
            self._tick()
        return self.step_costs[name]

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress.update(1)

    def row(
        self, method: Method, mode: str, batch_size: int = 1, prompts: str = "chat", /, **labels
    ) -> dict[str, Any]:
        """A result row: the measurement, its speedup over plain generate() on the same prompts, batch
        size and mode, and (greedy) how many outputs equal plain greedy's."""
        measured = self.run(method, mode, batch_size, prompts)
        baseline = self.run(self.plain(), mode, batch_size, prompts)
        return self._row(measured, baseline, mode, batch_size, prompts, labels)

    def _row(
        self, measured: Measurement, baseline: Measurement, mode: str, batch_size: int, prompts: str, labels: dict
    ) -> dict[str, Any]:
        row = {**labels, "mode": mode, "batch_size": batch_size, "prompts": prompts}
        row.update(
            tokens=measured.tokens,
            seconds=round(measured.seconds, 4),
            tokens_per_s=round(measured.tokens_per_s, 3),
            speedup=round(measured.tokens_per_s / baseline.tokens_per_s, 4) if baseline.tokens_per_s else None,
        )
        if measured.stats is not None:
            row.update(
                acceptance_rate=round(measured.stats.acceptance_rate, 4),
                tokens_per_step=round(measured.stats.tokens_per_step, 4),
            )
        if mode == "greedy":
            row.update(
                exact_rows=sum(a == b for a, b in zip(measured.outputs, baseline.outputs)),
                num_rows=len(measured.outputs),
            )
            if next(self.target.parameters()).dtype != torch.float32:
                row["tie_exact_rows"] = sum(
                    a == b or self._near_tie(prompt, b, a)
                    for prompt, a, b in zip(self.prompt_ids[prompts], measured.outputs, baseline.outputs)
                )
        return row

    def _near_tie(self, prompt: list[int], plain: list[int], other: list[int]) -> bool:
        """Whether `other` first departs from `plain` at a near-tie of plain's own top two logits."""
        difference = first_difference(self.target, prompt, plain, other)
        return difference is not None and difference.near_tie

    def gamma_for(self, mode: str) -> int:
        """The sweep's fastest gamma for `mode`, or the configured gamma when the sweep did not run."""
        return self.best_gamma.get(mode, self.config.gamma)
