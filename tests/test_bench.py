"""The benchmark machinery end to end on tiny in-memory models: every file is written and the numbers
are sane (no timing assertions)."""

from __future__ import annotations

import copy
import json
import math
import re
import statistics

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from hf_specdec.bench import BenchConfig, measure, report, run_bench, runner
from hf_specdec.bench import prompts as bench_prompts
from hf_specdec.bench.measure import (
    Measurement, leviathan_speedup, median_interval, paired_ratios, paired_speedup, per_token_alpha, time_side_by_side,
)
from hf_specdec.bench.models import stand_in_drafter
from hf_specdec.bench.runner import Bench
from hf_specdec.distill.feature_head import build_feature_head
from hf_specdec.drafters import FeatureDrafter, resolve_drafter
from hf_specdec.stats import SpeculativeStats

SPECIALS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|user|> {{ message['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over every word of the bench's prompts, with a chat template."""
    text = " ".join([*bench_prompts.CHAT_PROMPTS, *bench_prompts.PASSAGES, *bench_prompts.GROUNDED_TASKS])
    words = sorted(set(re.findall(r"\w+|[^\w\s]", text)))
    vocab = {token: index for index, token in enumerate(SPECIALS + words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS[3:]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def tiny_pair():
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=2,
        tie_word_embeddings=True,
    )
    target = LlamaForCausalLM(config).eval()
    target.generation_config.pad_token_id = 2
    return target, stand_in_drafter(target, num_layers=1), tokenizer


def test_the_unrelated_drafter_declares_no_acceptance(tiny_pair):
    # It stands for a drafter nobody measured: the default starts it from 0.5, not from the shipped drafter's
    # declared acceptance, and the drafter itself keeps its own.
    target, drafter, tokenizer = tiny_pair
    declared = copy.deepcopy(drafter)
    declared.config.hf_specdec_acceptance = 0.3
    bench = Bench(target, declared, tokenizer, BenchConfig(threads=1))
    assert resolve_drafter(bench.unrelated).expected_acceptance is None
    assert resolve_drafter(declared).expected_acceptance == 0.3
    assert bench.unrelated.config.vocab_size == declared.config.vocab_size


def test_bench_writes_json_markdown_and_plots_with_sane_numbers(tiny_pair, tmp_path):
    target, drafter, tokenizer = tiny_pair
    config = BenchConfig(
        max_new_tokens=6, num_prompts=2, gammas=(1, 2, 3), batch_sizes=(1, 2), lookup_batch_sizes=(1, 2),
        threads=1, out=tmp_path, datagen_batch_size=2, feature_gammas=(1, 2), tree_shapes=((4, 4, 16), (4, 3, 8)),
    )
    head = build_feature_head(target, "eagle3", draft_vocab=list(range(len(tokenizer))))
    results = run_bench(target, drafter, tokenizer, config, progress=False, feature_drafter=FeatureDrafter(head),
                        feature_source="tiny head")

    for name in ("results.json", "results.md", "acceptance_vs_gamma.png", "tokens_per_s_vs_gamma.png",
                 "speedup_vs_batch.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert (tmp_path / "acceptance_vs_gamma.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "results.json").read_text())["config"]["gammas"] == [1, 2, 3]
    assert results["environment"]["torch_threads"] == 1
    markdown = (tmp_path / "results.md").read_text()
    assert "## Gamma sweep" in markdown and "## Leviathan bound" in markdown

    sections = results["sections"]
    assert list(sections) == ["plain", "gamma", "hf", "batch", "bound", "default", "feature", "trees", "int8", "datagen",
                              "policy", "lookup"]
    tree_rows = sections["trees"]["rows"]  # every chain and tree at batch 1, the best of each at 2, both defaults
    assert {row["method"] for row in tree_rows if row["batch_size"] == 1} == {
        "chain 1", "chain 2", "tree 4/4/16", "tree 4/3/8", "default", "default, chains only"}
    assert len([row for row in tree_rows if row["batch_size"] == 2 and row["mode"] == "greedy"]) == 4
    for row in tree_rows:
        assert row["vs_best_chain"] > 0 and row["forward_gain"] > 0
        if row["mode"] == "greedy":
            assert row["exact_rows"] == row["num_rows"] == 2, row
    assert {row["method"] for row in sections["datagen"]["rows"]} == {
        "stream_generate (continuous batching)", "generate() (static batches)"
    }
    assert all(row["tokens_per_s"] > 0 for row in sections["datagen"]["rows"])
    rows = [row for name, section in sections.items() if name != "datagen" for row in section.get("rows", [])]
    for row in rows:
        assert row["tokens"] > 0 and row["tokens_per_s"] > 0 and row["speedup"] > 0
        assert 0 <= row.get("acceptance_rate", 0) <= 1
        # Greedy hf_specdec must reproduce plain greedy generate() token for token.
        if row["method"].startswith("hf_specdec") and row["mode"] == "greedy":
            assert row["exact_rows"] == row["num_rows"] == 2, row
    assert {row["gamma"] for row in sections["gamma"]["rows"]} == {1, 2, 3}
    assert set(sections["gamma"]["best_gamma"]) == {"greedy", "sampled"}
    assert {row["batch_size"] for row in sections["batch"]["rows"]} == {1, 2}
    assert sections["bound"]["cost_ratio"] > 0
    for row in sections["bound"]["rows"]:
        assert row["bound"] == pytest.approx(
            leviathan_speedup(row["alpha"], row["gamma"], sections["bound"]["cost_ratio"]), rel=1e-3
        )
        assert row["verify_ratio"] > 0 and row["hardware_bound"] == pytest.approx(
            leviathan_speedup(row["alpha"], row["gamma"], sections["bound"]["cost_ratio"], row["verify_ratio"]),
            rel=1e-3,
        )
    assert set(sections["bound"]["verify_ms"]) == {"2", "3", "4"}
    for name in ("int8", "policy", "lookup"):  # int8 may skip with a note when every backend crashes
        assert sections[name].get("rows") or sections[name]["skipped"]
    default_rows = sections["default"]["rows"]
    for size in (1, 2):  # each batch size is one side-by-side group: every gamma at batch 1, its fastest at 2
        *group, again = [row for row in default_rows if row["batch_size"] == size and row["mode"] == "greedy"]
        assert again["method"] == "plain generate(), timed again (A/A control)" and "acceptance_rate" not in again
        assert again["exact_rows"] == again["num_rows"] and 0 < again["speedup"] < math.inf
        assert [row["gamma"] for row in group] == ([1, 2, 3] if size == 1 else [group[0]["gamma"]]) + ["default"] * 2
        assert all(row["timing"] == "side by side" for row in group)
        fastest = [row for row in group if row["method"].endswith("(fastest)")]
        assert len(fastest) == 1 and fastest[0]["speedup"] == max(r["speedup"] for r in group[:-2])
        assert group[-2]["vs_best_fixed"] == pytest.approx(group[-2]["speedup"] / fastest[0]["speedup"], abs=1e-3)
        assert group[-1]["method"] == "hf_specdec, default, unrelated drafter"
        for row in group[-2:]:  # what the default decided with: the loop's measured step costs, by drafts per step
            parts = dict(part.split(": ") for part in row["costs_ms"].split(", "))
            assert "0" in parts and all(float(ms) > 0 for ms in parts.values())
        for row in group:  # one repeat: its ratio of totals is the median's; the paired speedup is a call's
            assert row["speedup_range"] == pytest.approx([row["speedup_of_totals"]] * 2, abs=1e-3)
            assert 0 < row["speedup"] < math.inf
            # the call ratios are kept, so that runs of one setting can be pooled: the median is theirs
            assert len(row["speedup_pairs"]) >= 1 and row["speedup"] == pytest.approx(
                statistics.median(row["speedup_pairs"]), abs=1e-3)
    feature_rows = sections["feature"]["rows"]
    assert {row["gamma"] for row in feature_rows} == {1, 2, "default"}
    assert 0 <= min(row["alpha"] for row in feature_rows if "alpha" in row) and sections["feature"]["step_cost_ratio"] > 0
    for row in feature_rows:  # the default's rows say what it decided with; fixed gammas decide nothing
        assert ("costs_ms" in row) == (row["gamma"] == "default")
        if row["gamma"] == "default":
            assert all(float(part.split(": ")[1]) > 0 for part in row["costs_ms"].split(", "))
    goals = {goal["goal"] for goal in results["goals"]}
    assert "feature head step / target step <= 0.08" in goals
    assert any(goal.startswith("default, unrelated drafter") for goal in goals)
    assert {goal["mode"] for goal in results["goals"]} == {"greedy", "sampled", "-"}
    unjudged = {(g["mode"], g["goal"][-1]) for g in results["goals"] if g["met"] is None}
    assert unjudged == {("sampled", "2")}  # sampled batch rows end at random EOS: reported, not judged
    assert "| not judged |" in (tmp_path / "results.md").read_text()


def test_half_precision_runs_report_raw_and_tie_identity(tiny_pair, tmp_path):
    target, drafter, tokenizer = tiny_pair
    config = BenchConfig(
        sections=("plain", "gamma"), modes=("greedy",), max_new_tokens=6, num_prompts=3, gammas=(2,),
        threads=1, out=tmp_path, dtype="bfloat16",
    )
    results = run_bench(target.to(torch.bfloat16), drafter.to(torch.bfloat16), tokenizer, config, progress=False)
    target.float(), drafter.float()
    row = results["sections"]["gamma"]["rows"][0]
    assert row["exact_rows"] <= row["tie_exact_rows"] <= row["num_rows"]
    markdown = (tmp_path / "results.md").read_text()
    assert "**bfloat16**" in markdown and "(tie " in markdown


def test_leviathan_bound_matches_closed_form_and_limits():
    assert leviathan_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)
    assert leviathan_speedup(1.0, 4, 0.0) == pytest.approx(5.0)
    assert leviathan_speedup(0.8, 3, 0.05) == pytest.approx((1 - 0.8**4) / (0.2 * 1.15))
    # A verification forward costing 1.5 target steps instead of 1: the denominator grows by 0.5.
    assert leviathan_speedup(0.8, 3, 0.05, 1.5) == pytest.approx((1 - 0.8**4) / (0.2 * 1.65))


def test_per_token_alpha_counts_one_rejection_per_short_step():
    # gamma = 2, three steps accepting 2, 1 and 0 drafts: 3 accepted, 2 rejections.
    stats = SpeculativeStats.empty(1, 2)
    for accepted in (2, 1, 0):
        emitted = torch.tensor([accepted + 1])
        stats.record_step(torch.tensor([True]), torch.tensor([2]), torch.tensor([accepted]), emitted)
    assert per_token_alpha(stats, 2) == pytest.approx(3 / 5)
    assert stats.acceptance_rate == pytest.approx(3 / 6)  # accepted / drafted, lower


def test_batches_left_pad_and_keep_prompt_order():
    groups = bench_prompts.batches([[5, 6], [7], [8, 9, 10]], batch_size=2, pad_token_id=0)
    assert groups[0]["input_ids"].tolist() == [[5, 6], [0, 7]]
    assert groups[0]["attention_mask"].tolist() == [[1, 1], [0, 1]]
    assert groups[1]["input_ids"].tolist() == [[8, 9, 10]]


def test_side_by_side_interleaves_methods_batch_by_batch_with_the_same_seeds(monkeypatch):
    calls = []
    monkeypatch.setattr(measure.gc, "collect", lambda: calls.append("gc"))

    def method(name):
        def generate(inputs, stats, max_new_tokens, **kwargs):
            calls.append((name, max_new_tokens, int(inputs["input_ids"][0, 0]), torch.initial_seed()))
            new = torch.full((1, max_new_tokens), 7)
            return torch.cat([inputs["input_ids"], new], dim=1)
        return generate

    batches = [{"input_ids": torch.tensor([[index, 0]])} for index in range(3)]
    first, second = time_side_by_side(
        [method("a"), method("b")], batches, {"max_new_tokens": 4}, eos_ids={7}, seed=10, repeats=2
    )
    assert calls[:2] == [("a", 4, 0, 10), ("b", 4, 0, 10)]  # warm-ups (max_new_tokens capped at 8)
    timed = calls[2:]
    assert timed[::2] == ["gc"] * 12  # the garbage of the call before is collected before each timed call
    timed = [(name, batch, seed) for name, _, batch, seed in timed[1::2]]
    # Batch by batch, both methods with the batch's seed, in a shuffled order; then the second repeat.
    pairs = [timed[i : i + 2] for i in range(0, 12, 2)]
    assert [{call[1:] for call in pair} for pair in pairs] == [{(batch, 10 + batch)} for batch in (0, 1, 2)] * 2
    assert all({call[0] for call in pair} == {"a", "b"} for pair in pairs)
    assert len({pair[0][0] for pair in pairs}) == 2  # each method goes first somewhere
    # The order is drawn from the seed: the same seed, the same order.
    again = []
    monkeypatch.setattr(measure.gc, "collect", lambda: None)
    time_side_by_side([lambda i, s, **k: again.append("a") or method("a")(i, s, **k),
                       lambda i, s, **k: again.append("b") or method("b")(i, s, **k)],
                      batches, {"max_new_tokens": 4}, eos_ids={7}, seed=10, repeats=2)
    assert again[2:] == [name for name, _, _ in timed]
    # Tokens count up to the first EOS (7): one per row; outputs come from the first repeat only.
    assert first.tokens == second.tokens == 3 and first.outputs == [[7]] * 3 and first.seconds > 0
    assert len(first.repeat_seconds) == 2 and first.seconds == pytest.approx(sum(first.repeat_seconds) / 2)
    assert first.repeat_tokens_per_s == [3 / seconds for seconds in first.repeat_seconds]
    # Each call's time, [repeat][batch], summing to the repeat's total; each batch's tokens.
    assert len(first.call_seconds) == 2 and all(len(repeat) == 3 for repeat in first.call_seconds)
    assert [sum(repeat) for repeat in first.call_seconds] == pytest.approx(list(first.repeat_seconds))
    assert first.batch_tokens == (1, 1, 1)


def _measured(call_seconds, batch_tokens):
    return Measurement(outputs=[], stats=None, call_seconds=call_seconds, batch_tokens=batch_tokens)


def test_paired_speedup_is_the_median_call_ratio_and_shrugs_off_a_burst():
    tokens = (10, 20, 10, 40)  # batches of different lengths: each pair compares one batch's calls
    plain = _measured(((1.0, 2.0, 1.0, 4.0), (1.0, 2.0, 1.0, 4.0), (1.0, 2.0, 1.0, 4.0)), tokens)
    # 2 % slower on every call, except two calls slowed by bursts of load in two of the three repeats.
    slower = [[1.02 * seconds for seconds in repeat] for repeat in plain.call_seconds]
    slower[1][3] *= 3
    slower[2][0] *= 1.5
    method = _measured(tuple(map(tuple, slower)), tokens)
    assert paired_speedup(method, plain) == pytest.approx(1 / 1.02)
    # The ratio of median totals takes a burst whole (negative control: 0.92 here)...
    assert plain.seconds / method.seconds < 0.95
    # ...and a method really 10 % slower everywhere is not hidden by the median.
    ten = _measured(tuple(tuple(1.1 * s for s in repeat) for repeat in plain.call_seconds), tokens)
    assert paired_speedup(ten, plain) == pytest.approx(1 / 1.1)
    # Tokens count: twice the tokens in the same time is twice the speed.
    assert paired_speedup(_measured(plain.call_seconds, tuple(2 * t for t in tokens)), plain) == pytest.approx(2.0)


def test_median_interval_takes_order_statistics_by_the_binomial_and_covers_what_it_says():
    # The ranks: 8 values -> the 2nd smallest and 2nd largest (coverage 1 - 2 * 9/256); 16 -> the 5th
    # (1 - 2 * P(Binomial(16, 1/2) <= 4)); 4 values cannot reach 90 % (the extremes cover 87.5 %).
    values = [1.07, 0.93, 1.01, 0.99, 1.2, 0.97, 1.03, 0.95]
    assert median_interval(values) == (0.95, 1.07, pytest.approx(1 - 2 * 9 / 256))
    sixteen = [i / 16 for i in range(16)]
    below_five = sum(math.comb(16, k) for k in range(5)) / 2**16
    assert median_interval(sixteen[::-1]) == (sixteen[4], sixteen[11], pytest.approx(1 - 2 * below_five))
    assert median_interval([1.0, 0.9, 1.1, 1.2]) is None and median_interval([]) is None
    # Coverage, N = 4000 samples of 8 log-normal call ratios (seed 0): the interval holds the true median
    # (1.0) in 93 % +- 2 % of them; the negative control, one rank further in (3rd smallest, 3rd largest:
    # 71 % by the binomial), falls short of the 90 % asked.
    generator = torch.Generator().manual_seed(0)
    samples = (0.05 * torch.randn(4000, 8, generator=generator)).exp().tolist()
    held = [low <= 1.0 <= high for low, high, _ in map(median_interval, samples)]
    assert abs(sum(held) / len(held) - (1 - 2 * 9 / 256)) < 0.02
    narrower = [sorted(sample)[2] <= 1.0 <= sorted(sample)[5] for sample in samples]
    assert sum(narrower) / len(narrower) < 0.8


def test_paired_ratios_are_the_calls_the_median_is_taken_over():
    tokens = (10, 20)
    plain = _measured(((1.0, 2.0), (1.0, 4.0)), tokens)
    method = _measured(((0.5, 2.0), (2.0, 2.0)), tokens)
    assert paired_ratios(method, plain) == pytest.approx([2.0, 1.0, 0.5, 2.0])
    assert paired_speedup(method, plain) == pytest.approx(1.5)


def test_a_baseline_timed_twice_compares_with_the_mean_of_its_calls():
    tokens = (10, 20)
    first = _measured(((1.0, 2.0), (1.0, 2.0)), tokens)
    second = _measured(((1.2, 2.4), (1.4, 2.0)), tokens)
    both = Measurement.mean_of([first, second])
    assert [list(repeat) for repeat in both.call_seconds] == [pytest.approx([1.1, 2.2]), pytest.approx([1.2, 2.0])]
    assert both.batch_tokens == tokens
    # A method 10 % slower than the baseline's mean on every call reads 1 / 1.1 against the mean; against the
    # first timing alone (the control) it reads slower: 1 / 1.21 on two calls, 1 / 1.32 and 1 / 1.1 on the others.
    method = _measured(tuple(tuple(1.1 * s for s in repeat) for repeat in both.call_seconds), tokens)
    assert paired_speedup(method, both) == pytest.approx(1 / 1.1)
    assert paired_speedup(method, first) == pytest.approx(1 / 1.21)
    with pytest.raises(ValueError, match="same tokens"):
        Measurement.mean_of([first, _measured(second.call_seconds, (10, 21))])


def test_ignore_eos_makes_every_row_generate_and_count_max_new_tokens(tiny_pair, tmp_path):
    target, drafter, tokenizer = tiny_pair
    config = BenchConfig(
        sections=("plain", "default"), modes=("sampled",), max_new_tokens=6, num_prompts=3, gammas=(1,),
        batch_sizes=(1, 2), threads=1, out=tmp_path, ignore_eos=True,
    )
    results = run_bench(target, drafter, tokenizer, config, progress=False)
    rows = [row for section in results["sections"].values() for row in section["rows"]]
    assert len(rows) == 1 + 2 * 4 and all(row["tokens"] == 3 * 6 for row in rows)
    assert target.generation_config.eos_token_id == 2  # the model's own config is left as it was
    assert "EOS ignored" in (tmp_path / "results.md").read_text()


def test_sampled_batch_ratios_with_eos_are_reported_but_not_judged():
    """Sampled rows of a batch end at EOS after lengths that differ between methods by chance, so their
    tokens/s ratio is not judged (met None); greedy rows, batch 1 and --ignore-eos runs are."""

    def results(ignore_eos):
        rows = [
            {"mode": mode, "batch_size": size, "method": method, "gamma": "default", "speedup": 0.5, "vs_best_fixed": 0.5}
            for mode in ("greedy", "sampled") for size in (1, 4)
            for method in ("hf_specdec, default", "hf_specdec, default, unrelated drafter")
        ]
        return {"config": {"modes": ["greedy", "sampled"], "ignore_eos": ignore_eos}, "sections": {"default": {"rows": rows}}}

    met = {(g["mode"], g["goal"][-1], "unrelated" in g["goal"]): g["met"] for g in report.goals(results(False))}
    assert len(met) == 8
    assert {key: value for key, value in met.items() if value is None} == {
        ("sampled", "4", False): None, ("sampled", "4", True): None
    }
    assert all(value is False for value in met.values() if value is not None)  # 0.5 misses every judged goal
    assert all(g["met"] is False for g in report.goals(results(True)))


def test_min_pairs_repeats_the_groups_with_few_batches_more(tiny_pair, tmp_path, monkeypatch):
    # 3 prompts: 3 batches at batch 1, 2 at batch 2. At least 6 calls per method: 2 and 3 repeats; the
    # control (min_pairs 0) keeps --repeats (1) for both.
    target, drafter, tokenizer = tiny_pair
    seen = []

    def recording(generates, batches, *args, repeats, **kwargs):
        seen.append((len(batches), repeats))
        return measure.time_side_by_side(generates, batches, *args, repeats=repeats, **kwargs)

    monkeypatch.setattr(runner, "time_side_by_side", recording)
    for min_pairs, expected in ((6, [(3, 2), (2, 3)]), (0, [(3, 1), (2, 1)])):
        seen.clear()
        config = BenchConfig(sections=("default",), modes=("greedy",), max_new_tokens=4, num_prompts=3, gammas=(1,),
                             batch_sizes=(1, 2), threads=1, out=tmp_path, min_pairs=min_pairs)
        run_bench(target, drafter, tokenizer, config, progress=False)
        assert sorted(seen, reverse=True) == expected
        assert ("at least 6 calls per method" in (tmp_path / "results.md").read_text()) == bool(min_pairs)


def test_first_difference_names_the_position_and_the_targets_top_two_gap(target):
    import tiny_models

    input_ids, _ = tiny_models.prompts(1, seed=40)
    prompt = input_ids[0].tolist()
    plain = target.generate(input_ids, do_sample=False, max_new_tokens=8, eos_token_id=None)[0, len(prompt):].tolist()
    assert measure.first_difference(target, prompt, plain, list(plain)) is None
    # Replace new token 3 by the target's runner-up there: the gap is that of an independent forward.
    with torch.no_grad():
        logits = target(input_ids=torch.tensor([prompt + plain[:3]])).logits[0, -1]
    top = logits.topk(2)
    other = plain[:3] + [int(top.indices[1])] + plain[4:]
    difference = measure.first_difference(target, prompt, plain, other)
    assert (difference.index, difference.plain_token, difference.other_token) == (3, plain[3], int(top.indices[1]))
    assert difference.gap == pytest.approx(float(top.values[0] - top.values[1]))
    assert difference.near_tie == (difference.gap < measure.TIE_TOLERANCE)
    # An output that stops early differs where it ended.
    short = measure.first_difference(target, prompt, plain, plain[:5])
    assert (short.index, short.other_token) == (5, None) and short.gap is not None


def test_the_demo_explains_every_difference_it_prints(monkeypatch):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "demo.py"
    spec = importlib.util.spec_from_file_location("demo", path)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)

    class Tok:
        def decode(self, ids):
            return f"<{ids[0]}>"

    class Target(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))

    answers = iter([None, measure.Difference(7, 11, 12, 0.0625), measure.Difference(7, 11, 12, 3.0)])
    monkeypatch.setattr(demo, "first_difference", lambda *args: next(answers))
    kinds = [demo.explain(Target(), Tok(), [1], [11], [12]) for _ in range(3)]
    assert [kind for kind, _ in kinds] == ["identical", "near-tie", "differs"]
    assert "new token 7" in kinds[1][1] and "0.0625" in kinds[1][1] and "near-tie" in kinds[1][1] and "bfloat16" in kinds[1][1]
    assert "3.0000" in kinds[2][1] and "float32" in kinds[2][1] and "bug" not in kinds[2][1]  # half precision
    fp32 = Target().float()
    answers = iter([measure.Difference(7, 11, 12, 3.0)])
    kind, sentence = demo.explain(fp32, Tok(), [1], [11], [12])
    assert kind == "differs" and "bug" in sentence  # in float32 a difference beyond a near-tie is a bug
