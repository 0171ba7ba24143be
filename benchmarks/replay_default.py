"""The default's decisions judged without timing noise: greedy outcomes replayed through its schedule at fixed costs.

Greedy acceptance is a function of where a step starts: at each position of plain generate()'s output a chain of 6
accepts some number of drafts (a chain of d: at most d of them) and each tree of the default's menu accepts its own.
`--record` measures that once per prompt and position (one step of each shape from that prefix), with the step costs
of each shape on this machine (the loop's own timing of whole calls of each shape) and each prompt's prefill. Replaying
then drives `CostAwareDraftPolicy`'s schedule as the loop does (prefill plain, the prompt's agreement, every step's
outcome and cost), as the bench's process does (a warm-up call, then each prompt once), and prices every fixed shape on
the same outcomes: default / best fixed shape per prompt, with nothing left to chance but what `--noise` adds to the
costs the schedule hears. A change to the schedule replays in seconds; the bench (`default_vs_best.py`) confirms.

    python benchmarks/replay_default.py --record benchmarks/data/replay_head_bf16.json
    python benchmarks/replay_default.py --replay benchmarks/data/replay_head_bf16.json
    python benchmarks/replay_default.py --replay benchmarks/data/replay_head_bf16.json --noise 0.05 0.03 1.4 --processes 15
    python benchmarks/replay_default.py --shape whisper-large-v3 --num-prompts 4 --new-tokens 32 --cost-rounds 2 \
        --record benchmarks/data/replay_whisper_large.json   (encoder_decoder_speed.py's pair, fp32: chains only)
    python benchmarks/replay_default.py --shape whisper-large-v3 --num-prompts 8 --new-tokens 64 --cost-rounds 2 \
        --record benchmarks/data/replay_whisper_large_64.json   (the same pair, 8 inputs of 64 tokens)
    python benchmarks/replay_default.py --dtype float32 --cost-rounds 3 --record benchmarks/data/replay_head_fp32_zen3.json
        (the head in fp32 on an AVX2-only CPU, where verifying 2 tokens costs 1.6x a plain step)
    python benchmarks/replay_default.py --costs-only --cost-rounds 4 --record COPY_OF_A_RECORDING.json
        (the same outcomes priced at this machine's step costs; `costs_measured` names where and when)
    python benchmarks/replay_default.py --shape whisper-large-v3 --num-prompts 8 --new-tokens 64 --costs-only \
        --cost-rounds 2 --record benchmarks/data/replay_whisper_large_64_zen3.json   (a copy of the 64-token recording,
        priced on an AVX2-only Zen 3, fp32: verifying 2-7 tokens costs 1.14-1.71x a plain step)
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import default_vs_best as bench  # noqa: E402

from hf_specdec import CostAwareDraftPolicy, DraftPolicy, TreeDraftPolicy  # noqa: E402
from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode  # noqa: E402
from hf_specdec.costs import StepCosts, costs_for  # noqa: E402
from hf_specdec.policy import TREE_MENU, Schedule, Shape  # noqa: E402

CHAIN = 6  # the longest chain recorded; a chain of d accepts min(its accepted, d)
_log: list = []  # what the recording schedules heard (one call at a time)
_confidence: list = []  # the drafter's probability of each token it drafted (greedy: its top one), in order


class _Heard(Schedule):
    """A fixed shape's schedule that also writes down what the loop tells it; `plain`: it never drafts."""

    timed, wants_prior = True, True

    def __init__(self, policy, batch_size, device, plain=False):
        super().__init__(policy, batch_size, device)
        self.plain = plain

    def drafts(self):
        return not self.plain and super().drafts()

    def update(self, active, num_drafted, num_accepted, outcomes=None, drafted=True, left=None, confidence=None):
        _log.append((int(num_drafted[0]), int(num_accepted[0]),
                     None if outcomes is None else [o[0].tolist() for o in outcomes], drafted))
        super().update(active, num_drafted, num_accepted, outcomes, drafted, left, confidence)

    def set_prior(self, agreement, positions):
        _log.append(("prior", float(agreement[0]), float(positions[0])))


@dataclass(frozen=True, kw_only=True)
class _Chain(DraftPolicy):
    plain: bool = False

    def start(self, batch_size, device, **call):
        return _Heard(self, batch_size, device, self.plain)


@dataclass(frozen=True, kw_only=True)
class _Tree(TreeDraftPolicy):
    def start(self, batch_size, device, **call):
        return _Heard(self, batch_size, device)


def _heard_confidence(draft_logits):
    def wrapped(self, ctx, rows, at):
        logits = draft_logits(self, ctx, rows, at)  # [batch, 1, vocab]
        _confidence.append(float(logits[0, 0, : ctx.vocab_size].float().softmax(dim=-1).max()))
        return logits
    return wrapped


def measure_costs(generate, target, drafter, groups, policies, new_tokens: int, rounds: int) -> dict:
    """{(part, kind, size): ms}: the median of every step the loop timed (a size's first step in a call's setting
    excluded, as StepCosts does) over whole calls of each shape, `rounds` times over `groups`, shapes shuffled."""
    samples = {}
    setting = costs_for(target, drafter, torch.device("cpu"), 1, False)
    warm = setting.record

    def heard(kind, depth, width, draft_ms, verify_ms):
        warm(kind, depth, width, draft_ms, verify_ms)
        for key, ms in ((("draft", kind, depth), draft_ms), (("verify", kind, width), verify_ms)):
            if key[2]:
                samples.setdefault(key, []).append(ms)

    setting.record, order = heard, random.Random(0)
    for _ in range(rounds):
        for inputs in groups:
            for policy in order.sample(policies, len(policies)):
                generate(**inputs, drafter=drafter, gamma=policy, max_new_tokens=new_tokens, do_sample=False)
    return {key: statistics.median(values) for key, values in samples.items()}


def _setting(args):
    """(generate, target, drafter, input groups of one row, the inputs of a step after given output tokens) of the
    recorded setting: SmolLM2 and a drafter on held-out chat prompts, or the random-weight Whisper-large-v3-shaped
    pair of `encoder_decoder_speed.py` (fp32, packed) on random audio, seeds 1.. (seed 1: that bench's batch 1)."""
    if args.shape == "smollm2":
        target, tokenizer, drafter = bench.load(args.dtype, args.drafter)
        groups = batches(encode(tokenizer, CHAT_PROMPTS[: args.num_prompts]), 1, tokenizer.pad_token_id)

        def after(inputs, tokens):
            ids = torch.tensor([inputs["input_ids"][0].tolist() + tokens])
            return dict(input_ids=ids, attention_mask=torch.ones_like(ids))
        return target.generate, target, drafter, groups, after
    import encoder_decoder_speed as pairs
    from transformers import GenerationMixin

    import hf_specdec
    target, model = pairs.whisper_pair(0.025)
    pairs.prepare((target, model), torch.float32, 1)
    groups = [pairs.whisper_inputs(target, 1, torch.Generator().manual_seed(seed), torch.float32)
              for seed in range(1, args.num_prompts + 1)]

    def after(inputs, tokens):
        start = inputs["decoder_input_ids"][0].tolist()
        return dict(encoder_outputs=inputs["encoder_outputs"], decoder_input_ids=torch.tensor([start + tokens]))
    return (functools.partial(GenerationMixin.generate, target), target, hf_specdec.drafters.ModelDrafter(model),
            groups, after)


def record(args) -> dict:
    from hf_specdec.drafters.feature import FeatureDraftSession
    from hf_specdec.drafters.model import ModelDraftSession

    for session in (FeatureDraftSession, ModelDraftSession):  # the drafter's confidence in each draft (this process)
        session._draft_logits = _heard_confidence(session.__dict__["_draft_logits"])
    torch.set_num_threads(1)
    generate, target, drafter, groups, after = _setting(args)
    greedy = dict(do_sample=False)
    trees = TREE_MENU if args.shape == "smollm2" else ()  # (Whisper's decoder takes no tree positions)
    policies = [_Chain(max_gamma=1, plain=True), *(_Chain(max_gamma=d) for d in range(1, CHAIN + 1)),
                *(_Tree(top_k=k, max_depth=d, max_nodes=n) for k, d, n in trees)]
    costs = measure_costs(generate, target, drafter, groups[:3], policies, args.new_tokens, args.cost_rounds)
    if args.costs_only:
        return {**json.loads(args.record.read_text()), "costs": [[*key, ms] for key, ms in costs.items()],
                "costs_measured": bench.provenance()}  # (the outcomes keep their own)
    prompts = []
    for number, inputs in enumerate(groups):
        first = after(inputs, [])
        length = first.get("decoder_input_ids", first.get("input_ids")).shape[1]
        plain = generate(**inputs, max_new_tokens=args.new_tokens, **greedy)[0, length:].tolist()
        prefill = statistics.median(bench.timed(lambda: generate(**inputs, max_new_tokens=1, **greedy))[0]
                                    for _ in range(3)) * 1e3
        shapes, prior = {}, None
        for policy in policies[CHAIN:]:
            _log.clear()  # a drafter that drafts in the prefill step (a second model) starts a token earlier than one
            generate(**first, drafter=drafter, gamma=policy, max_new_tokens=2, **greedy)  # that reads its features
            early = next(entry for entry in _log if entry[0] != "prior")[3]
            if isinstance(policy, _Chain):  # what the prompt says (a tree's prefill reads no agreement)
                prior = next((entry[1:] for entry in _log if entry[0] == "prior"), None)
            heard = []
            for state in range(1, len(plain)):  # a step that starts with `state` tokens of plain's output committed
                _log.clear(), _confidence.clear()
                generate(**after(inputs, plain[: state - 1 + early]), drafter=drafter, gamma=policy,
                         max_new_tokens=policy.max_gamma + 2, **greedy)
                drafted, accepted, outcomes, _ = next(entry for entry in _log if entry[0] != "prior" and entry[3])
                if outcomes:  # a tree's (trials, hits) by depth and rank
                    heard.append((accepted, [[list(map(int, row)) for row in o[: policy.max_gamma]] for o in outcomes]))
                else:  # a chain's confidence in each draft
                    heard.append((accepted, [round(c, 4) for c in _confidence[:drafted]]))
            shapes["chain" if isinstance(policy, _Chain) else "tree {}/{}/{}".format(
                policy.top_k, policy.max_depth, policy.max_nodes)] = heard
        prompts.append({"tokens": len(plain), "prefill_ms": prefill, "prior": prior, "shapes": shapes})
        print(f"prompt {number}: {len(plain)} tokens, chain of {CHAIN} accepts "
              f"{statistics.fmean(a for a, _ in shapes['chain']):.2f} a step", flush=True)
    return {**bench.provenance(), "shape": args.shape, "drafter": args.drafter, "dtype": args.dtype,
            "costs": [[*key, ms] for key, ms in costs.items()], "prompts": prompts}


def _step(prompt: dict, state: int, shape: Shape | None, min_confidence: float = 0.0,
          path_stop: tuple[float | tuple, tuple] = (0.0, ())) -> tuple[int, int, object]:
    """(drafts, accepted, a tree's outcomes or a chain's confidences) of a step of `shape` that starts with `state`
    tokens committed; a chain drafts up to the first draft its drafter gave less than `min_confidence`, or where the
    product of its drafts' odds (each probability read by path_stop[1]'s bands) fell below path_stop[0] (a floor, or
    one after each number of drafts), that one included (`hf_specdec.drafters.model.ModelDraftSession.propose`)."""
    room = prompt["tokens"] - state - 1
    if shape is None or room <= 0:
        return 0, 0, None
    if not shape.top_k:
        accepted, confidence = prompt["shapes"]["chain"][state - 1]
        floors, bands = path_stop[0] if isinstance(path_stop[0], tuple) else (path_stop[0],), path_stop[1]
        odds = (lambda c: bands[min(int(c * len(bands)), len(bands) - 1)]) if bands else (lambda c: c)  # noqa: E731
        paths = [math.prod(odds(c) for c in confidence[: k + 1]) for k in range(len(confidence))]
        depth = min([shape.depth, room] + [k + 1 for k, (c, p) in enumerate(zip(confidence, paths))
                                           if c < min_confidence or p < floors[min(k, len(floors) - 1)]])
        return depth, min(accepted, depth), confidence[:depth]
    accepted, outcomes = prompt["shapes"][f"tree {shape.top_k}/{shape.depth}/{shape.nodes}"][state - 1]
    return shape.depth, min(accepted, room), outcomes


def _fixed_ms(prompt: dict, shape: Shape | None, table: Truth) -> float:
    state, ms = 1, prompt["prefill_ms"]
    while state < prompt["tokens"]:
        drafts, accepted, _ = _step(prompt, state, shape)
        ms += table.estimate(None if not drafts else shape if shape.top_k else Shape(0, drafts, drafts))
        state += accepted + 1
    return ms


class Truth:
    """A recording's step costs, what every replayed step takes: each (part, kind, size) as measured, other sizes
    linear between the kind's measured ones and beyond them as the nearest (a tree's from the chains' if none)."""

    def __init__(self, costs: list):
        points: dict[tuple, dict[int, float]] = {}
        for part, kind, size, ms in costs:
            points.setdefault((part, kind), {})[size] = ms
        self.curves = {key: (sorted(sizes), [sizes[s] for s in sorted(sizes)]) for key, sizes in points.items()}

    def part(self, part: str, kind: str, size: int) -> float:
        sizes, ms = self.curves.get((part, kind)) or self.curves[(part, "chain")]
        return float(numpy.interp(size, sizes, ms)) if size else 0.0

    def estimate(self, shape) -> float:
        kind = "tree" if shape is not None and shape.top_k else "chain"
        width, depth = (1, 0) if shape is None else (shape.width, shape.depth)
        return self.part("verify", kind, width) + self.part("draft", kind, depth)


class Noise:
    """What a busy machine does to the step times the default hears: each step a log-normal factor (`sigma`), and
    slow stretches: with probability `switch` a step enters or leaves one, in which every step takes `slow` times as
    long (seen on a shared Zen 5: a cached forward's time moved by half for seconds at a time); and a setting's first
    `cold` drafting steps, whose drafting takes `cold_slow` times as long (on a GPU: kernels loading)."""

    def __init__(self, seed: int, sigma: float = 0.0, switch: float = 0.0, slow: float = 1.0, cold: float = 0,
                 cold_slow: float = 1.0):
        self.random, self.sigma, self.switch, self.slow, self.slowed = random.Random(seed), sigma, switch, slow, False
        self.cold, self.cold_slow = int(cold), cold_slow

    def factor(self) -> float:
        self.slowed ^= self.random.random() < self.switch
        return (self.slow if self.slowed else 1.0) * self.random.lognormvariate(0.0, self.sigma)

    def draft_factor(self) -> float:
        """A drafting step's further factor on its drafting time: `cold_slow` for the setting's first `cold`."""
        self.cold -= 1
        return self.cold_slow if self.cold >= 0 else 1.0


def _default_ms(prompt: dict, policy, costs: StepCosts, table: Truth, noise: Noise | None, shapes: dict,
                path_stop: bool = True) -> float:
    """One call of the default on `prompt`: the loop's conversation with its schedule, each step priced by `table`;
    `costs` (the setting's, across calls) hears each step's cost, times `noise`'s factor (`path_stop` False: as for a
    drafter that scores nothing, chains of the chosen length)."""
    trees = any(name.startswith("tree") for name in prompt["shapes"])
    schedule = policy.start(1, torch.device("cpu"), costs=costs, trees=trees, prior=None)
    one, zero = torch.ones(1, dtype=torch.bool), torch.zeros(1, dtype=torch.long)
    schedule.update(one, zero, zero, None, False, 1)  # the prefill: plain
    if schedule.wants_prior and prompt["prior"]:
        schedule.set_prior(torch.tensor([prompt["prior"][0]]), torch.tensor([prompt["prior"][1]]))
    state, ms, drafted, fed_before = 1, prompt["prefill_ms"], False, False
    while state < prompt["tokens"]:
        tree = schedule.tree
        shape = Shape(tree.top_k, tree.max_depth, tree.max_nodes) if tree is not None else (
            Shape(0, int(schedule.lengths[0]), int(schedule.lengths[0])) if schedule.drafts() else None)
        drafts, accepted, outcomes = _step(prompt, state, shape, policy.min_confidence,
                                           schedule.path_stop if path_stop else (0.0, ()))
        shape = None if not drafts else shape if shape.top_k else Shape(0, drafts, drafts)
        step_ms = table.estimate(shape)
        ms += step_ms
        if shape is None or drafted:  # (a call's first draft prices no shape)
            kind, depth = ("tree", shape.depth) if shape and shape.top_k else ("chain", shape.depth if shape else 0)
            width = 1 if shape is None else shape.width
            draft = table.part("draft", kind, depth)
            factor = noise.factor() if noise else 1.0
            cold = noise.draft_factor() if noise and depth else 1.0
            sampled = draft * factor * cold if fed_before else None  # (after plain steps: no sample, as the loop)
            costs.record(kind, depth, width, sampled, (step_ms - draft) * factor)
        drafted, fed_before = drafted or shape is not None, shape is not None
        key = "plain" if shape is None else f"tree {shape.top_k}/{shape.depth}/{shape.nodes}" if shape.top_k \
            else f"chain {shape.depth}"
        shapes[key] = shapes.get(key, 0) + 1
        is_tree = shape is not None and shape.top_k
        trials = tuple(torch.tensor([o]) for o in outcomes) if is_tree else None
        confidence = torch.tensor([outcomes]) if path_stop and shape is not None and not is_tree else None
        schedule.update(one, torch.tensor([drafts]), torch.tensor([accepted]), trials, drafts > 0, 1, confidence)
        state += accepted + 1
    schedule.done()
    return ms


def replay(data: dict, policy=None, processes: int = 1, noise: tuple[float, ...] = (0.0, 0.0, 1.0),
           path_stop: bool = True) -> dict:
    """Each process: fresh costs, a warm-up call on prompt 0, then every prompt once: per prompt the default's and each
    fixed shape's ms; the ratios over processes as the bench pools them (median over prompt calls). `noise`: `Noise`'s
    arguments after the seed."""
    policy = policy or CostAwareDraftPolicy()
    table = Truth(data["costs"])
    fixed = {"plain": None, **{name: Shape(0, g, g) if isinstance(g, int) else Shape(g.top_k, g.max_depth, g.max_nodes)
                               for name, g in bench.FIXED.items()  # the bench's fixed shapes (that were recorded)
                               if isinstance(g, int) or f"tree {g.top_k}/{g.max_depth}/{g.max_nodes}" in
                               data["prompts"][0]["shapes"]}}
    fixed_ms = [{name: _fixed_ms(prompt, shape, table) for name, shape in fixed.items()} for prompt in data["prompts"]]
    ratios, shapes = {"default": [], **{name: [] for name in fixed if name != "plain"}}, {}
    for process in range(processes):
        costs, heard = StepCosts(), Noise(process, *noise) if any(noise[:2]) or any(noise[3:4]) else None
        _default_ms(data["prompts"][0], policy, costs, table, heard, {}, path_stop)  # the warm-up call
        for prompt, ms in zip(data["prompts"], fixed_ms):
            ratios["default"].append(ms["plain"] / _default_ms(prompt, policy, costs, table, heard, shapes, path_stop))
            for name in fixed:
                if name != "plain":
                    ratios[name].append(ms["plain"] / ms[name])
    medians = {name: statistics.median(values) for name, values in ratios.items()}
    best = max((name for name in medians if name != "default"), key=medians.get)
    per_prompt = [statistics.median(ratios["default"][k::len(data["prompts"])]) /
                  max(ratios[name][k] for name in ratios if name != "default") for k in range(len(data["prompts"]))]
    paired = statistics.geometric_mean(d / f for d, f in zip(ratios["default"], ratios[best]))
    return {"default": medians["default"], "best": best, "best_ratio": medians[best],
            "default_vs_best": medians["default"] / medians[best], "paired_geomean": paired, "medians": medians,
            "per_prompt_vs_best": per_prompt, "shapes": shapes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, help="measure outcomes and costs into this file")
    parser.add_argument("--replay", type=Path, help="replay the default over a recorded file")
    parser.add_argument("--shape", choices=("smollm2", "whisper-large-v3"), default="smollm2",
                        help="--record: SmolLM2 with --drafter, or encoder_decoder_speed.py's Whisper-shaped pair")
    parser.add_argument("--drafter", default="head")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--cost-rounds", type=int, default=3)
    parser.add_argument("--costs-only", action="store_true", help="--record: measure the costs again, keep outcomes")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--no-path-stop", action="store_true", help="the default as for a drafter that scores nothing")
    parser.add_argument("--noise", type=float, nargs=3, default=(0.0, 0.0, 1.0), metavar=("SIGMA", "SWITCH", "SLOW"),
                        help="what the default hears of step costs: `Noise`'s log-normal sigma, stretch switch, factor")
    args = parser.parse_args()
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record(args), separators=(",", ":")))
    if args.replay:
        result = replay(json.loads(args.replay.read_text()), processes=args.processes, noise=tuple(args.noise),
                        path_stop=not args.no_path_stop)
        print(json.dumps({key: value if not isinstance(value, float) else round(value, 4)
                          for key, value in result.items()}, indent=1))


if __name__ == "__main__":
    main()
