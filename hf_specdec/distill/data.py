"""Distillation data: the target's own responses to built-in prompts, as resumable JSONL.

One JSON object a line: ``ids`` (prompt + response token ids), ``prompt_len`` (tokens of the
templated prompt), ``greedy`` (bool) and ``prompt`` (the user text, the key that makes a run
resumable). The first three keys are the format of /work/shared/data; files without ``prompt``
read fine. Responses are cut after their first end-of-sequence token when read.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch
from tqdm.auto import tqdm

TEMPLATES = (
    "Write a short story about {}.",
    "Explain {} to a ten year old.",
    "Give me three tips about {}.",
    "What are the pros and cons of {}?",
    "Write a poem about {}.",
    "Describe {} in a few sentences.",
    "Write an email to a friend about {}.",
    "What is the history of {}?",
    "List five facts about {}.",
    "How do I get started with {}?",
    "Summarize why {} matters.",
    "Write a dialogue between two people about {}.",
)

TOPICS = (
    "cats", "dogs", "the ocean", "mountains", "rain", "coffee", "tea", "bread", "gardening",
    "bicycles", "trains", "airplanes", "the moon", "the sun", "volcanoes", "earthquakes", "music",
    "painting", "photography", "chess", "football", "swimming", "running", "yoga", "sleep",
    "friendship", "homework", "libraries", "museums", "robots", "computers", "the internet",
    "smartphones", "recycling", "climate change", "electric cars", "solar power", "wind energy",
    "honey bees", "butterflies", "dinosaurs", "ancient Egypt", "the Roman Empire", "castles",
    "pirates", "space travel", "Mars", "black holes", "gravity", "magnets", "electricity",
    "water", "clouds", "snow", "deserts", "rainforests", "coral reefs", "whales", "penguins",
    "elephants", "owls", "cooking pasta", "baking cakes", "healthy breakfast", "vegetables",
    "budgeting", "saving money", "job interviews", "public speaking", "learning a language",
    "writing a diary", "time management", "teamwork", "kindness", "birthdays", "holidays",
    "camping", "hiking", "fishing", "board games", "video games", "movies", "theatre", "poetry",
    "history books", "mathematics", "fractions", "the alphabet", "the human heart", "the brain",
    "vaccines", "washing hands", "first aid", "fire safety", "traffic lights", "bridges",
    "skyscrapers", "farming", "cheese", "chocolate", "apples", "rivers", "lakes", "islands",
    "lighthouses", "clocks", "calendars", "maps", "compasses", "telescopes", "microscopes",
    "printing", "paper", "pencils", "the post office", "a new city", "moving house", "a rainy day",
    "a school trip", "a lost key", "a birthday party", "a snowstorm", "a quiet morning",
)

# Held out from TOPICS and TEMPLATES so that evaluation measures generalisation, not recall.
EVAL_TEMPLATES = (
    "Tell me about {}.",
    "Write a short story about {}.",
    "Explain {} to a ten year old.",
    "Give me some advice about {}.",
)
EVAL_TOPICS = (
    "kites", "frogs", "sunflowers", "the Arctic", "pottery", "submarines", "a village market",
    "recycling paper", "stars at night", "a broken umbrella", "knitting", "bees in winter",
)

EOS_FALLBACK = 2


@dataclass(frozen=True)
class Record:
    ids: list[int]  # prompt + response, response cut after its first end-of-sequence token
    prompt_len: int
    greedy: bool
    prompt: str | None = None

    @property
    def response_len(self) -> int:
        return len(self.ids) - self.prompt_len


def build_prompts(split: str = "train", seed: int = 0) -> list[str]:
    """User messages: every template x topic of a split, in a fixed shuffled order.

    Args:
        split: "train" (TEMPLATES x TOPICS) or "eval" (EVAL_TEMPLATES x EVAL_TOPICS).
    """
    templates, topics = (TEMPLATES, TOPICS) if split == "train" else (EVAL_TEMPLATES, EVAL_TOPICS)
    prompts = [t.format(topic) for t, topic in itertools.product(templates, topics)]
    random.Random(seed).shuffle(prompts)
    return prompts


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Token ids of one user message, through the chat template when the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        return list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True,
                return_dict=False,
            )
        )
    return tokenizer(prompt, add_special_tokens=True)["input_ids"]


def eos_ids(model, tokenizer) -> set[int]:
    """End-of-sequence ids from the generation config of `model` (or of a data engine), else the tokenizer."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}


def _cut_after_eos(response: Sequence[int], eos: set[int]) -> list[int]:
    for i, token in enumerate(response):
        if token in eos:
            return list(response[: i + 1])
    return list(response)


def read_records(path: str | Path, eos: Iterable[int] = (EOS_FALLBACK,)) -> list[Record]:
    """Read a corpus JSONL; responses are cut after their first end-of-sequence token. Lines without
    "ids" (items `magpie_data` skipped, requests without answers) are passed over."""
    eos = set(eos)
    records = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            obj = json.loads(line)
            if "ids" not in obj:  # a skipped item or a request without an answer (magpie_data)
                continue
            prompt_len = int(obj["prompt_len"])
            ids = obj["ids"][:prompt_len] + _cut_after_eos(obj["ids"][prompt_len:], eos)
            records.append(Record(ids, prompt_len, bool(obj["greedy"]), obj.get("prompt")))
    return records


def length_batches(records: Sequence[Record], batch_tokens: int) -> list[list[int]]:
    """Indices of `records`, shortest first, grouped so that each group right-padded to its longest record
    holds at most `batch_tokens` tokens (a longer record gets a group of its own)."""
    order = sorted(range(len(records)), key=lambda i: len(records[i].ids))
    groups, start = [], 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop - start + 1) * len(records[order[stop]].ids) <= batch_tokens:
            stop += 1
        groups.append(order[start:stop])
        start = stop
    return groups


def right_padded(records: Sequence[Record]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), each [records, longest], padded on the right: with a causal mask, pads
    after a sequence cannot change anything computed for it."""
    width = max(len(record.ids) for record in records)
    input_ids = torch.zeros(len(records), width, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, record in enumerate(records):
        input_ids[row, : len(record.ids)] = torch.tensor(record.ids)
        attention_mask[row, : len(record.ids)] = 1
    return input_ids, attention_mask


def _done_keys(path: Path) -> set[tuple[str, bool]]:
    if not path.exists():
        return set()
    done = set()
    with open(path) as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                if "prompt" in obj:
                    done.add((obj["prompt"], bool(obj["greedy"])))
    return done


@torch.inference_mode()
def generate_corpus(
    target,
    tokenizer,
    path: str | Path,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 192,
    batch_size: int = 32,
    sampled_fraction: float = 0.5,
    temperature: float = 0.8,
    top_p: float = 0.95,
    seed: int = 0,
    progress: bool = True,
) -> Path:
    """Append the target's responses to ``prompts`` to ``path``, skipping prompts already there.

    Each prompt is answered greedily, and also sampled for a ``sampled_fraction`` of the prompts
    (those are chosen by seed). Rows are decoded with continuous batching (`stream_generate`: a row
    that finishes takes the next prompt), and every response is written as soon as it is done, so an
    interrupted run resumes where it stopped.

    Returns:
        ``path``.
    """
    from .generation import Sampling, stream_generate

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    work = [(p, True) for p in prompts]
    work += [(p, False) for p in prompts if rng.random() < sampled_fraction]
    done = _done_keys(path)
    work = [item for item in work if item not in done]
    eos = eos_ids(target, tokenizer)
    bar = tqdm(total=len(work), desc="target responses", unit="prompt", disable=not progress)
    with open(path, "a") as out:
        for greedy in (True, False):
            items = [prompt for prompt, mode in work if mode == greedy]
            sampling = Sampling() if greedy else Sampling(temperature, top_p)
            generator = torch.Generator().manual_seed(seed * 100_003 + len(done))
            encoded = (encode_prompt(tokenizer, prompt) for prompt in items)
            for index, ids, response in stream_generate(
                target, encoded, eos_ids=eos, max_new_tokens=max_new_tokens, batch_size=batch_size,
                sampling=sampling, generator=generator,
            ):
                line = {"ids": ids + response, "prompt_len": len(ids), "greedy": greedy, "prompt": items[index]}
                out.write(json.dumps(line) + "\n")
                out.flush()
                bar.update(1)
    bar.close()
    return path


@torch.inference_mode()
def magpie_prompts(
    target,
    tokenizer,
    count: int,
    *,
    max_new_tokens: int = 64,
    min_chars: int = 12,
    batch_size: int = 64,
    temperature: float = 1.0,
    top_p: float = 0.95,
    seed: int = 0,
    progress: bool = True,
) -> list[str]:
    """`count` user requests written by the target itself: sampled after its chat template's user prefix
    (Magpie), kept when the message ended on its own and has at least `min_chars` characters; distinct.
    A fixed seed gives the same requests, so a resumed run asks for the same ones."""
    from .generation import Sampling, magpie_prefix, stream_generate

    prefix = magpie_prefix(tokenizer)
    eos = eos_ids(target, tokenizer)
    generator = torch.Generator().manual_seed(seed)
    found: dict[str, None] = {}
    bar = tqdm(total=count, desc="magpie prompts", unit="prompt", disable=not progress)
    while len(found) < count:
        wanted = 2 * (count - len(found)) + 8  # some are cut off or too short
        stream = stream_generate(
            target, (prefix for _ in range(wanted)), eos_ids=eos, max_new_tokens=max_new_tokens,
            batch_size=batch_size, sampling=Sampling(temperature, top_p), generator=generator,
        )
        for _, _, message in stream:
            if not message or message[-1] not in eos:
                continue
            text = tokenizer.decode(message[:-1], skip_special_tokens=True).strip()
            if len(text) >= min_chars and text not in found:
                found[text] = None
                bar.update(1)
                if len(found) == count:
                    break
    bar.close()
    return list(found)
