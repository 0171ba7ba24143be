"""Encoder-decoder speed: hf_specdec's default against plain generate() and transformers' assisted generation at its
best setting, on random-weight pairs whose drafter agrees with the target part of the time by construction.

A target whose decoder layers after the first DRAFT_LAYERS write `--share` of their output (their output projections
scaled), and a drafter of the same embeddings, head and first DRAFT_LAYERS decoder layers: at the Whisper-large-v3
shape a distil-whisper-shaped decoder that reads the target's encoder output (WhisperForCausalLM), at the BART-large
shape an encoder-decoder drafter sharing the target's encoder module. Greedy fp32; every method's tokens are checked
against plain generate()'s. Whisper: the encoder output is computed once and given to every call (`encoder_outputs`),
so timings are the decoding's; its encoder is built with one layer to save RAM (it is not timed). BART: each call runs
the encoders (a 64-token source).

    python benchmarks/encoder_decoder_speed.py --shape whisper-large-v3 --batches 1 4 --out benchmarks/data/encoder_decoder.json
    python benchmarks/encoder_decoder_speed.py --shape bart-large --batches 1 --out benchmarks/data/encoder_decoder.json
    python benchmarks/encoder_decoder_speed.py --shape whisper-large-v3 --device cuda --dtype bfloat16 --batches 1 4 --inputs 4 --gammas 2 4 --hf-settings heuristic 5 --rounds 3 --aa
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import transformers
from transformers import BartConfig, BartForConditionalGeneration, GenerationMixin, WhisperConfig
from transformers import WhisperForCausalLM, WhisperForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import hf_specdec  # noqa: E402
from hf_specdec.bench.measure import call_orders, median_interval  # noqa: E402

DRAFT_LAYERS = 2


def _quiet_late_layers(decoder_layers, share: float) -> None:
    with torch.no_grad():
        for layer in list(decoder_layers)[DRAFT_LAYERS:]:
            for name, param in layer.named_parameters():
                if name.endswith(("out_proj.weight", "fc2.weight")):
                    param.mul_(share)


def _sharpen(head) -> None:
    # An untied head scaled up, as the tests' tiny models: random init otherwise gives near-flat distributions whose
    # argmax repeats the input token, and any two decoders of the same embeddings agree on it.
    with torch.no_grad():
        head.weight.mul_(8.0)


def whisper_pair(share: float):
    config = WhisperConfig(vocab_size=51866, d_model=1280, encoder_layers=1, decoder_layers=32,
                           encoder_attention_heads=20, decoder_attention_heads=20, encoder_ffn_dim=5120,
                           decoder_ffn_dim=5120, num_mel_bins=128, max_source_positions=1500, max_target_positions=448,
                           pad_token_id=50256, bos_token_id=50257, eos_token_id=50257, decoder_start_token_id=50258,
                           tie_word_embeddings=False)
    torch.manual_seed(0)
    target = WhisperForConditionalGeneration(config).eval()
    _sharpen(target.proj_out)
    _quiet_late_layers(target.model.decoder.layers, share)
    draft_config = copy.deepcopy(config)
    draft_config.decoder_layers, draft_config.is_encoder_decoder = DRAFT_LAYERS, False
    small = copy.deepcopy(draft_config)  # built small, its modules then replaced by the target's: no RAM spent
    small.vocab_size, small.d_model, small.decoder_ffn_dim, small.pad_token_id = 8, config.decoder_attention_heads, 8, 0
    drafter = WhisperForCausalLM(small).eval()
    for module in drafter.modules():
        if getattr(module, "config", None) is small:
            module.config = draft_config
    # The target's own modules (shared, not copied: the same weights, and packed once with --pack-linears).
    decoder, source = drafter.model.decoder, target.model.decoder
    decoder.embed_tokens, decoder.embed_positions, decoder.layer_norm = (
        source.embed_tokens, source.embed_positions, source.layer_norm)
    decoder.layers = torch.nn.ModuleList(source.layers[:DRAFT_LAYERS])
    drafter.proj_out = target.proj_out
    return target, drafter


def bart_pair(share: float):
    config = BartConfig(vocab_size=50265, d_model=1024, encoder_layers=12, decoder_layers=12,
                        encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
                        decoder_ffn_dim=4096, max_position_embeddings=1024, forced_bos_token_id=None,
                        forced_eos_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(0)
    target = BartForConditionalGeneration(config).eval()
    _sharpen(target.lm_head)
    _quiet_late_layers(target.model.decoder.layers, share)
    drafter = BartForConditionalGeneration(copy.deepcopy(config)).eval()
    drafter.config.decoder_layers = DRAFT_LAYERS
    drafter.model.encoder = target.model.encoder  # the same encoder (shared, not copied)
    drafter.model.decoder.embed_tokens = target.model.decoder.embed_tokens
    drafter.model.decoder.embed_positions = target.model.decoder.embed_positions
    drafter.model.decoder.layernorm_embedding = target.model.decoder.layernorm_embedding
    drafter.model.decoder.layers = torch.nn.ModuleList(target.model.decoder.layers[:DRAFT_LAYERS])
    drafter.lm_head = target.lm_head
    drafter.final_logits_bias = target.final_logits_bias
    return target, drafter


def _no_eos(model) -> None:
    model.generation_config.eos_token_id = None  # every method decodes --tokens tokens
    model.generation_config.pad_token_id = model.config.pad_token_id
    model.generation_config.forced_bos_token_id = model.generation_config.forced_eos_token_id = None
    model.generation_config.begin_suppress_tokens = model.generation_config.suppress_tokens = None


def prepare(models, dtype: torch.dtype, pack_min_rows: int | None) -> None:
    """Casts each model to `dtype`, turns EOS off and, with `pack_min_rows`, packs its float32 linears."""
    for model in models:
        model.to(dtype)
        _no_eos(model)
        if pack_min_rows is not None:
            hf_specdec.pack_linears(model, min_rows=pack_min_rows)


def whisper_inputs(target, batch: int, generator: torch.Generator, dtype: torch.dtype) -> dict:
    """generate() keywords for `batch` random 30 s inputs: the encoder's output (computed here, once) and the decoder's
    start tokens."""
    with torch.no_grad():
        features = torch.randn(batch, 128, 3000, generator=generator).to(target.device, dtype)
        hidden = target.get_encoder()(features).last_hidden_state
    return dict(encoder_outputs=BaseModelOutput(last_hidden_state=hidden),
                decoder_input_ids=torch.tensor([[50258, 50259, 50360, 50364]] * batch))


def input_calls(target, whisper: bool, batch: int, inputs: int, tokens: int, dtype: torch.dtype) -> list[dict]:
    """Each input's greedy generate() keywords, seeds `batch` on: random audio (Whisper; the encoder output given) or a
    random 64-token source (BART), `batch` rows each."""
    calls = []
    for seed in range(batch, batch + inputs):
        generator = torch.Generator().manual_seed(seed)
        source = whisper_inputs(target, batch, generator, dtype) if whisper else dict(
            input_ids=torch.randint(4, 50000, (batch, 64), generator=generator))
        calls.append(dict(do_sample=False, max_new_tokens=tokens, **source))
    return calls


def on_device(call: dict, device: torch.device) -> dict:
    """`call`'s generate() keywords with its tensors (the encoder's output too) on `device`."""
    moved = {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in call.items()}
    if "encoder_outputs" in call:
        moved["encoder_outputs"] = BaseModelOutput(last_hidden_state=call["encoder_outputs"].last_hidden_state.to(device))
    return moved


def _assisted(target, drafter, config, common: dict, **extra):
    """transformers' assisted generation with `config`'s schedule (the drafter reads its own copy of it)."""
    drafter.generation_config = copy.deepcopy(config)
    return GenerationMixin.generate(target, **common, generation_config=config, assistant_model=drafter, **extra)


def side_by_side(methods: dict, rounds: int, seed: int = 0, sync=lambda: None) -> tuple[dict, dict, dict]:
    """Times every method of `methods` ({name: zero-argument call}) after one warm-up call each (kernels, and the
    default's first call of a setting, which measures its step costs), then `rounds` rounds in which each runs once, in a
    fresh seeded order: a machine whose speed drifts slows every method of a round alike. Returns {name: [seconds per
    round]}, {name: the warm-up's output}, {name: [CPU time over wall time per round]} (1 thread: ~1.0 alone on its
    core, ~0.5 sharing it). `sync`: waits for the device's queued work (a GPU's), before and after each timed call."""
    outputs = {name: run() for name, run in methods.items()}
    times, shares, names = {name: [] for name in methods}, {name: [] for name in methods}, list(methods)
    for order in call_orders(len(names), rounds, seed):
        for name in (names[index] for index in order):
            sync()
            start, cpu = time.perf_counter(), time.process_time()
            methods[name]()
            sync()
            seconds = time.perf_counter() - start
            times[name].append(seconds)
            shares[name].append(round((time.process_time() - cpu) / seconds, 2))
    return times, outputs, shares


def paired(times: dict, name: str) -> dict:
    """`name`'s speed over plain generate()'s, round by round: the median and its 90 % interval (None: too few)."""
    return _over(times["plain"], times[name], "x_plain")


def _over(reference: list, seconds: list, name: str) -> dict:
    """The median over rounds of `reference`'s time over `seconds`' (`name`), with its 90 % interval (None: too few)."""
    ratios = [ref / sec for ref, sec in zip(reference, seconds)]
    bracket = median_interval(ratios)
    return {name: round(statistics.median(ratios), 3),
            f"{name}_interval": None if bracket is None else [round(value, 3) for value in bracket[:2]]}


def save(path: str, key: str, result: dict) -> None:
    """Writes `result` under `key` of the JSON file at `path` (the other tables' entries stay)."""
    data = json.load(open(path)) if os.path.exists(path) else {}
    data[key] = result
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=("whisper-large-v3", "bart-large"), required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[1])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--share", type=float, default=None,
                        help="output share of the target's decoder layers after the drafter's (default: 0.025 at the "
                             "Whisper shape (pre-norm), 0.1 at the BART shape (post-norm): ~60%% agreement each)")
    parser.add_argument("--rounds", type=int, default=6,
                        help="timed rounds after a warm-up call of each method; each round runs every method once, in "
                             "a fresh order; a method's time is its median, its speed the median of its paired ratios")
    parser.add_argument("--gammas", type=int, nargs="*", default=[4], help="fixed draft lengths, besides the default")
    parser.add_argument("--trees", nargs="*", default=[], metavar="K/D/N",
                        help="fixed draft trees, besides the default: TreeDraftPolicy(top_k=K, max_depth=D, "
                             "max_nodes=N), e.g. 4/3/8 (Whisper's decoder takes them; BART's refuses them)")
    parser.add_argument("--hf-settings", nargs="*", default=["heuristic", "3", "5"],
                        help="transformers' assisted generation: num_assistant_tokens_schedule 'heuristic', or a "
                             "constant num_assistant_tokens")
    parser.add_argument("--pack-linears", type=int, default=None, metavar="MIN_ROWS",
                        help="hf_specdec.pack_linears(target and drafter, min_rows=MIN_ROWS) before every method: "
                             "oneDNN-packed float32 weights for products of at least MIN_ROWS rows")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                        help="both models' weights (bfloat16: --pack-linears packs nothing)")
    parser.add_argument("--inputs", type=int, default=1,
                        help="random inputs per batch size (seeds batch, batch + 1, ...); a method's call decodes each "
                             "in turn, its round time their sum")
    parser.add_argument("--aa", action="store_true",
                        help="also time plain generate() a second time: the A/A control, the spread two identical "
                             "methods show in these rounds (`aa`, with its 90 %% interval)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU): 1, or 2 over both cores")
    parser.add_argument("--device", default="cpu",
                        help="where both models run (cuda: a GPU, timed with its queue drained around every call)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.pack_linears is not None and args.device != "cpu":
        parser.error("--pack-linears packs float32 weights for CPU kernels; leave it out with --device " + args.device)
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    whisper = args.shape.startswith("whisper")
    args.share = args.share if args.share is not None else (0.025 if whisper else 0.1)
    target, drafter = (whisper_pair if whisper else bart_pair)(args.share)
    prepare((target, drafter), dtype, args.pack_linears)
    target.to(device), drafter.to(device)
    rows = []
    for batch in args.batches:
        calls = [on_device(call, device) for call in input_calls(target, whisper, batch, args.inputs, args.tokens, dtype)]

        def each(call, **fixed):
            """A method: `call` on every input's keywords (with `fixed` and the call's own) in turn; their outputs."""
            return lambda **more: [call({**common, **fixed, **more}) for common in calls]

        generate = lambda keywords: GenerationMixin.generate(target, **keywords)  # noqa: E731
        methods = {"plain": each(generate),
                   # The first token: the decoder's prompt and, at the Whisper shape, every layer's cross-attention keys
                   # and values over 1500 frames (a large share of a short call); every method pays it alike.
                   "plain_first_token": each(generate, max_new_tokens=1),
                   **({"plain_again": each(generate)} if args.aa else {})}
        for gamma in [None, *args.gammas]:  # None: hf_specdec's default
            methods["ours" if gamma is None else f"ours_gamma{gamma}"] = each(generate, drafter=drafter, gamma=gamma)
        for tree in args.trees:  # "4/3/8" -> ours_tree4_3_8
            top_k, depth, nodes = map(int, tree.split("/"))
            methods[f"ours_tree{top_k}_{depth}_{nodes}"] = each(generate, drafter=drafter, gamma=hf_specdec.TreeDraftPolicy(
                top_k=top_k, max_depth=depth, max_nodes=nodes))
        configs = {}
        for setting in args.hf_settings if batch == 1 else ():  # transformers' assisted generation runs batch 1 only
            config = configs[f"hf_{setting}"] = copy.deepcopy(target.generation_config)
            if setting == "heuristic":
                config.num_assistant_tokens_schedule = "heuristic"
            else:
                config.num_assistant_tokens_schedule, config.num_assistant_tokens = "constant", int(setting)
            methods[f"hf_{setting}"] = each(functools.partial(_assisted, target, drafter, config))
        times, outputs, shares = side_by_side(methods, args.rounds, seed=batch, sync=sync)
        plain = outputs["plain"]
        exact = lambda name: all(torch.equal(out, ref) for out, ref in zip(outputs[name], plain))  # noqa: E731
        row = dict(batch=batch, inputs=args.inputs, rounds=args.rounds,
                   plain_s=round(statistics.median(times["plain"]), 3),
                   plain_first_token_s=round(statistics.median(times["plain_first_token"]), 3))
        if args.aa:  # plain over plain again: how far apart two identical methods read in these rounds
            row.update(_over(times["plain"], times["plain_again"], "aa"))
        for name in methods:
            if name.startswith("ours"):
                stats = hf_specdec.SpeculativeStats()
                methods[name](stats=stats)
                row.update({f"{name}_s": round(statistics.median(times[name]), 3),
                            f"{name}_exact": exact(name),
                            **{f"{name}_{key}": value for key, value in paired(times, name).items()},
                            f"{name}_acceptance": round(stats.acceptance_rate, 3) if stats.drafted.sum() else None,
                            f"{name}_tokens_per_forward": round(float(stats.emitted.sum()) / max(stats.target_forwards, 1), 2),
                            f"{name}_drafted_per_row": stats.drafted.tolist()})
        # What the default decided from: the step costs the loop measured at this setting.
        costs = hf_specdec.costs.costs_for(target, hf_specdec.drafters.ModelDrafter(drafter), device, batch, False)
        row["ours_costs_ms"] = {" ".join(map(str, key)): round(ms, 1) for key, ms in costs.measured().items()}
        if configs:  # assisted generation at its best setting: the fastest median
            best = min(configs, key=lambda name: statistics.median(times[name]))
            row.update(hf_best_setting=best[3:], hf_s=round(statistics.median(times[best]), 3),
                       hf_exact=exact(best),
                       hf_s_by_setting={name[3:]: round(statistics.median(times[name]), 3) for name in configs},
                       **_over(times[best], times["ours"], "ours_over_hf"))
        row["cpu_share"] = shares  # below ~0.9: the core was shared
        row["seconds"] = {name: [round(value, 3) for value in values] for name, values in times.items()}  # by round
        rows.append(row)
        print(json.dumps(row), flush=True)
    threads = torch.get_num_threads()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = dict(shape=args.shape, dtype=args.dtype, tokens=args.tokens, share=args.share, draft_layers=DRAFT_LAYERS,
                  pack_linears=args.pack_linears, command=" ".join(["python", *sys.argv]),
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit,
                  machine=torch.cuda.get_device_name(device) if device.type == "cuda" else
                  f"{hf_specdec.cpu.describe()}, {threads} thread" + "s" * (threads > 1),
                  transformers=transformers.__version__, torch=torch.__version__, rows=rows)
    if args.out:
        key = args.shape + ("" if args.dtype == "float32" else f" {args.dtype}")
        key += "" if args.pack_linears is None else f" packed {args.pack_linears}"
        save(args.out, key + ("" if threads == 1 else f" {threads} threads"), result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
