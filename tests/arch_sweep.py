"""Architecture sweep: does `generate(drafter=...)` equal plain greedy `generate()` on every causal-LM type?

Contract: for every model type in `arch_zoo.MODEL_TYPES` (or those named on the command line), builds
the tiny target and a noisy copy as drafter (`tiny_models.perturbed`, scale 0.1: partial acceptance),
runs each case of `CASES` both ways (sliding-window models also the 40-token cases, from prompts
longer than their window of 8; with --stress also a 5-row ragged batch), drafting chains (`gamma=GAMMA`,
the record's "cases") and draft trees (`gamma=TreeDraftPolicy(**TREE)`, its "tree_cases"); where some
case refuses trees, also with the default policy (no `gamma=`, its "default_cases"), which must then draft
chains, exact where chains are. Each speculative run is classified against hf_specdec's guarantee (output
equals plain generate() on the same, left-padded, batch, or a typed SpeculativeError before the first
forward pass). Types whose config has an `is_decoder` flag
(BERT-like) are swept a second time built as encoders (`is_decoder=False`, their configs' default), as
a record named "TYPE (is_decoder=False)":

    exact                          tokens equal and the drafter really ran
    drafter ignored                tokens equal but the drafter never ran (generate() did not route
                                   through hf_specdec, e.g. the model overrides generate())
    refused before decoding        a SpeculativeError with no forward of the target or drafter yet
    refused after decoding started a SpeculativeError after some forward (breaks the guarantee)
    crash                          any other exception (type, message, deepest frame)
    differs                        tokens differ (first differing row and generated position)
    float32 near-tie               tokens differ first where plain generate()'s own top two logits are
                                   within FP32_TIE, and the same case in float64 is exact: the wider
                                   verification forward rounded the other way (not a logic error)
    plain generate fails           the baseline itself raises: not hf_specdec's bug

Only the public API is used (`import hf_specdec`; generate(drafter=..., gamma=...)). Everything is
seeded and runs on one CPU thread; each model does a fixed, small amount of work (no timeouts).

    python tests/arch_sweep.py [OUT.json] [--stress] [--table docs/support.md] [--only TYPE ...]
    python tests/arch_sweep.py --seq2seq [--table docs/support.md] [--only TYPE ...]

`--seq2seq` sweeps the classes of transformers' seq2seq and speech-seq2seq mappings instead (`sweep_seq2seq_model`)
and rewrites only their section of the table.

`--table` writes the support table the README links to (one row per model type, for chains and for trees:
exact, exact at batch 1 only, or refused, with the reason). tests/test_arch_sweep.py runs the same
classification as tests.
"""

from __future__ import annotations

import collections
import copy
import inspect
import json
import os
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch_zoo  # noqa: E402
import tiny_models  # noqa: E402

GAMMA = 3
#: The draft tree every type is also swept with (hf_specdec.TreeDraftPolicy's arguments).
TREE = dict(top_k=2, max_depth=3, max_nodes=6)
DRAFT_NOISE = 0.1
SHORT, LONG = 12, 40  # new tokens; LONG goes well past arch_zoo.WINDOW


@dataclass(frozen=True)
class Case:
    name: str
    prompt_lengths: tuple[int, ...]  # one per row; rows shorter than the longest are left-padded
    new_tokens: int
    sliding_only: bool = False
    stress: bool = False  # only with --stress


# The long cases also start from prompts longer than the window, so the prefill itself is windowed.
CASES = (
    Case("b1", (8,), SHORT),
    Case("b3pad", (10, 6, 3), SHORT),
    Case("b1_long", (14,), LONG, sliding_only=True),
    Case("b3pad_long", (14, 9, 4), LONG, sliding_only=True),
    # --stress: 5 ragged rows for 48 tokens, so rows accept differently for longer and the caches
    # collect more holes (some position / mask bugs only show then).
    Case("b5mix", (14, 11, 7, 4, 2), 48, stress=True),
)

EXACT, IGNORED, REFUSED_BEFORE, REFUSED_AFTER = "exact", "drafter ignored", "refused before decoding", (
    "refused after decoding started"
)
CRASH, DIFFERS, PLAIN_FAILS, SKIPPED = "crash", "differs", "plain generate fails", "skipped (unbuildable)"
NEAR_TIE = "float32 near-tie"
#: Most severe first: a model's overall class is its most severe case.
SEVERITY = (DIFFERS, CRASH, REFUSED_AFTER, IGNORED, NEAR_TIE, REFUSED_BEFORE, PLAIN_FAILS, EXACT, SKIPPED)
#: A float32 forward of another width may round logits this far apart either way (docs/how-it-works.md
#: measures ~3e-5 between a row alone and in a batch).
FP32_TIE = 1e-4


def prompts(lengths: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random prompts of the given lengths, left-padded: (input_ids, attention_mask) [batch, max]."""
    gen = torch.Generator().manual_seed(1234 + sum(lengths))
    batch, width = len(lengths), max(lengths)
    input_ids = torch.full((batch, width), tiny_models.PAD, dtype=torch.long)
    attention_mask = torch.zeros(batch, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        input_ids[row, width - length :] = torch.randint(3, tiny_models.VOCAB, (length,), generator=gen)
        attention_mask[row, width - length :] = 1
    return input_ids, attention_mask


def _frame(error: BaseException, inside: str | None = None) -> str | None:
    """file:line of the deepest traceback frame (or the deepest one whose path contains `inside`)."""
    frames = traceback.extract_tb(error.__traceback__)
    if inside is not None:
        frames = [f for f in frames if inside in f.filename]
    if not frames:
        return None
    frame = frames[-1]
    path = frame.filename
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{frame.lineno} ({frame.name})"


def _error(error: BaseException) -> dict[str, Any]:
    return {
        "type": type(error).__name__,
        "message": " ".join(str(error).split())[:600],
        "frame": _frame(error),
        "hf_specdec_frame": _frame(error, "hf_specdec/"),
    }


class ForwardCounter:
    """Counts forward() calls of a module with a pre-hook (so "before any forward" is observable)."""

    def __init__(self, module: torch.nn.Module):
        self.calls = 0
        self.handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.calls += 1

    def remove(self) -> None:
        self.handle.remove()


#: forward() arguments through which models take a cache or recurrent state.
CACHE_ARGS = ("past_key_values", "cache_params", "state", "mems", "cache", "past_buckets_states")


def _is_sliding(model: torch.nn.Module, cache_layers: list[str] | None) -> bool:
    """A window of WINDOW tokens applies to some layer: sliding / chunked / local layers or cache layers."""
    cfg = model.config.get_text_config()
    kinds = list(getattr(cfg, "layer_types", None) or []) + list(getattr(cfg, "attention_layers", None) or [])
    if any(("sliding" in str(k)) or ("chunked" in str(k)) or (str(k) == "local") for k in kinds):
        return True
    if cache_layers and any("Sliding" in name for name in cache_layers):
        return True
    return False


def _generate_overridden(model: torch.nn.Module) -> str | None:
    """The class that overrides GenerationMixin.generate (so drafter= may never reach hf_specdec)."""
    from transformers import GenerationMixin

    for cls in type(model).__mro__:
        if cls is GenerationMixin:
            return None
        if "generate" in cls.__dict__:
            return cls.__name__
    return None


def describe(model: torch.nn.Module) -> dict[str, Any]:
    """Static facts about a built model: cache layers, forward signature, windows."""
    from transformers import DynamicCache

    info: dict[str, Any] = {"class": type(model).__name__, "params": sum(p.numel() for p in model.parameters())}
    try:
        info["cache_layers"] = [type(layer).__name__ for layer in DynamicCache(config=model.config).layers]
    except Exception as error:  # noqa: BLE001
        info["cache_layers"] = None
        info["cache_error"] = _error(error)
    cfg = model.config.get_text_config()
    info["layer_types"] = list(getattr(cfg, "layer_types", None) or []) or None
    info["sliding_window"] = getattr(cfg, "sliding_window", None)
    info["attention_chunk_size"] = getattr(cfg, "attention_chunk_size", None)
    params = inspect.signature(model.forward).parameters
    info["forward_has_position_ids"] = "position_ids" in params
    info["forward_has_logits_to_keep"] = "logits_to_keep" in params
    # How forward() takes its cache: past_key_values, or a model-specific state argument (or none).
    info["forward_cache_args"] = [n for n in CACHE_ARGS if n in params]
    info["generate_overridden_by"] = _generate_overridden(model)
    info["sliding"] = _is_sliding(model, info["cache_layers"])
    # The cache a real forward returns (some models keep their own cache class).
    try:
        ids, mask = prompts((8,))
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        pkv = getattr(out, "past_key_values", None)
        info["runtime_cache"] = None if pkv is None else type(pkv).__name__
        layers = getattr(pkv, "layers", None)
        info["runtime_cache_layers"] = None if layers is None else [type(layer).__name__ for layer in layers]
    except Exception as error:  # noqa: BLE001
        info["runtime_cache"] = None
        info["runtime_cache_error"] = _error(error)
    return info


def _top_two_gap(target, input_ids: torch.Tensor, kwargs: dict[str, Any], row: int, position: int) -> float | None:
    """How far apart plain generate()'s top two logits are for `row`'s generated token `position`."""
    try:
        with torch.no_grad():
            out = target.generate(input_ids, **kwargs, output_scores=True, return_dict_in_generate=True)
        top = out.scores[position][row].topk(2).values
    except Exception:  # noqa: BLE001
        return None
    return float(top[0] - top[1])


def _in_float64(*models: torch.nn.Module) -> list[torch.nn.Module]:
    copies = [copy.deepcopy(model).double() for model in models]
    for model in copies:
        try:
            model.set_experts_implementation("eager")  # the grouped-matmul experts take no float64
        except Exception:  # noqa: BLE001  (no experts, or an older transformers)
            pass
    return copies


def run_case(hf_specdec, target, drafter, case: Case, gamma: Any = GAMMA, recheck: bool = True) -> dict[str, Any]:
    """One case, plain and speculative; `gamma=None` calls generate() without it (the default policy). A difference
    at a float32 near-tie is run again in float64 (`recheck`)."""
    input_ids, mask = prompts(case.prompt_lengths)
    kwargs = dict(attention_mask=mask, do_sample=False, max_new_tokens=case.new_tokens)
    result: dict[str, Any] = {"case": case.name}
    torch.manual_seed(0)
    try:
        with torch.no_grad():
            plain = target.generate(input_ids, **kwargs)
    except Exception as error:  # noqa: BLE001
        result.update(cls=PLAIN_FAILS, error=_error(error))
        return result
    if not isinstance(plain, torch.Tensor):
        plain = plain.sequences
    result["plain_new_tokens"] = int(plain.shape[1] - input_ids.shape[1])

    counters = [ForwardCounter(target), ForwardCounter(drafter)]
    torch.manual_seed(0)
    try:
        with torch.no_grad():
            spec = target.generate(input_ids, drafter=drafter, **kwargs, **({} if gamma is None else {"gamma": gamma}))
    except hf_specdec.SpeculativeError as error:
        forwards = sum(c.calls for c in counters)
        result.update(cls=REFUSED_BEFORE if forwards == 0 else REFUSED_AFTER, error=_error(error))
        return result
    except Exception as error:  # noqa: BLE001
        result.update(cls=CRASH, error=_error(error))
        return result
    finally:
        result["target_forwards"], result["drafter_forwards"] = counters[0].calls, counters[1].calls
        for counter in counters:
            counter.remove()
    if not isinstance(spec, torch.Tensor):
        spec = spec.sequences
    result["spec_new_tokens"] = int(spec.shape[1] - input_ids.shape[1])

    if spec.shape == plain.shape and torch.equal(spec, plain):
        # The default may find that drafting does not pay and only probe; a fixed gamma must draft.
        result["cls"] = EXACT if result["drafter_forwards"] > 0 or gamma is None else IGNORED
        return result
    # First difference: the earliest generated position in any row (a length mismatch counts at the end
    # of the shorter output).
    prompt_len = input_ids.shape[1]
    width = min(spec.shape[1], plain.shape[1])
    rows = min(spec.shape[0], plain.shape[0])
    diff = (spec[:rows, :width] != plain[:rows, :width]).nonzero()
    if len(diff):
        pos = int(diff[:, 1].min())
        row = int(diff[diff[:, 1] == pos][0, 0])
        first = {"row": row, "position": pos - prompt_len, "plain": int(plain[row, pos]), "spec": int(spec[row, pos])}
    else:
        first = {"row": None, "position": width - prompt_len, "plain_len": plain.shape[1], "spec_len": spec.shape[1]}
    result.update(cls=DIFFERS, first_diff=first, shapes=[list(plain.shape), list(spec.shape)])
    if first["row"] is not None and recheck and target.dtype == torch.float32:
        first["plain_gap"] = _top_two_gap(target, input_ids, kwargs, first["row"], first["position"])
        if first["plain_gap"] is not None and first["plain_gap"] < FP32_TIE:
            first["float64"] = run_case(hf_specdec, *_in_float64(target, drafter), case, gamma, recheck=False)["cls"]
            if first["float64"] == EXACT:
                result["cls"] = NEAR_TIE
    return result


#: Suffix of the record of a type built as an encoder (config.is_decoder=False).
ENCODER = " (is_decoder=False)"


def sweep_names(model_types: list[str]) -> list[str]:
    """The records to sweep: each type, followed by its encoder build where its config has the flag."""
    return [name for t in model_types for name in ([t, t + ENCODER] if arch_zoo.declares_is_decoder(t) else [t])]


def _worst(cases: list[dict[str, Any]]) -> str:
    return min((c["cls"] for c in cases), key=SEVERITY.index)


def sweep_model(hf_specdec, model_type: str, stress: bool = False) -> dict[str, Any]:
    """One record; `model_type` may end with ENCODER (that type built with is_decoder=False)."""
    record: dict[str, Any] = {"model_type": model_type}
    start = time.perf_counter()
    try:
        base = model_type.removesuffix(ENCODER)
        target = arch_zoo.build(base, seed=0, is_decoder=base == model_type)
    except arch_zoo.Unbuildable as error:
        record.update(overall=SKIPPED, skip_reason=str(error), cases=[])
        return record
    except Exception as error:  # noqa: BLE001  (the zoo itself broke: report, do not stop the sweep)
        record.update(overall=CRASH, zoo_error=_error(error), cases=[])
        return record
    drafter = tiny_models.perturbed(target, scale=DRAFT_NOISE, seed=123)
    record["info"] = describe(target)
    cases = [c for c in CASES if (not c.sliding_only or record["info"]["sliding"]) and (stress or not c.stress)]
    record["cases"] = [run_case(hf_specdec, target, drafter, case) for case in cases]
    record["overall"] = _worst(record["cases"])
    tree = hf_specdec.TreeDraftPolicy(**TREE)
    record["tree_cases"] = [run_case(hf_specdec, target, drafter, case, tree) for case in cases]
    record["tree_overall"] = _worst(record["tree_cases"])
    if any(c["cls"] == REFUSED_BEFORE for c in record["tree_cases"]):
        record["default_cases"] = [run_case(hf_specdec, target, drafter, case, None) for case in cases]
        record["default_overall"] = _worst(record["default_cases"])
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def _reason(case: dict[str, Any]) -> str:
    if "error" in case:
        error = case["error"]
        # Our failures are located by hf_specdec's deepest frame; the baseline's by the deepest frame.
        where = error.get("hf_specdec_frame") or error.get("frame")
        if case["cls"] == PLAIN_FAILS:
            where = error.get("frame")
        return f"{error['type']}: {error['message'][:140]} @ {where}"
    if "first_diff" in case:
        return f"first diff {case['first_diff']}"
    return ""


#: How a record's cases were drafted: (label, its cases' key, its overall class's key).
MODES = (("chains", "cases", "overall"), ("trees", "tree_cases", "tree_overall"),
         ("default", "default_cases", "default_overall"))


def print_table(records: list[dict[str, Any]]) -> None:
    ran = {c["case"] for rec in records for c in rec["cases"]}
    names = [c.name for c in CASES if c.name in ran or not c.stress]
    print(f"{'model_type':40s} {'':>7s} " + " ".join(f"{n:>11s}" for n in names) + "  overall / reason")
    short = {EXACT: "exact", IGNORED: "ignored", REFUSED_BEFORE: "refused", REFUSED_AFTER: "REFUSED-LATE",
             CRASH: "CRASH", DIFFERS: "DIFFERS", NEAR_TIE: "near-tie", PLAIN_FAILS: "plain-fails", SKIPPED: "skip"}
    for rec in records:
        for mode, key, overall_key in MODES:
            if mode != "chains" and key not in rec:
                continue
            by_case = {c["case"]: c for c in rec[key]}
            cells = " ".join(f"{short[by_case[n]['cls']] if n in by_case else '-':>11s}" for n in names)
            overall = rec[overall_key]
            worst = next((c for c in rec[key] if c["cls"] == overall), None)
            reason = rec.get("skip_reason") or (_reason(worst) if worst and overall != EXACT else "")
            label = rec["model_type"] if mode == "chains" else ""
            print(f"{label:40s} {mode:>7s} {cells}  {overall}" + (f" | {reason[:200]}" if reason else ""))
    for mode, key, overall_key in MODES:
        counts = collections.Counter(rec[overall_key] for rec in records if overall_key in rec)
        per_case = collections.Counter(c["cls"] for rec in records for c in rec.get(key, []))
        print(f"\n{mode} overall:", dict(sorted(counts.items(), key=lambda kv: SEVERITY.index(kv[0]))))
        print(f"{mode} per case:", dict(sorted(per_case.items(), key=lambda kv: SEVERITY.index(kv[0]))))


def hf_specdec_state(hf_specdec) -> dict[str, Any]:
    """Which hf_specdec was swept (it is being edited): git HEAD, its dirty files, a hash of its sources."""
    import hashlib
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(hf_specdec.__file__)))
    digest = hashlib.sha256()
    for folder, _, files in sorted(os.walk(os.path.dirname(hf_specdec.__file__))):
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    digest.update(name.encode() + f.read())

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30).stdout.strip()
        except Exception:  # noqa: BLE001
            return ""

    return {"head": git("rev-parse", "--short", "HEAD"), "dirty": git("status", "--short", "--", "hf_specdec"),
            "sources_sha256": digest.hexdigest()[:16]}


def support_status(record: dict[str, Any], key: str = "cases") -> tuple[str, str]:
    """(hf_specdec, why) for the support table, from the record's chain cases ("cases") or tree cases
    ("tree_cases")."""
    cases = record.get(key, [])
    if record["overall"] == SKIPPED:
        return "not swept", record.get("skip_reason", "")
    if not cases:  # the zoo could not build it
        return f"**{record['overall']}**", record.get("zoo_error", {}).get("message", "")[:160]
    overall = _worst(cases)
    if overall == EXACT:
        return "exact", ""
    if overall == NEAR_TIE and all(c["cls"] in (EXACT, NEAR_TIE) for c in cases):
        tie = next(c for c in cases if c["cls"] == NEAR_TIE)
        first = tie["first_diff"]
        return "exact up to a float32 near-tie", (
            f"{tie['case']}: row {first['row']} token {first['position']} is the other of plain generate()'s top two, "
            f"{first['plain_gap']:.1e} apart; exact in float64"
        )
    if overall == PLAIN_FAILS:
        failing = next(c for c in cases if c["cls"] == PLAIN_FAILS)
        return "plain generate() fails", failing["error"]["message"][:160]
    refused = [c for c in cases if c["cls"] == REFUSED_BEFORE]
    if refused and all(c["cls"] in (EXACT, REFUSED_BEFORE, PLAIN_FAILS) for c in cases):
        # The reason trees add (a case chains run or refuse for another reason) before the one they share.
        chain_refusals = {c["error"]["message"] for c in record["cases"] if c["cls"] == REFUSED_BEFORE}
        refused.sort(key=lambda c: c["error"]["message"] in chain_refusals)
        why = refused[0]["error"]["message"].split(";")[0]
        single = [c for c in cases if len(next(k for k in CASES if k.name == c["case"]).prompt_lengths) == 1]
        if single and all(c["cls"] == EXACT for c in single):
            return "exact at batch 1; refused in batches", why
        return "refused", why
    worst = next(c for c in cases if c["cls"] == overall)
    return f"**{overall}**", _reason(worst)[:160]


def default_falls_back(record: dict[str, Any]) -> bool | None:
    """Where some case refuses trees: whether the default (no gamma=) did what chains did in every case
    (exact where they are exact, refused where they refuse). None where it was not run."""
    if "default_cases" not in record:
        return None
    return [c["cls"] for c in record["default_cases"]] == [c["cls"] for c in record["cases"]]


def chains_only(record: dict[str, Any]) -> bool:
    """Some case is exact with chains and refused with trees (the default must draft chains there)."""
    return any(chain["cls"] == EXACT and tree["cls"] == REFUSED_BEFORE
               for chain, tree in zip(record.get("cases", []), record.get("tree_cases", [])))


def tree_cell(record: dict[str, Any], status_of=support_status) -> str:
    """The trees column: exact, or the status and reason where they differ from chains' (`status_of`: the table's
    `support_status` or `seq2seq_status`)."""
    status, why = status_of(record, "tree_cases")
    if status in ("exact", "not swept") or (status, why) == status_of(record):
        return status if status in ("exact", "not swept") else f"{status} (as chains)"
    cell = f"{status}: {why.split('. ')[0]}"  # the reason, not the advice to draft chains
    if default_falls_back(record) is False:
        return cell + "; **the default did not do as chains**"
    return cell + "; the default drafts chains" if chains_only(record) else cell


def summary(statuses: list[str]) -> str:
    """'N status, M status, ...', the commonest first."""
    return ", ".join(f"{count} {label}" for label, count in collections.Counter(statuses).most_common())


def write_table(records: list[dict[str, Any]], path: str, versions: str) -> None:
    chains = [support_status(record)[0] for record in records]
    trees = [support_status(record, "tree_cases")[0] for record in records]
    fallback = [r for r in records if chains_only(r)]
    lines = [
        "# Which transformers causal LMs hf_specdec runs",
        "",
        f"Generated by `python tests/arch_sweep.py --stress --table {path}` ({versions}): a tiny seeded model of every "
        "type in transformers' causal-LM mapping, a noisy copy as drafter, greedy `generate(drafter=..., gamma=3)` "
        f"(*chains*) and `gamma=TreeDraftPolicy({', '.join(f'{k}={v}' for k, v in TREE.items())})` (*trees*) "
        "against plain `generate()` on the same input (token-identical, fp32): one prompt, a left-padded batch of 3, "
        "a ragged batch of 5, and past the window for sliding-window models. Types whose config has an `is_decoder` "
        "flag (BERT-like) have a second row built as encoders (`is_decoder=False`, their configs' default). "
        "*Exact*: every case gave plain generate()'s tokens. *Refused*: a typed `UnsupportedModelError` before any "
        "forward pass, with the reason (for trees where it is not the chains'). Where trees are refused, the "
        "sweep also calls generate() without `gamma=` (the default, which drafts trees where they pay): it must "
        "draft chains instead, exact wherever chains are.",
        "",
        f"Chains: {summary(chains)}.",
        "",
        f"Trees: {summary(trees)}. {len(fallback)} types run chains where they refuse trees; with the default "
        f"(no `gamma=`) {sum(bool(default_falls_back(r)) for r in fallback)} of them decode exactly as with chains.",
        "",
        "| model type | class | chains | why | trees |",
        "|---|---|---|---|---|",
    ]
    for record in records:
        status, why = support_status(record)
        cells = (record["model_type"], record.get("info", {}).get("class", ""), status, why, tree_cell(record))
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    warnings.filterwarnings("ignore")
    import transformers

    import hf_specdec

    transformers.logging.set_verbosity_error()
    out_path, only, table = "/tmp/arch_sweep.json", None, None
    stress = "--stress" in argv
    argv = [a for a in argv if a != "--stress"]
    if "--only" in argv:
        index = argv.index("--only")
        only, argv = argv[index + 1 :], argv[:index]
    if "--table" in argv:
        index = argv.index("--table")
        table, argv = argv[index + 1], argv[:index] + argv[index + 2 :]
    if "--seq2seq" in argv:
        return main_seq2seq(only, table)
    if argv:
        out_path = argv[0]
    model_types = sweep_names(only or arch_zoo.MODEL_TYPES)
    records = []
    for model_type in model_types:
        record = sweep_model(hf_specdec, model_type, stress=stress)
        records.append(record)
        modes = ", ".join(f"{mode} {record[key]}" for mode, _, key in MODES if key in record)
        print(f"[{len(records)}/{len(model_types)}] {model_type}: {modes}", file=sys.stderr, flush=True)
    print_table(records)
    with open(out_path, "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "gamma": GAMMA, "tree": TREE,
                   "hf_specdec": hf_specdec_state(hf_specdec),
                   "cases": [asdict(c) for c in CASES], "records": records}, f, indent=1, default=str)
    print(f"\nwrote {out_path}")
    if table:
        write_table(records, table, f"transformers {transformers.__version__}, torch {torch.__version__}")
        print(f"wrote {table}")
    return 0



# Encoder-decoder and speech-to-text classes (arch_zoo.SEQ2SEQ_CLASSES): the same classification, with the encoder's
# input (source text, audio) in place of the prompt; a noisy copy as drafter (an encoder-decoder drafter, or the
# decoder-only drafter of a decoder-only audio LM), and prompt lookup (over the source where it has token ids).
SEQ2SEQ_CASES = (("b1", 1, "model"), ("b1_lookup", 1, "prompt_lookup"), ("b3pad", 3, "model"))


def run_seq2seq_case(hf_specdec, target, drafter, rows: int, gamma: Any = GAMMA) -> dict[str, Any]:
    inputs = arch_zoo.encoder_inputs(target, rows, seed=rows)
    kwargs = dict(do_sample=False, num_beams=1, max_new_tokens=SHORT, **inputs)  # (FSMT's config asks for beams)
    result: dict[str, Any] = {}
    torch.manual_seed(0)
    try:
        with torch.no_grad():
            plain = target.generate(**kwargs)
    except Exception as error:  # noqa: BLE001
        return dict(cls=PLAIN_FAILS, error=_error(error))
    plain = plain if isinstance(plain, torch.Tensor) else plain.sequences
    counters = [ForwardCounter(target)] + ([ForwardCounter(drafter)] if isinstance(drafter, torch.nn.Module) else [])
    torch.manual_seed(0)
    try:
        with torch.no_grad():
            spec = target.generate(**kwargs, drafter=drafter, gamma=gamma)
    except hf_specdec.SpeculativeError as error:
        forwards = sum(c.calls for c in counters)
        return dict(cls=REFUSED_BEFORE if forwards == 0 else REFUSED_AFTER, error=_error(error))
    except Exception as error:  # noqa: BLE001
        return dict(cls=CRASH, error=_error(error))
    finally:
        result["target_forwards"] = counters[0].calls
        for counter in counters:
            counter.remove()
    spec = spec if isinstance(spec, torch.Tensor) else spec.sequences
    if spec.shape == plain.shape and torch.equal(spec, plain):
        return dict(result, cls=EXACT)
    diff = (spec[:, : plain.shape[1]] != plain[:, : spec.shape[1]]).nonzero()
    first = {"row": int(diff[0, 0]), "position": int(diff[0, 1])} if len(diff) else {"shapes": [plain.shape, spec.shape]}
    return dict(result, cls=DIFFERS, first_diff=first)


def sweep_seq2seq_model(hf_specdec, model_type: str, class_name: str) -> dict[str, Any]:
    """One record of a seq2seq-mapping class: its cases (SEQ2SEQ_CASES) and overall class."""
    record: dict[str, Any] = {"model_type": model_type, "info": {"class": class_name}}
    try:
        target = arch_zoo.build_seq2seq(model_type, class_name)
        arch_zoo.encoder_inputs(target, 1)
    except arch_zoo.Unbuildable as error:
        record.update(overall=SKIPPED, skip_reason=str(error), cases=[])
        return record
    drafter = tiny_models.perturbed(target, scale=DRAFT_NOISE, seed=123)

    def sweep(gamma: Any) -> list[dict[str, Any]]:
        return [{"case": name, **run_seq2seq_case(hf_specdec, target, drafter if kind == "model" else kind, rows, gamma)}
                for name, rows, kind in SEQ2SEQ_CASES]

    record["cases"], record["tree_cases"] = sweep(GAMMA), sweep(hf_specdec.TreeDraftPolicy(**TREE))
    if any(c["cls"] == REFUSED_BEFORE for c in record["tree_cases"]):  # the default must then do as chains do
        record["default_cases"] = sweep(None)
    record["overall"] = _worst(record["cases"] + record["tree_cases"] + record.get("default_cases", []))
    return record


def seq2seq_status(record: dict[str, Any], key: str = "cases") -> tuple[str, str]:
    """(hf_specdec, why) of a seq2seq record for the support table, from its chain cases ("cases") or tree cases
    ("tree_cases")."""
    cases = record.get(key, [])
    if record["overall"] == SKIPPED:
        return "not swept", record["skip_reason"]
    classes = {c["case"]: c["cls"] for c in cases}
    if set(classes.values()) == {EXACT}:
        return "exact", ""
    refusals = [c for c in cases if c["cls"] == REFUSED_BEFORE]
    if all(cls in (EXACT, REFUSED_BEFORE, PLAIN_FAILS) for cls in classes.values()):
        if classes.get("b1") == EXACT and refusals:
            return "exact at batch 1; refused in batches", refusals[0]["error"]["message"].split(";")[0]
        if refusals:
            return "refused", refusals[0]["error"]["message"].split(";")[0]
        failing = next(c for c in cases if c["cls"] == PLAIN_FAILS)
        return "plain generate() fails", failing["error"]["message"][:160]
    overall = _worst(cases)
    worst = next(c for c in cases if c["cls"] == overall)
    return f"**{overall}**", _reason(worst)[:160]


SEQ2SEQ_HEADING = "## Encoder-decoder and speech-to-text types"


def write_seq2seq_table(records: list[dict[str, Any]], path: str, versions: str) -> None:
    """Replaces the section SEQ2SEQ_HEADING of the support table at `path` (appends it where there is none)."""
    statuses = [seq2seq_status(record)[0] for record in records]
    trees = [seq2seq_status(record, "tree_cases")[0] for record in records]
    lines = [
        SEQ2SEQ_HEADING,
        "",
        f"Generated by `python tests/arch_sweep.py --seq2seq --table {path}` ({versions}): every class of transformers' "
        "seq2seq and speech-seq2seq mappings, tiny and seeded, greedy fp32 against plain `generate()` on the same "
        f"input: one source with a noisy copy as drafter (`gamma={GAMMA}`, *chains*; "
        f"`gamma=TreeDraftPolicy({', '.join(f'{k}={v}' for k, v in TREE.items())})`, *trees*), the same with prompt "
        "lookup, and a padded batch of 3 sources; where trees are refused, also without `gamma=` (the default must do "
        "as chains do). Decoder-only audio LMs in these mappings follow the decoder-only rules (above). "
        "See docs/encoder-decoder.md.",
        "",
        f"Summary: {summary(statuses)}. Trees: {summary(trees)}.",
        "",
        "| model type | class | chains | why | trees |",
        "|---|---|---|---|---|",
    ]
    for record in records:
        status, why = seq2seq_status(record)
        cells = (record["model_type"], record["info"]["class"], status, why, tree_cell(record, seq2seq_status))
        lines.append("| " + " | ".join(str(cell).replace("|", "/").replace("\n", " ") for cell in cells) + " |")
    text = open(path).read() if os.path.exists(path) else ""
    if SEQ2SEQ_HEADING in text:
        text = text[: text.index(SEQ2SEQ_HEADING)]
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")


def main_seq2seq(only: list[str] | None, table: str | None) -> int:
    import transformers

    import hf_specdec

    classes = [(t, c) for t, c in arch_zoo.SEQ2SEQ_CLASSES if not only or t in only]
    records = []
    for model_type, class_name in classes:
        records.append(sweep_seq2seq_model(hf_specdec, model_type, class_name))
        print(f"[{len(records)}/{len(classes)}] {model_type} {class_name}: {records[-1]['overall']}"
              f" {seq2seq_status(records[-1])}", file=sys.stderr, flush=True)
    if table:
        write_seq2seq_table(records, table, f"transformers {transformers.__version__}, torch {torch.__version__}")
        print(f"wrote {table}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
