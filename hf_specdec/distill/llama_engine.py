"""llama.cpp as the data tool's engine (`distill-data --engine llama-cpp`): the job stream of
`magpie_data`, decoded through llama-cpp-python's low-level API over a GGUF of the target.

Contract: `LlamaCppEngine(gguf, tokenizer, generation_config)` refuses a GGUF whose tokenizer differs from
the target's; its `stream` keeps `generation.stream_generate`'s contract with per-prompt `RowOptions`:
continuous batching in one llama.cpp context (a sequence and its own KV stream per row), one `llama_decode`
per step carrying every live row's last token and the whole prompts of rows refilled this step. Greedy rows
take the argmax; sampled rows draw from temperature, then top-p (HF's order), with a numpy generator seeded
from their `RowOptions.generator`'s seed, so a row's draws depend on no other row's. The tokens are not the
torch engine's (other kernels, other RNG): the data records its engine. `smollm2_gguf()` makes the SmolLM2
target's BF16 GGUF once from the wheel's Q4_1 one. Needs `pip install 'hf_specdec[llama-cpp]'`.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Iterator, Sequence

import numpy as np

from hf_specdec.errors import EngineBackendError, EngineWeightsError

from .generation import RowOptions, Sampling

INSTALL_HINT = "pip install 'hf_specdec[llama-cpp]' (llama-cpp-python==0.3.36)"
SMOLLM2_GGUF_NAME = "smollm2-135m-instruct.bf16.gguf"
# Checked to tokenize alike with the target's tokenizer and the GGUF's (inside the chat template).
_PROBE_TEXT = "Why do 12 naïve cafés close at 9:30?\n  Explain — briefly."


def llama_cpp():
    """The `llama_cpp` module, quiet (its loader otherwise reports every tensor on stderr).

    Raises:
        EngineBackendError: llama-cpp-python is not installed.
    """
    try:
        import llama_cpp as module
    except ImportError as error:
        raise EngineBackendError(f"--engine llama-cpp needs llama-cpp-python: {INSTALL_HINT}") from error
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    return module


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct as a BF16 GGUF beside the converted model (`smollm2.cache_dir()`), made once
    from the wheel's Q4_1 GGUF: its values d*q+m rounded to bf16, the weights a bf16 transformers target
    holds. llama.cpp decodes it ~3x faster than the Q4_1 file on a CPU with avx512_bf16
    (docs/distill-at-scale.md)."""
    from hf_specdec import smollm2

    out = smollm2.cache_dir().parent / SMOLLM2_GGUF_NAME
    if out.is_file():
        return out
    ll = llama_cpp()
    source = smollm2.gguf_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")  # renamed when whole: no half file to trust
    params = ll.llama_model_quantize_default_params()
    params.ftype = ll.LLAMA_FTYPE_MOSTLY_BF16
    params.allow_requantize = True  # the source is quantized already (Q4_1, Q8_0 embeddings)
    params.nthread = 1
    try:
        if ll.llama_model_quantize(str(source).encode(), str(partial).encode(), ctypes.byref(params)) != 0:
            raise EngineWeightsError(f"llama.cpp could not convert {source} to BF16; pass a GGUF with --gguf")
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def top_p_draw(probs: np.ndarray, top_p: float, uniform: float) -> int:
    """The token a uniform draw in [0, 1) picks from `probs` [vocab] cut to its top-p nucleus: the most
    probable tokens whose higher-ranked mass is below `top_p` (at least one; HF's TopPLogitsWarper).

    Only tokens of probability >= (1 - top_p) / vocab are sorted: the others together hold less than
    1 - top_p, so the nucleus lies among the sorted ones (a few hundred, not the whole vocabulary)."""
    if top_p >= 1.0:
        cumulative = np.cumsum(probs, dtype=np.float64)
        return int(min(np.searchsorted(cumulative, uniform * cumulative[-1], side="right"), len(probs) - 1))
    candidates = np.flatnonzero(probs >= (1.0 - top_p) / len(probs))
    candidate_probs = probs[candidates].astype(np.float64)
    order = np.argsort(-candidate_probs, kind="stable")  # ties: the lower id first
    sorted_probs = candidate_probs[order]
    cumulative = np.cumsum(sorted_probs)
    kept = max(1, int(np.searchsorted(cumulative - sorted_probs, top_p, side="left")))
    rank = min(int(np.searchsorted(cumulative[:kept], uniform * cumulative[kept - 1], side="right")), kept - 1)
    return int(candidates[order[rank]])


def pick_tokens(logits: np.ndarray, samplings: Sequence[Sampling], uniforms: Sequence[float | None]) -> np.ndarray:
    """[rows] next tokens from raw logits [rows, vocab]: argmax for greedy rows; for sampled rows a draw
    (`uniforms[row]`) from softmax(logits / temperature) cut to top-p. Rows sharing a sampling are scaled
    and normalised together (one numpy pass over the group)."""
    tokens = np.empty(len(samplings), dtype=np.int64)
    groups: dict[Sampling, list[int]] = {}
    for row, sampling in enumerate(samplings):
        groups.setdefault(sampling, []).append(row)
    for sampling, rows in groups.items():
        if sampling.temperature <= 0:
            tokens[rows] = logits[rows].argmax(axis=1)
            continue
        scaled = logits[rows] / np.float32(sampling.temperature)  # [group, vocab]
        scaled -= scaled.max(axis=1, keepdims=True)
        np.exp(scaled, out=scaled)
        scaled /= scaled.sum(axis=1, keepdims=True)
        for probs, row in zip(scaled, rows):
            tokens[row] = top_p_draw(probs, sampling.top_p, uniforms[row])
    return tokens


@dataclass
class _Row:
    """One prompt being decoded in a sequence slot."""

    index: int
    prompt: list[int]
    sampling: Sampling
    limit: int
    rng: np.random.Generator | None
    output: list[int] = field(default_factory=list)


class LlamaCppEngine:
    """A loaded GGUF and its llama.cpp context (made for the first `stream`'s batch size, kept while that
    stays: making one takes seconds). Each `stream` call starts from a cleared context, KV data included, as
    a fresh one would: a chunk's tokens do not depend on earlier chunks, so a resumed file equals an
    uninterrupted one. Not shared across threads.

    Args:
        gguf: the target's weights as a GGUF (e.g. `smollm2_gguf()`).
        tokenizer: the target's tokenizer; the GGUF's must tokenize its chat template alike.
        generation_config: the target's (its end-of-sequence ids end the rows).
        threads: llama.cpp threads (default: the CPUs this process may run on).
        seq_ctx: KV cells per row, prompt + response (default: from the stream's `max_new_tokens`, room
            for a follow-up turn's prompt).

    Raises:
        EngineBackendError: llama-cpp-python is not installed.
        EngineWeightsError: the GGUF does not load, or tokenizes otherwise than `tokenizer`.
    """

    name: ClassVar[str] = "llama-cpp"

    def __init__(self, gguf: str | Path, tokenizer, generation_config, *, threads: int | None = None,
                 seq_ctx: int | None = None):
        self._ll = ll = llama_cpp()
        ll.llama_backend_init()
        self.generation_config = generation_config
        self.threads = threads or len(os.sched_getaffinity(0))
        self.seq_ctx = seq_ctx
        self._context: _Context | None = None
        self._model = ll.llama_model_load_from_file(str(gguf).encode(), ll.llama_model_default_params())
        if not self._model:
            raise EngineWeightsError(f"llama.cpp could not load {gguf}")
        self._vocab = ll.llama_model_get_vocab(self._model)
        text = tokenizer.apply_chat_template([{"role": "user", "content": _PROBE_TEXT}], tokenize=False,
                                             add_generation_prompt=True)
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.tokenize(text) != list(expected):
            raise EngineWeightsError(f"{gguf} tokenizes the chat template otherwise than the target's tokenizer: "
                                     "pass the target's own weights as a GGUF (--gguf)")

    def tokenize(self, text: str) -> list[int]:
        """`text`'s ids by the GGUF's tokenizer (special tokens parsed, none added)."""
        raw = text.encode()
        buffer = (self._ll.llama_token * (len(raw) + 16))()
        count = self._ll.llama_tokenize(self._vocab, raw, len(raw), buffer, len(buffer), False, True)
        return list(buffer[:count])

    def close(self) -> None:
        """Frees the context and the model (also when the engine is collected)."""
        if getattr(self, "_model", None):  # __init__ may have failed before loading it
            self.close_context()
            self._ll.llama_model_free(self._model)
            self._model = None

    def __del__(self):
        self.close()

    def stream(self, prompts: Iterable[Sequence[int]], *, eos_ids: Iterable[int], max_new_tokens: int,
               batch_size: int, options: Callable[[int], RowOptions]) -> Iterator[tuple[int, list[int], list[int]]]:
        """Yields (index, prompt ids, response ids) as rows finish; see `generation.stream_generate`.

        Raises:
            ValueError: a prompt and its cap do not fit in a row's `seq_ctx` cells.
        """
        seq_ctx = self.seq_ctx or -(-(3 * max_new_tokens + 256) // 256) * 256
        if self._context is None or (self._context.rows, self._context.seq_ctx) != (batch_size, seq_ctx):
            self.close_context()
            self._context = _Context(self._ll, self._model, batch_size, seq_ctx, self.threads)
        self._context.clear()
        return self._decode(self._context, iter(prompts), set(eos_ids), max_new_tokens, options)

    def close_context(self) -> None:
        if self._context is not None:
            self._context.free()
            self._context = None

    def _decode(self, context: "_Context", prompts: Iterator[Sequence[int]], eos: set[int], max_new_tokens: int,
                options: Callable[[int], RowOptions]) -> Iterator[tuple[int, list[int], list[int]]]:
        slots: list[_Row | None] = [None] * context.rows
        taken = 0  # prompts started so far: the next one's index
        waiting = None  # a prompt taken from the stream that did not fit in the last step's batch
        while True:
            # 1. Free slots take the next prompts (the stream may have grown since the last step), as many as
            # fit in one batch with the running rows' tokens; the others start next step.
            fresh = []
            budget = context.batch_tokens - sum(row is not None for row in slots)
            for slot in range(context.rows):
                if slots[slot] is not None:
                    continue
                ids, waiting = (waiting, None) if waiting is not None else (next(prompts, None), None)
                if ids is None:
                    break
                row_options = options(taken)
                limit = min(row_options.max_new_tokens, max_new_tokens)
                if len(ids) + limit > context.seq_ctx:  # so a prompt always fits a step with no other prompt
                    raise ValueError(f"prompt {taken} ({len(ids)} tokens) and its cap ({limit}) exceed the "
                                     f"{context.seq_ctx} KV cells of a row; give LlamaCppEngine a larger seq_ctx")
                if len(ids) > budget:
                    waiting = ids
                    break
                budget -= len(ids)
                generator = row_options.generator
                rng = None
                if row_options.sampling.temperature > 0:
                    rng = np.random.default_rng(generator.initial_seed() if generator is not None else None)
                slots[slot] = _Row(taken, list(ids), row_options.sampling, limit, rng)
                fresh.append(slot)
                taken += 1
            running = [slot for slot, row in enumerate(slots) if row is not None and row.output]  # [not fresh]
            if not fresh and not running:
                return
            # 2. One decode: the fresh rows' whole prompts and the running rows' last tokens.
            order = context.decode([(slot, slots[slot].prompt, 0) for slot in fresh]
                                   + [(slot, slots[slot].output[-1:], len(slots[slot].prompt) + len(slots[slot].output) - 1)
                                      for slot in running])
            # 3. Pick each row's token from its logits row; a finished row frees its slot and its KV cells.
            rows = [slots[slot] for slot in order]
            tokens = pick_tokens(context.logits(len(order)), [row.sampling for row in rows],
                                 [row.rng.random() if row.rng is not None else None for row in rows])
            for slot, row, token in zip(order, rows, tokens.tolist()):
                row.output.append(token)
                if token in eos or len(row.output) >= row.limit:
                    context.forget(slot)
                    slots[slot] = None
                    yield row.index, row.prompt, row.output


class _Context:
    """A llama.cpp context with a sequence (and a KV stream of `seq_ctx` cells) per row, and the batch it is
    fed through, held as numpy arrays so a step is filled without a Python call per token."""

    def __init__(self, ll, model, rows: int, seq_ctx: int, threads: int):
        self._ll, self.rows, self.seq_ctx = ll, rows, seq_ctx
        # Tokens per decode: every row's next token and a few prompts (more wait a step). A batch the size of
        # the whole KV (rows x seq_ctx) made the context take 7 s to set up, not 1.
        self.batch_tokens = max(4096, seq_ctx + rows)
        params = ll.llama_context_default_params()
        params.n_ctx = rows * seq_ctx
        params.n_batch = self.batch_tokens  # llama_decode cuts it into ubatches
        params.n_ubatch = 512
        params.n_seq_max = rows
        params.kv_unified = False  # one buffer for all rows would make each row attend over every row's cells
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self._ctx = ll.llama_init_from_model(model, params)
        if not self._ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {rows} x {seq_ctx} cells")
        self._memory = ll.llama_get_memory(self._ctx)
        self.vocab_size = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model))
        size = params.n_batch
        self._tokens = np.zeros(size, dtype=np.int32)
        self._positions = np.zeros(size, dtype=np.int32)
        self._seq_ids = np.zeros(size, dtype=np.int32)
        self._n_seq_ids = np.ones(size, dtype=np.int32)
        self._wants_logits = np.zeros(size, dtype=np.int8)
        # llama_batch.seq_id is one pointer per token, each to its token's (single) sequence id.
        self._seq_id_pointers = (ctypes.POINTER(ll.llama_seq_id) * size)(
            *[ctypes.cast(self._seq_ids.ctypes.data + 4 * i, ctypes.POINTER(ll.llama_seq_id)) for i in range(size)])
        self._batch = ll.llama_batch()
        self._batch.token = self._tokens.ctypes.data_as(ctypes.POINTER(ll.llama_token))
        self._batch.pos = self._positions.ctypes.data_as(ctypes.POINTER(ll.llama_pos))
        self._batch.n_seq_id = self._n_seq_ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        self._batch.seq_id = self._seq_id_pointers
        self._batch.logits = self._wants_logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))

    def decode(self, feeds: list[tuple[int, list[int], int]]) -> list[int]:
        """Feeds each (slot, tokens, first position) in one llama_decode, logits for each feed's last token;
        returns the slots in the order of their logits rows."""
        n = 0
        for slot, tokens, start in feeds:
            end = n + len(tokens)
            self._tokens[n:end] = tokens
            self._positions[n:end] = np.arange(start, start + len(tokens))
            self._seq_ids[n:end] = slot
            self._wants_logits[n:end - 1] = 0
            self._wants_logits[end - 1] = 1
            n = end
        self._batch.n_tokens = n
        if self._ll.llama_decode(self._ctx, self._batch) != 0:
            raise RuntimeError("llama_decode failed")
        return [slot for slot, _, _ in feeds]

    def logits(self, rows: int) -> np.ndarray:
        """[rows, vocab] the last decode's logits (a view of llama.cpp's buffer, valid until the next decode)."""
        return np.ctypeslib.as_array(self._ll.llama_get_logits(self._ctx), shape=(rows, self.vocab_size))

    def clear(self) -> None:
        self._ll.llama_memory_clear(self._memory, True)

    def forget(self, slot: int) -> None:
        self._ll.llama_memory_seq_rm(self._memory, slot, -1, -1)

    def free(self) -> None:
        if self._ctx:
            self._ll.llama_free(self._ctx)
            self._ctx = None
