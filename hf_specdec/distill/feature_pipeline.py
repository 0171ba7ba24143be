"""``distill_feature_head()``: target in, EAGLE feature head directory out.

Generate (or reuse) the target's responses to template prompts and to prompts it wrote itself (Magpie),
store the target's hidden states over them once, pick the draft vocabulary, build the head from the
target, train it with the training-time test, measure agreement per draft depth and the head's step
cost, and save it in the published EAGLE layout. Every stage resumes: responses are appended per
prompt, features are stored per record, and the head is saved at every evaluation (continue from it
with ``init_from``).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Sequence

import torch

from hf_specdec.drafters.base import ACCEPTANCE_ATTR

from .feature_head import (
    build_feature_head, check_widening, evaluate_feature_head, train_feature_head, widen_vocab,
)
from .features import FeatureStore, LiveFeatures, extract_features, features_in_memory
from .model import DEFAULT_VOCAB_SIZE, select_vocab_subset
from .pipeline import METRICS_FILE, prepare_data


CURVE_FILE = "learning_curve.json"


def default_checkpoint(out_dir: Path) -> Path:
    """Beside the head, not in it, so the head directory ships as it is."""
    return out_dir.with_name(out_dir.name + "-checkpoint.pt")


def write_learning_curve(out_dir: Path, history: list[dict]) -> None:
    """`learning_curve.json` (held-out measurements vs response tokens trained on) and, when matplotlib is
    installed, `learning_curve.png`, so the next run can tell whether data, steps or capacity limits the head."""
    points = [{key: entry.get(key) for key in ("step", "tokens_seen", "loss", "alpha_gamma1", "per_depth", "coverage",
                                                "minutes")} for entry in history]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CURVE_FILE).write_text(json.dumps(points, indent=2) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return
    figure, axis = pyplot.subplots(figsize=(6, 4))
    tokens = [p["tokens_seen"] for p in points]
    axis.plot(tokens, [p["alpha_gamma1"] for p in points], marker="o", label="on-path α, γ = 1")
    axis.plot(tokens, [p["per_depth"][0] for p in points], marker=".", label="depth-1 agreement")
    axis.plot(tokens, [p["coverage"].get(4, p["coverage"].get("4")) for p in points], marker=".", label="depth-1 top-4")
    axis.set_xlabel("response tokens trained on")
    axis.set_ylabel("held-out")
    axis.set_ylim(0, 1)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(out_dir / "learning_curve.png", dpi=100)
    pyplot.close(figure)


def head_step_ratio(target, head, new_tokens: int = 16) -> dict:
    """ms of one head drafting step (as the loop measured it in a call drafting one token per step) and of one plain
    generate() step of the target, at batch 1 on a random 64-token prompt, and their ratio."""
    from hf_specdec.costs import costs_for
    from hf_specdec.dispatch import generate_with_drafter
    from hf_specdec.drafters.feature import FeatureDrafter
    from hf_specdec.policy import DraftPolicy

    class TimedChains(DraftPolicy):  # a fixed chain whose steps the loop times (it times only the default's otherwise)
        def start(self, batch_size, device, **call):
            schedule = super().start(batch_size, device, **call)
            schedule.timed = True
            return schedule

    drafter, device = FeatureDrafter(head), target.device
    ids = torch.randint(0, target.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(0)).to(device)
    lengths = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                   do_sample=False)
    generate_with_drafter(target, drafter, ids, gamma=TimedChains(max_gamma=1), **lengths)
    head_ms = costs_for(target, drafter, device, 1, False).measured()[("draft", "chain", 1)]
    start = time.perf_counter()
    target.generate(ids, **lengths)
    target_ms = (time.perf_counter() - start) * 1e3 / new_tokens
    return {"head_step_ms": head_ms, "target_step_ms": target_ms, "step_cost_ratio": head_ms / target_ms}


def distill_feature_head(
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
    max_new_tokens: int = 256,
    gen_batch_size: int = 32,
    num_eval_prompts: int = 24,
    kind: str = "eagle3",
    vocab_size: int | None = None,
    init_from: str | Path | None = None,
    ttt_steps: int = 3,
    steps: int = 2000,
    batch_size: int = 8,
    lr: float = 3e-4,
    max_minutes: float | None = None,
    eval_every: int = 250,
    gamma: int = 4,
    seed: int = 0,
    progress: bool = True,
    checkpoint_every: int | None = None,
    resume: bool = False,
    eval_set: str = "templates",
    live_features: bool = False,
    feature_dtype: torch.dtype | None = None,
    tv_weight: float = 0.0,
) -> dict:
    """Train an EAGLE feature head for a causal LM target and save it under `out_dir`.

    Args:
        target_path: model directory loadable by ``AutoModelForCausalLM`` (or ``"smollm2"``).
        data: the corpus JSONL, appended to when ``generate`` (default ``<out_dir>-data/train.jsonl``);
            its features go to ``<corpus>.features/``.
        extra_data: more corpora (same format) to train on as they are.
        num_prompts: template prompts to answer; num_magpie: prompts the target writes itself to answer.
        kind: "eagle3" (fused low/mid/high states, own head over ``vocab_size`` tokens) or "eagle1".
        vocab_size: an eagle3 head's draft vocabulary, the most frequent response tokens (0: the whole vocabulary;
            None: DEFAULT_VOCAB_SIZE for a new head, the head's own with ``init_from``, which a larger size widens:
            `widen_vocab`).
        init_from: a head directory to continue training (its layout is kept, and its vocabulary unless
            ``vocab_size`` widens it).
        ttt_steps: unrolled steps of the training-time test (1 = teacher forcing only).
        eval_every: measure and save every this many steps (0: only at the end); each measurement is a
            point of ``out_dir/learning_curve.json`` (and ``.png`` when matplotlib is installed).
        checkpoint_every: save ``<out_dir>-checkpoint.pt`` every this many steps (default: ``eval_every``).
        resume: continue from that checkpoint when it exists (without it, an existing one is refused).
        live_features: compute the target's states for each training batch instead of storing them (for
            corpora whose states do not fit the disk: ~4.6 KB a token for a 576-wide target; each step then
            pays a target forward over its records).
        eval_set: "templates" (the tool's held-out templates and topics) or "heldout" (the hand-written
            chat requests, checked for leaks into the training prompts) for the measurements.
        feature_dtype: the dtype the target computes the training states in (None: its own). bfloat16 on a
            CPU that computes it is ~2.6x the tokens/s of float32 (Zen 5); the measurements always use the
            target's own precision, recomputed in memory.
        tv_weight: weight of the sampling rejection rate 1 − Σ min(p, q) added to the KL loss (`train_feature_head`).

    Returns:
        the metrics also written to ``out_dir/distill_metrics.json``.
    """
    from hf_specdec.eagle import load_feature_head, save_feature_head

    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    checkpoint_path = default_checkpoint(out_dir)
    if checkpoint_path.exists() and not resume:
        raise ValueError(f"{checkpoint_path} holds an earlier run of this head; pass --resume to continue it, or "
                         "delete it to start again.")
    earlier = None if init_from is None else load_feature_head(init_from)  # loaded first: a refusal costs no data
    if earlier is not None and vocab_size:
        check_widening(earlier, vocab_size)
    # 1. Data: the target's own responses (appended per prompt, so a rerun resumes).
    prepared = prepare_data(
        target_path, out_dir, data=data, eval_data=eval_data, extra_data=extra_data, num_prompts=num_prompts,
        num_magpie=num_magpie, sampled_fraction=sampled_fraction, generate=generate, max_new_tokens=max_new_tokens,
        gen_batch_size=gen_batch_size, num_eval_prompts=num_eval_prompts, seed=seed, progress=progress,
        eval_set=eval_set,
    )
    target, eos, records, eval_records = prepared.target, prepared.eos, prepared.records, prepared.eval_records
    corpora, eval_data = prepared.corpora, prepared.eval_data

    # 2. The head: from an earlier one, or built from the target over the most frequent response tokens.
    num_layers = target.config.get_text_config().num_hidden_layers
    if earlier is not None:  # its layout and vocabulary: training goes on from what it learned
        head = earlier
        if vocab_size is not None and head.kind == "eagle3":
            head = widen_vocab(head, target, records, vocab_size or target.config.get_text_config().vocab_size,
                               always=sorted(eos))
    else:
        vocab_size = DEFAULT_VOCAB_SIZE if vocab_size is None else vocab_size
        vocab = None
        if kind == "eagle3":
            size = vocab_size or target.config.get_text_config().vocab_size
            vocab = select_vocab_subset(records, size, always=sorted(eos))
        head = build_feature_head(target, kind, draft_vocab=vocab)

    # 3. The target's states over every record: stored once per corpus (resumable), or computed per step;
    #    those measured on are recomputed in memory at the target's own precision.
    started = time.monotonic()
    layers = sorted({*head.feature_layers_for(num_layers), num_layers})
    computes = target
    if feature_dtype is not None and feature_dtype != next(target.parameters()).dtype:
        computes = copy.deepcopy(target).to(feature_dtype)
    eval_store = features_in_memory(target, eval_records, layers, progress=progress)
    if live_features:
        train_store = LiveFeatures(computes, layers)
    else:
        train_store = FeatureStore(None)
        train_store.layers = layers
        for path, part in zip(corpora, prepared.per_corpus):
            if not path.exists():
                continue
            directory = path.with_name(path.name + ".features")
            extract_features(computes, part, directory, layers, progress=progress)
            train_store.add(FeatureStore(directory))
    del computes
    feature_minutes = (time.monotonic() - started) / 60

    # 4. Train, measuring and saving as it goes (a run stopped early leaves its last head, history and checkpoint).
    extra = {"history": []}

    def measure(step: int, losses: list[float], tokens_seen: int, minutes: float) -> None:
        agreement = evaluate_feature_head(head, target, eval_records, eval_store, depth=gamma, max_new_tokens=max_new_tokens)
        extra["history"].append({"step": step, "tokens_seen": tokens_seen, "loss": sum(losses[-50:]) / len(losses[-50:]),
                                 **agreement.as_dict(), "minutes": minutes})
        save_feature_head(head, out_dir)
        (out_dir / METRICS_FILE).write_text(json.dumps({"partial": True, "history": extra["history"]}, indent=2) + "\n")
        write_learning_curve(out_dir, extra["history"])

    started = time.monotonic()
    losses = train_feature_head(
        head, target, records, train_store, steps=steps, batch_size=batch_size, ttt_steps=ttt_steps, lr=lr,
        max_minutes=max_minutes, seed=seed, progress=progress, log_every=eval_every, on_log=measure,
        checkpoint=str(checkpoint_path), checkpoint_every=eval_every if checkpoint_every is None else checkpoint_every,
        resume=resume, extra_state=extra, tv_weight=tv_weight,
    )
    history = extra["history"]
    train_minutes = (time.monotonic() - started) / 60

    # 5. Measure and save.
    agreement = evaluate_feature_head(head, target, eval_records, eval_store, depth=gamma, max_new_tokens=max_new_tokens)
    setattr(head.config, ACCEPTANCE_ATTR, agreement.alpha_gamma1)  # the default policy's prior (expected_acceptance)
    save_feature_head(head, out_dir)
    metrics = {
        **agreement.as_dict(),
        **head_step_ratio(target, head),
        "kind": head.kind,
        "draft_vocab_size": None if head.draft_ids() is None else len(head.draft_ids()),
        "head_params": sum(p.numel() for p in head.parameters()),
        "train_records": len(records),
        "train_response_tokens": sum(r.response_len for r in records),
        "eval_records": len(eval_records),
        "generation_minutes": prepared.generation_minutes,
        "feature_minutes": feature_minutes,
        "train_minutes": train_minutes,
        "train_steps": len(losses),
        "final_loss": sum(losses[-50:]) / max(len(losses[-50:]), 1),
        "history": history,
        "data": [str(path) for path in corpora],
        "eval_data": str(eval_data),
        "config": dict(
            kind=head.kind, ttt_steps=ttt_steps, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
            init_from=str(init_from) if init_from is not None else None, num_prompts=num_prompts, num_magpie=num_magpie,
            eval_set=eval_set, tv_weight=tv_weight,
        ),
    }
    (out_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics
