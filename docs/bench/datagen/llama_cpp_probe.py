"""Probe: Magpie-style distillation data from llama.cpp's continuous batching (llama-cpp-python, low-level API).

Contract: `python llama_cpp_probe.py --gguf PATH --items N --parallel P` plans items like
`hf_specdec.distill.magpie_data` (request written after the chat template's user prefix, from a kind's
opening; answered greedily or with T 0.8 / top-p 0.95), decodes up to P sequences at once in one llama.cpp
context (one `llama_decode` per step: every live row's last token plus the new rows' prompts), and prints
JSON with generated and response tokens per second, load excluded. A measurement, not a product: no
follow-up turns, no template prompts, no held-out filter, no resume; the draws come from llama.cpp's
samplers (one seeded chain per job), so items are not the torch tool's items.

Runs in its own venv (llama-cpp-python, no torch). Point LLAMA_CPP_LIB_PATH at a libllama.so built from the
same llama.cpp source to skip the binding's own build.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import random
import time
from collections import deque
from dataclasses import dataclass, field

import jinja2
import llama_cpp as ll

PLACEHOLDER = "\u2063HF_SPECDEC_USER\u2063"
# (kind, opening, weight): magpie_data.KINDS without "follow-up" (a second turn needs a first answer back).
KINDS = (
    ("free", "", 3.0), ("how-to", "How do I", 1.0), ("how-to", "What is the best way to", 0.5),
    ("explain", "Can you explain", 1.0), ("explain", "Why", 0.5), ("write", "Write", 1.0), ("write", "Draft", 0.3),
    ("list", "List", 0.7), ("list", "Give me", 0.5), ("code", "Write a Python function", 0.5),
    ("code", "How can I write code that", 0.3), ("rewrite", "Rewrite", 0.4),
    ("rewrite", "Can you make this sentence", 0.3), ("question", "What", 0.7), ("question", "Is it", 0.3),
)


@dataclass
class Job:
    item: int
    purpose: str  # "request" or "answer"
    prompt: list[int]
    limit: int
    sampler: object  # a llama_sampler chain, freed when the job ends
    output: list[int] = field(default_factory=list)


def derived_seed(seed: int, item: int, purpose: str) -> int:
    digest = hashlib.sha256(f"{seed}/{item}/{purpose}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def make_sampler(temperature: float, top_p: float, seed: int):
    """A sampler chain: greedy at temperature 0, else temperature, then top-p, then a seeded draw (HF's order)."""
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    if temperature <= 0:
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
    else:
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(temperature))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(top_p, 1))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(seed))
    return chain


class Engine:
    """One llama.cpp context with `parallel` sequence slots, fed from a job queue."""

    def __init__(self, gguf: str, parallel: int, threads: int, seq_ctx: int, unified: bool):
        ll.llama_backend_init()
        self.model = ll.llama_model_load_from_file(gguf.encode(), ll.llama_model_default_params())
        self.vocab = ll.llama_model_get_vocab(self.model)
        params = ll.llama_context_default_params()
        params.n_ctx = parallel * seq_ctx
        params.n_batch = parallel * seq_ctx  # a step may prefill many prompts; llama_decode cuts ubatches itself
        params.n_ubatch = 512
        params.n_seq_max = parallel
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = unified
        self.ctx = ll.llama_init_from_model(self.model, params)
        self.memory = ll.llama_get_memory(self.ctx)
        self.parallel = parallel
        self.batch = ll.llama_batch_init(params.n_batch, 0, 1)
        template = ll.llama_model_chat_template(self.model, None).decode()
        self.template = jinja2.Environment().from_string(template)

    # -- text ---------------------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        raw = text.encode()
        buf = (ll.llama_token * (len(raw) + 16))()
        n = ll.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), False, True)
        return list(buf[:n])

    def detokenize(self, tokens: list[int]) -> str:
        out, buf = bytearray(), ctypes.create_string_buffer(256)
        for token in tokens:
            n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            out += buf.raw[:n]
        return out.decode(errors="replace")

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.template.render(messages=messages, add_generation_prompt=generation_prompt)

    def user_prefix(self) -> list[int]:
        text = self.render([{"role": "user", "content": PLACEHOLDER}], False)
        return self.tokenize(text[: text.index(PLACEHOLDER)])

    # -- decoding -----------------------------------------------------------------------------------------
    def run(self, queue: deque, on_done) -> None:
        """Decodes jobs from `queue` until it is empty and no slot is live; `on_done(job)` may queue more."""
        slots: list[Job | None] = [None] * self.parallel
        n_past = [0] * self.parallel
        while queue or any(slots):
            # 1. Fill free slots; their whole prompt joins this step's batch.
            batch, n, rows = self.batch, 0, []  # rows: (slot, batch index of its logits)
            for slot in range(self.parallel):
                if slots[slot] is None and queue:
                    job = slots[slot] = queue.popleft()
                    for pos, token in enumerate(job.prompt):
                        n = self._add(n, token, pos, slot, pos == len(job.prompt) - 1)
                    n_past[slot] = len(job.prompt)
                    rows.append((slot, n - 1))
                elif slots[slot] is not None and slots[slot].output:
                    n = self._add(n, slots[slot].output[-1], n_past[slot], slot, True)
                    n_past[slot] += 1
                    rows.append((slot, n - 1))
            batch.n_tokens = n
            # 2. One forward for every row.
            if ll.llama_decode(self.ctx, batch) != 0:
                raise RuntimeError("llama_decode failed (context too small?)")
            # 3. Sample each row from its own chain; a finished row frees its slot and its cache cells.
            for slot, index in rows:
                job = slots[slot]
                token = ll.llama_sampler_sample(job.sampler, self.ctx, index)
                job.output.append(token)
                if ll.llama_vocab_is_eog(self.vocab, token) or len(job.output) >= job.limit:
                    ll.llama_memory_seq_rm(self.memory, slot, -1, -1)
                    ll.llama_sampler_free(job.sampler)
                    slots[slot] = None
                    on_done(job)

    def _add(self, n: int, token: int, pos: int, seq: int, logits: bool) -> int:
        batch = self.batch
        batch.token[n], batch.pos[n], batch.n_seq_id[n] = token, pos, 1
        batch.seq_id[n][0], batch.logits[n] = seq, int(logits)
        return n + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--items", type=int, default=128)
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=900)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-request-tokens", type=int, default=64)
    parser.add_argument("--seq-ctx", type=int, default=512, help="KV cells per slot")
    parser.add_argument("--unified-kv", action="store_true", help="one KV buffer for all slots")
    parser.add_argument("--out", default=None, help="JSONL of items (ids, prompt_len, prompt, kind, greedy)")
    args = parser.parse_args()

    loaded = time.monotonic()
    engine = Engine(args.gguf, args.parallel, args.threads, args.seq_ctx, args.unified_kv)
    loaded = time.monotonic() - loaded
    prefix = engine.user_prefix()
    lines: dict[int, dict] = {}
    plans: dict[int, tuple[str, str, bool]] = {}
    queue: deque = deque()
    for item in range(args.items):
        rng = random.Random(f"{args.seed}/{item}")
        greedy = rng.random() >= 0.5
        kind, opening, _ = rng.choices(KINDS, weights=[w for *_, w in KINDS])[0]
        plans[item] = (kind, opening, greedy)
        opening_ids = engine.tokenize(opening) if opening else []
        queue.append(Job(item, "request", prefix + opening_ids, args.max_request_tokens,
                         make_sampler(1.0, 0.95, derived_seed(args.seed, item, "request"))))
    generated = {"request": 0, "answer": 0}

    def on_done(job: Job) -> None:
        generated[job.purpose] += len(job.output)
        kind, opening, greedy = plans[job.item]
        ended = ll.llama_vocab_is_eog(engine.vocab, job.output[-1])
        if job.purpose == "request":
            text = (opening + engine.detokenize(job.output[:-1])).strip() if ended else ""
            if len(text) < 12:
                lines[job.item] = {"item": job.item, "kind": kind, "skipped": "request did not end or too short"}
                return
            prompt = engine.tokenize(engine.render([{"role": "user", "content": text}], True))
            sampling = (0.0, 1.0) if greedy else (0.8, 0.95)
            lines[job.item] = {"prompt": text}
            queue.append(Job(job.item, "answer", prompt, args.max_new_tokens,
                             make_sampler(*sampling, derived_seed(args.seed, job.item, "answer"))))
        else:
            lines[job.item] = {"ids": job.prompt + job.output, "prompt_len": len(job.prompt), "greedy": greedy,
                               **lines[job.item], "kind": kind, "item": job.item, "seed": args.seed}

    started = time.monotonic()
    engine.run(queue, on_done)
    seconds = time.monotonic() - started
    if args.out:
        with open(args.out, "w") as out:
            out.writelines(json.dumps(lines[i]) + "\n" for i in sorted(lines))
    kept = [line for line in lines.values() if "ids" in line]
    response = sum(len(line["ids"]) - line["prompt_len"] for line in kept)
    print(json.dumps({
        "items": args.items, "kept": len(kept), "parallel": args.parallel, "threads": args.threads,
        "unified_kv": args.unified_kv, "load_seconds": round(loaded, 2), "seconds": round(seconds, 2),
        "response_tokens": response, "generated_tokens": sum(generated.values()),
        "response_tokens_per_s": round(response / seconds, 1),
        "generated_tokens_per_s": round(sum(generated.values()) / seconds, 1),
    }))


if __name__ == "__main__":
    main()
