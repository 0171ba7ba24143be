"""Training data at scale, written by the target itself (Magpie), resumable to the byte.

Contract: `generate_data(target, tokenizer, path, items, seed=...)` makes work items 0..items-1; item i
depends only on (seed, i): its kind (a free request, or one the target writes after a kind's opening
such as "How do I" or "Rewrite this", a follow-up turn, or, for a minority, one of the tool's template
prompts), whether its answer is greedy or sampled, and its own random generators. The target writes the
request after its chat template's user prefix (Xu et al. 2024), then answers it through the template.
Items are made `chunk` at a time in one continuous stream (`stream_generate`: a finished request's
answer, or a follow-up's second request, joins the running batch at once, so the batch stays full until
the chunk's tail), and each chunk is appended to the JSONL in item order, one line per item (an item
whose request did not end, or was too short, or whose prompt shares a run of 8 tokens with a
hand-written held-out request, gets a line with "skipped"). A restart cuts an unfinished chunk and
makes it again from the same state, so the file equals an uninterrupted run's. The settings and the
engine that decodes (`generation.Engine`: the torch target by default, or llama.cpp) live in
`<path>.meta.json`; resuming with other ones is refused. Every line records its "seed" and "item", so
held-out requests can use seeds no training file records (`heldout.check_seeds`).

Line keys: "ids" (prompt + response), "prompt_len", "greedy", "prompt" (the last user message), "kind",
"item", "seed", "engine"; or "item", "seed", "kind", "engine", "skipped"; with `requests_only`, "prompt"
without "ids".
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm

from .data import build_prompts, eos_ids
from .generation import PLACEHOLDER, Engine, RowOptions, Sampling, TorchEngine, magpie_prefix

# (kind, opening the target continues its request from, weight). "" lets it write freely (plain Magpie).
KINDS: tuple[tuple[str, str, float], ...] = (
    ("free", "", 3.0),
    ("how-to", "How do I", 1.0),
    ("how-to", "What is the best way to", 0.5),
    ("explain", "Can you explain", 1.0),
    ("explain", "Why", 0.5),
    ("write", "Write", 1.0),
    ("write", "Draft", 0.3),
    ("list", "List", 0.7),
    ("list", "Give me", 0.5),
    ("code", "Write a Python function", 0.5),
    ("code", "How can I write code that", 0.3),
    ("rewrite", "Rewrite", 0.4),
    ("rewrite", "Can you make this sentence", 0.3),
    ("question", "What", 0.7),
    ("question", "Is it", 0.3),
    ("follow-up", "", 1.0),  # a second user turn the target writes after its own first answer
)


@dataclass(frozen=True)
class DataSettings:
    """What a data file was made with; resuming needs the same (they decide every item)."""

    seed: int = 0
    chunk: int = 256
    max_new_tokens: int = 256
    max_request_tokens: int = 64
    min_request_chars: int = 12
    sampled_fraction: float = 0.5
    template_fraction: float = 0.1
    request_temperature: float = 1.0
    request_top_p: float = 0.95
    temperature: float = 0.8
    top_p: float = 0.95
    requests_only: bool = False
    exclude_heldout: bool = True  # skip items whose prompt shares 8 tokens with a hand-written held-out request


def _derived_seed(seed: int, item: int, purpose: str) -> int:
    digest = hashlib.sha256(f"{seed}/{item}/{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _generator(seed: int, item: int, purpose: str) -> torch.Generator:
    return torch.Generator().manual_seed(_derived_seed(seed, item, purpose))


@dataclass
class _Item:
    item: int
    kind: str
    opening: str
    greedy: bool
    template: str | None  # a template prompt instead of a Magpie request
    request: str | None = None
    messages: list | None = None  # follow-up: the first turn's [user, assistant] messages
    skipped: str | None = None
    line: dict | None = None


def plan_item(settings: DataSettings, item: int, templates: Sequence[str]) -> _Item:
    """Item `item`'s kind, opening and decoding mode: a function of (seed, item) only."""
    rng = random.Random(f"{settings.seed}/{item}")
    greedy = rng.random() >= settings.sampled_fraction
    if not settings.requests_only and rng.random() < settings.template_fraction:
        return _Item(item, "template", "", greedy, templates[rng.randrange(len(templates))])
    kinds = [k for k in KINDS if not (settings.requests_only and k[0] == "follow-up")]
    kind, opening, _ = rng.choices(kinds, weights=[w for *_, w in kinds])[0]
    return _Item(item, kind, opening, greedy, None)


def _user_prefix(tokenizer, messages: list) -> list[int]:
    """The chat template over `messages` up to where the next user message starts."""
    text = tokenizer.apply_chat_template([*messages, {"role": "user", "content": PLACEHOLDER}], tokenize=False)
    return tokenizer(text[: text.index(PLACEHOLDER)], add_special_tokens=False)["input_ids"]


def _prompt_ids(tokenizer, messages: list) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


class _Jobs:
    """The chunk's work as one growing stream: a finished request adds its answer, a finished first answer
    of a follow-up item adds its second request (see `stream_generate`: it asks again when rows are free)."""

    def __init__(self):
        self.jobs: list[tuple[str, _Item, list[int], RowOptions]] = []
        self.started = 0

    def __iter__(self):
        return self

    def __next__(self) -> list[int]:
        if self.started == len(self.jobs):
            raise StopIteration  # for now: more may come
        self.started += 1
        return self.jobs[self.started - 1][2]


def _make_chunk(engine: Engine, tokenizer, settings: DataSettings, items: list[_Item], eos: set[int], batch_size: int,
                leak_filter) -> list[dict]:
    jobs = _Jobs()

    def add(purpose: str, item: _Item) -> None:
        generator = _generator(settings.seed, item.item, purpose)
        if purpose.endswith("request"):
            prefix = magpie_prefix(tokenizer) if item.messages is None else _user_prefix(tokenizer, item.messages)
            opening = tokenizer(item.opening, add_special_tokens=False)["input_ids"] if item.opening else []
            options = RowOptions(Sampling(settings.request_temperature, settings.request_top_p),
                                 settings.max_request_tokens, generator)
            jobs.jobs.append((purpose, item, prefix + opening, options))
        else:
            prompt = _prompt_ids(tokenizer, [*(item.messages or []), {"role": "user", "content": item.request}])
            sampling = Sampling() if item.greedy else Sampling(settings.temperature, settings.top_p)
            jobs.jobs.append((purpose, item, prompt, RowOptions(sampling, settings.max_new_tokens, generator)))

    # 1. Requests the target writes (a template item has its prompt already and goes straight to its answer).
    for item in items:
        if item.template is not None:
            item.request = item.template
            add("answer", item)
        else:
            add("request", item)
    # 2. One stream for everything: each finished job adds the next one of its item.
    cap = max(settings.max_new_tokens, settings.max_request_tokens)
    for index, ids, output in engine.stream(jobs, eos_ids=eos, max_new_tokens=cap, batch_size=batch_size,
                                            options=lambda index: jobs.jobs[index][3]):
        purpose, item, _, _ = jobs.jobs[index]
        if purpose.endswith("request"):
            if not output or output[-1] not in eos:
                item.skipped = f"{purpose} did not end within {settings.max_request_tokens} tokens"
                continue
            opening = tokenizer(item.opening, add_special_tokens=False)["input_ids"] if item.opening else []
            text = tokenizer.decode(opening + output[:-1], skip_special_tokens=True).strip()
            if len(text) < settings.min_request_chars:
                item.skipped = f"{purpose} shorter than {settings.min_request_chars} characters"
            else:
                item.request = text
                if not settings.requests_only:
                    add("follow-up answer" if purpose == "follow-up request" else "answer", item)
        elif item.kind == "follow-up" and purpose == "answer":
            # 3. A follow-up item writes its second request after its own first answer, then answers that.
            answer = tokenizer.decode(output, skip_special_tokens=True).strip()
            item.messages = [{"role": "user", "content": item.request}, {"role": "assistant", "content": answer}]
            item.request = None
            add("follow-up request", item)
        else:
            item.line = {"ids": ids + output, "prompt_len": len(ids), "greedy": item.greedy, "prompt": item.request}
    lines = []
    for item in items:
        if leak_filter is not None and item.skipped is None:
            prompt = item.line["ids"][: item.line["prompt_len"]] if item.line is not None else (
                _prompt_ids(tokenizer, [{"role": "user", "content": item.request}]))
            if leak_filter.find(prompt) is not None:
                item.skipped = "shares a token run with a held-out request"
        head = {"item": item.item, "seed": settings.seed, "kind": item.kind, "engine": engine.name}
        if item.skipped is not None:
            lines.append({**head, "skipped": item.skipped})
        elif settings.requests_only:
            lines.append({**head, "prompt": item.request})
        else:
            lines.append({**item.line, **head})
    return lines


def _resume_point(path: Path, chunk: int) -> int:
    """Items already in `path`, after cutting a chunk that was not written whole (and a torn last line)."""
    if not path.exists():
        return 0
    lines = path.read_bytes().split(b"\n")
    complete = [line for line in lines[:-1]]  # the part after the last newline is torn (or empty)
    done = len(complete) // chunk * chunk
    if done != len(complete) or lines[-1]:
        path.write_bytes(b"".join(line + b"\n" for line in complete[:done]))
    return done


def generate_data(
    target,
    tokenizer,
    path: str | Path,
    items: int,
    *,
    settings: DataSettings = DataSettings(),
    batch_size: int = 64,
    max_minutes: float | None = None,
    progress: bool = True,
    engine: Engine | None = None,
) -> Path:
    """Appends items up to `items` (rounded up to whole chunks) to the JSONL `path`; see the module doc.
    With `max_minutes`, no chunk is started after that much time (a sitting of known length; rerun to go on).
    `engine` decodes (default: `TorchEngine(target)`); with one given, `target` is not used (pass None).

    Raises:
        ValueError: `path` was made with other settings or another engine (`<path>.meta.json`).
    """
    engine = engine if engine is not None else TorchEngine(target)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = path.with_name(path.name + ".meta.json")
    wanted = {**asdict(settings), "engine": engine.name}
    if meta.exists():
        recorded = {"engine": TorchEngine.name, **json.loads(meta.read_text())}  # files from before engines: torch
        if recorded != wanted:
            differ = sorted(k for k in wanted if recorded.get(k) != wanted[k])
            raise ValueError(f"{path} was made with other settings ({', '.join(differ)}: {[recorded.get(k) for k in differ]}); "
                             "resume with those, or write to another file.")
    else:
        meta.write_text(json.dumps(wanted, indent=2) + "\n")
    done = _resume_point(path, settings.chunk)
    eos = eos_ids(engine, tokenizer)
    templates = build_prompts("train", 0)
    leak_filter = None
    if settings.exclude_heldout and not settings.requests_only:
        from .heldout import heldout_filter

        leak_filter = heldout_filter(tokenizer)
    bar = tqdm(total=items, initial=min(done, items), desc="magpie data", unit="item", disable=not progress)
    started = time.monotonic()
    with open(path, "a") as out:
        for start in range(done, items, settings.chunk):
            if max_minutes is not None and (time.monotonic() - started) / 60 >= max_minutes:
                break
            chunk = [plan_item(settings, i, templates) for i in range(start, start + settings.chunk)]
            lines = _make_chunk(engine, tokenizer, settings, chunk, eos, batch_size, leak_filter)
            out.write("".join(json.dumps(line) + "\n" for line in lines))
            out.flush()
            bar.update(len(lines))
    bar.close()
    return path


def summarize(path: str | Path) -> dict:
    """Items, kept and skipped per kind, and response tokens of a data file (how the mix came out)."""
    kinds: dict[str, dict[str, int]] = {}
    for line in Path(path).read_text().splitlines():
        obj = json.loads(line)
        entry = kinds.setdefault(obj["kind"], {"kept": 0, "skipped": 0, "response_tokens": 0})
        if "skipped" in obj:
            entry["skipped"] += 1
        else:
            entry["kept"] += 1
            entry["response_tokens"] += len(obj.get("ids", [])) - obj.get("prompt_len", 0)
    total = {key: sum(entry[key] for entry in kinds.values()) for key in ("kept", "skipped", "response_tokens")}
    return {"total": total, "kinds": kinds}
