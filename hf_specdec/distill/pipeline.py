"""``distill()``: target in, drafter directory out. Generate (or reuse) data, compute soft labels,
pick the reduced head, build, train, measure, save.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from hf_specdec.drafters.base import ACCEPTANCE_ATTR

from .data import Record, build_prompts, eos_ids, generate_corpus, magpie_prompts, read_records
from .evaluate import agreement_flags, simulate_acceptance, step_cost_ms
from .model import build_drafter, grow_drafter, select_vocab_subset, vocab_subset_of
from .teacher import load_or_compute_topk
from .train import train_drafter

METRICS_FILE = "distill_metrics.json"


def resolve_target(target_path: str | Path) -> Path:
    """A model directory, or ``smollm2`` for the converted SmolLM2-135M-Instruct."""
    if str(target_path).lower() == "smollm2":
        from ..smollm2 import smollm2_path

        return smollm2_path()
    return Path(target_path)


def default_data_dir(out_dir: str | Path) -> Path:
    """Data lives beside the drafter, not in it, so the drafter directory ships as is."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + "-data")


def _magpie(target, tokenizer, path: Path, count: int, seed: int, progress: bool) -> list[str]:
    """The Magpie prompts, kept beside the corpus so a resumed run does not write them again."""
    cached = json.loads(path.read_text()) if path.exists() else []
    if len(cached) < count:
        cached += [p for p in magpie_prompts(target, tokenizer, count - len(cached), seed=seed + len(cached),
                                             progress=progress) if p not in cached]
        path.write_text(json.dumps(cached))
    return cached[:count]


@dataclass
class Prepared:
    """The target, its tokenizer (left padding; `padding_side` was its own) and the data both kinds train on."""

    target: torch.nn.Module
    tokenizer: object
    padding_side: str
    eos: set[int]
    corpora: list[Path]  # the generated corpus first, then the extra ones
    per_corpus: list[list[Record]]
    eval_data: Path
    eval_records: list[Record]
    generation_minutes: float

    @property
    def records(self) -> list[Record]:
        return [record for part in self.per_corpus for record in part]


def prepare_data(
    target_path: str | Path,
    out_dir: Path,
    *,
    data: str | Path | None,
    eval_data: str | Path | None,
    extra_data: Sequence[str | Path],
    num_prompts: int | None,
    num_magpie: int,
    sampled_fraction: float,
    generate: bool,
    max_new_tokens: int,
    gen_batch_size: int,
    num_eval_prompts: int,
    seed: int,
    progress: bool,
    eval_set: str = "templates",
) -> Prepared:
    """Loads the target and generates (or reuses) the responses to train and to measure on: template prompts
    and `num_magpie` prompts the target writes itself, appended per prompt so a rerun resumes; held-out
    greedy responses to prompts whose templates and topics are not in the training ones (`eval_set`
    "templates"), or to the hand-written chat requests ("heldout"), refused when one shares a token run with a
    training prompt (`heldout.check_disjoint`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir = resolve_target(target_path)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    eos = eos_ids(target, tokenizer)
    data = Path(data) if data is not None else default_data_dir(out_dir) / "train.jsonl"
    eval_data = Path(eval_data) if eval_data is not None else data.with_name("eval.jsonl")
    gen_args = dict(max_new_tokens=max_new_tokens, batch_size=gen_batch_size, seed=seed, progress=progress)
    started = time.monotonic()
    if generate:
        data.parent.mkdir(parents=True, exist_ok=True)
        prompts = build_prompts("train", seed)[:num_prompts]
        if num_magpie:
            prompts += _magpie(target, tokenizer, data.with_suffix(".magpie.json"), num_magpie, seed, progress)
        generate_corpus(target, tokenizer, data, prompts, sampled_fraction=sampled_fraction, **gen_args)
    corpora = [data, *map(Path, extra_data)]
    per_corpus = [read_records(path, eos) if path.exists() else [] for path in corpora]
    if eval_set == "heldout":
        from .heldout import check_disjoint
        from .heldout_requests import HELDOUT_REQUESTS

        eval_prompts = list(HELDOUT_REQUESTS[:num_eval_prompts])
        check_disjoint(tokenizer, eval_prompts, [record for part in per_corpus for record in part])
    elif eval_set == "templates":
        eval_prompts = build_prompts("eval", seed)[:num_eval_prompts]
    else:
        raise ValueError(f"eval_set is 'templates' or 'heldout', not {eval_set!r}")
    generate_corpus(target, tokenizer, eval_data, eval_prompts, sampled_fraction=0.0, **gen_args)
    wanted = set(eval_prompts)
    return Prepared(
        target=target, tokenizer=tokenizer, padding_side=padding_side, eos=eos, corpora=corpora,
        per_corpus=per_corpus, eval_data=eval_data,
        eval_records=[r for r in read_records(eval_data, eos) if r.greedy and (r.prompt is None or r.prompt in wanted)],
        generation_minutes=(time.monotonic() - started) / 60,
    )


def distill(
    target_path: str | Path,
    out_dir: str | Path,
    *,
    data: str | Path | None = None,
    eval_data: str | Path | None = None,
    extra_data: Sequence[str | Path] = (),
    num_prompts: int | None = 256,
    num_magpie: int = 0,
    sampled_fraction: float = 0.5,
    generate: bool = True,
    max_new_tokens: int = 192,
    gen_batch_size: int = 32,
    num_eval_prompts: int = 24,
    hidden_size: int = 180,
    num_layers: int = 2,
    init_layers: Sequence[int] | None = None,
    init_from: str | Path | None = None,
    vocab_size: int | None = 4096,
    topk: int = 32,
    soft_weight: float = 1.0,
    hard_weight: float = 0.1,
    steps: int = 2000,
    batch_size: int = 16,
    lr: float = 3e-3,
    max_minutes: float | None = None,
    gamma: int = 4,
    save_dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Train a drafter for a causal LM target and save it as a Hugging Face model directory.

    Args:
        target_path: model directory loadable by ``AutoModelForCausalLM`` (or ``"smollm2"``).
        out_dir: where the drafter (safetensors, config, tokenizer, metrics) is written.
        data: training corpus JSONL, appended to when ``generate`` (default: ``<out_dir>-data/train.jsonl``).
        eval_data: held-out greedy responses (default: ``eval.jsonl`` beside ``data``); generated from
            prompts whose topics are not in the training prompts when missing or short.
        extra_data: more corpora (same JSONL format) to train on as they are, e.g. an earlier run's.
        num_prompts: training prompts to answer greedily; None for all.
        num_magpie: prompts the target writes itself (Magpie) to answer as well.
        sampled_fraction: share of those prompts also answered by sampling.
        generate: False to use ``data`` as it is.
        init_layers: target layers projected into the drafter as its layers (else ``num_layers``
            random ones).
        init_from: a drafter directory to continue training instead of building a new one: its
            width, head subset and weights are kept, and it grows to ``num_layers`` layers when that
            is more than it has (see ``grow_drafter``).
        vocab_size: size of the reduced head (None: full vocabulary).
        soft_weight, hard_weight: loss weights, see ``train_drafter``.

    Returns:
        the metrics also written to ``out_dir/distill_metrics.json``.
    """
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    # 1. data: the target's own responses (resumable: done prompts are skipped)
    prepared = prepare_data(
        target_path, out_dir, data=data, eval_data=eval_data, extra_data=extra_data, num_prompts=num_prompts,
        num_magpie=num_magpie, sampled_fraction=sampled_fraction, generate=generate, max_new_tokens=max_new_tokens,
        gen_batch_size=gen_batch_size, num_eval_prompts=num_eval_prompts, seed=seed, progress=progress,
    )
    target, tokenizer, eos = prepared.target, prepared.tokenizer, prepared.eos
    corpora, per_corpus, records = prepared.corpora, prepared.per_corpus, prepared.records
    eval_data, eval_records, generation_minutes = prepared.eval_data, prepared.eval_records, prepared.generation_minutes

    # 2. soft labels, computed once per corpus and cached beside it
    teacher = None
    if soft_weight > 0:
        parts = [load_or_compute_topk(target, part, path, topk, progress) for path, part in zip(corpora, per_corpus)]
        teacher = {name: torch.cat([part[name] for part in parts]) for name in parts[0]}

    # 3. the drafter: reduced head over the most frequent response tokens, or an earlier drafter
    if init_from is not None:
        drafter = AutoModelForCausalLM.from_pretrained(init_from, dtype=torch.float32)
        drafter = grow_drafter(drafter, num_layers, seed)
        hidden_size = drafter.config.hidden_size
        subset = vocab_subset_of(drafter)
        vocab_size = None if subset is None else len(subset)
    else:
        subset = None
        if vocab_size is not None and vocab_size < target.config.vocab_size:
            subset = select_vocab_subset(records, vocab_size, always=sorted(eos))
        drafter = build_drafter(
            target, hidden_size=hidden_size, num_layers=num_layers, init_layers=init_layers,
            vocab_subset=subset, seed=seed,
        )

    # 4. train
    started = time.monotonic()
    losses = train_drafter(
        drafter, records, teacher, steps=steps, batch_size=batch_size, lr=lr,
        soft_weight=soft_weight, hard_weight=hard_weight, max_minutes=max_minutes, seed=seed,
        progress=progress,
    )
    train_minutes = (time.monotonic() - started) / 60

    # 5. measure with the weights we ship (rounded to save_dtype), computing in the target's fp32
    drafter = drafter.to(save_dtype).float()
    flags = agreement_flags(target, drafter, eval_records)
    agreement = simulate_acceptance(flags, gamma)
    # The on-path acceptance of one draft per step: what the default policy starts from (Drafter.expected_acceptance).
    alpha_gamma1 = simulate_acceptance(flags, 1).acceptance_rate
    setattr(drafter.config, ACCEPTANCE_ATTR, alpha_gamma1)
    drafter_ms = step_cost_ms(drafter)
    target_ms = step_cost_ms(target)
    metrics = {
        **agreement.as_dict(),
        "alpha_gamma1": alpha_gamma1,
        "drafter_step_ms": drafter_ms,
        "target_step_ms": target_ms,
        "step_cost_ratio": drafter_ms / target_ms,
        "drafter_params": sum(p.numel() for p in drafter.parameters()),
        "train_records": len(records),
        "train_response_tokens": sum(r.response_len for r in records),
        "eval_records": len(eval_records),
        "generation_minutes": generation_minutes,
        "train_minutes": train_minutes,
        "train_steps": len(losses),
        "final_loss": sum(losses[-20:]) / max(len(losses[-20:]), 1),
        "data": [str(path) for path in corpora],
        "eval_data": str(eval_data),
        "config": dict(
            hidden_size=hidden_size, num_layers=drafter.config.num_hidden_layers,
            init_layers=list(init_layers) if init_layers is not None else None,
            init_from=str(init_from) if init_from is not None else None,
            vocab_size=vocab_size, topk=topk, soft_weight=soft_weight, hard_weight=hard_weight,
            steps=steps, batch_size=batch_size, lr=lr, seed=seed,
        ),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    drafter.to(save_dtype).save_pretrained(out_dir, safe_serialization=True)
    tokenizer.padding_side = prepared.padding_side
    tokenizer.save_pretrained(out_dir)
    (out_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics
