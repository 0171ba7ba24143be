"""``distill_feature_head()``: target in, EAGLE feature head directory out.

Generate (or reuse) the target's responses to template prompts and to prompts it wrote itself (Magpie),
store the target's hidden states over them once, pick the draft vocabulary, build the head from the
target, train it with the training-time test, measure agreement per draft depth and the head's step
cost, and save it in the published EAGLE layout. Every stage resumes: responses are appended per
prompt, features are stored per record, and the head is saved at every evaluation (continue from it
with ``init_from``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import torch

from .feature_head import build_feature_head, evaluate_feature_head, train_feature_head
from .features import FeatureStore, extract_features
from .model import select_vocab_subset
from .pipeline import METRICS_FILE, prepare_data


def head_step_ratio(target, head) -> dict:
    """ms of one head drafting step and of one target decoding step at batch 1 (hf_specdec's own
    calibration: the loop's forwards on scratch caches), and their ratio."""
    from hf_specdec.calibration import measure
    from hf_specdec.drafters.feature import FeatureDrafter

    costs = measure(target, FeatureDrafter(head), 1, torch.device("cpu"), (1,))
    target_ms = costs.verify_ms(1)
    return {"head_step_ms": costs.draft_ms, "target_step_ms": target_ms, "step_cost_ratio": costs.draft_ms / target_ms}


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
    vocab_size: int | None = 4096,
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
) -> dict:
    """Train an EAGLE feature head for a causal LM target and save it under `out_dir`.

    Args:
        target_path: model directory loadable by ``AutoModelForCausalLM`` (or ``"smollm2"``).
        data: the corpus JSONL, appended to when ``generate`` (default ``<out_dir>-data/train.jsonl``);
            its features go to ``<corpus>.features/``.
        extra_data: more corpora (same format) to train on as they are.
        num_prompts: template prompts to answer; num_magpie: prompts the target writes itself to answer.
        kind: "eagle3" (fused low/mid/high states, own head over ``vocab_size`` tokens) or "eagle1".
        init_from: a head directory to continue training (its layout and vocabulary are kept).
        ttt_steps: unrolled steps of the training-time test (1 = teacher forcing only).
        eval_every: measure and save every this many steps (0: only at the end).

    Returns:
        the metrics also written to ``out_dir/distill_metrics.json``.
    """
    from hf_specdec.eagle import load_feature_head, save_feature_head

    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    # 1. Data: the target's own responses (appended per prompt, so a rerun resumes).
    prepared = prepare_data(
        target_path, out_dir, data=data, eval_data=eval_data, extra_data=extra_data, num_prompts=num_prompts,
        num_magpie=num_magpie, sampled_fraction=sampled_fraction, generate=generate, max_new_tokens=max_new_tokens,
        gen_batch_size=gen_batch_size, num_eval_prompts=num_eval_prompts, seed=seed, progress=progress,
    )
    target, eos, records, eval_records = prepared.target, prepared.eos, prepared.records, prepared.eval_records
    corpora, eval_data = prepared.corpora, prepared.eval_data

    # 2. The head: from an earlier one, or built from the target over the most frequent response tokens.
    num_layers = target.config.get_text_config().num_hidden_layers
    if init_from is not None:
        head = load_feature_head(init_from)
    else:
        vocab = None
        if kind == "eagle3":
            size = vocab_size or target.config.get_text_config().vocab_size
            vocab = select_vocab_subset(records, size, always=sorted(eos))
        head = build_feature_head(target, kind, draft_vocab=vocab)

    # 3. The target's states over every record, stored once per corpus (resumable).
    started = time.monotonic()
    layers = sorted({*head.feature_layers_for(num_layers), num_layers})
    stores = []
    # The records the data step read (the held-out ones: those measured on).
    for path, part in [*zip(corpora, prepared.per_corpus), (eval_data, eval_records)]:
        if not path.exists():
            continue
        directory = path.with_name(path.name + ".features")
        extract_features(target, part, directory, layers, progress=progress)
        stores.append(FeatureStore(directory))
    store = stores[0]
    for other in stores[1:]:
        store.tensors.update(other.tensors)
    feature_minutes = (time.monotonic() - started) / 60

    # 4. Train, measuring and saving as it goes (a run stopped early leaves its last head and history).
    history = []

    def checkpoint(step: int, losses: list[float]) -> None:
        agreement = evaluate_feature_head(head, target, eval_records, store, depth=gamma)
        history.append({"step": step, "loss": sum(losses[-50:]) / len(losses[-50:]), **agreement.as_dict(),
                        "minutes": (time.monotonic() - started) / 60})
        save_feature_head(head, out_dir)
        (out_dir / METRICS_FILE).write_text(json.dumps({"partial": True, "history": history}, indent=2) + "\n")

    started = time.monotonic()
    losses = train_feature_head(
        head, target, records, store, steps=steps, batch_size=batch_size, ttt_steps=ttt_steps, lr=lr,
        max_minutes=max_minutes, seed=seed, progress=progress, log_every=eval_every, on_log=checkpoint,
    )
    train_minutes = (time.monotonic() - started) / 60

    # 5. Measure and save.
    agreement = evaluate_feature_head(head, target, eval_records, store, depth=gamma)
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
        ),
    }
    (out_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics
