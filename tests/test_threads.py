"""One drafter object shared by concurrent generate() calls (a web app's setup) gives each call exactly
what it gives alone: per-call state lives in the call's DraftSession, never on the drafter."""

import threading

import pytest
import torch
from transformers import pipeline

import hf_specdec
import tiny_models

NUM_THREADS = 2
CALLS_PER_THREAD = 4


def _run_concurrently(call, jobs_per_thread):
    """Runs `call(job)` for every job, NUM_THREADS threads at once, started together; returns the
    results by job and re-raises the first error."""
    results, errors = {}, []
    barrier = threading.Barrier(NUM_THREADS)

    def worker(jobs):
        barrier.wait()
        for job in jobs:
            try:
                results[job] = call(job)
            except Exception as error:  # noqa: BLE001 - handed to the main thread
                errors.append(error)

    threads = [threading.Thread(target=worker, args=(jobs,)) for jobs in jobs_per_thread]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("kind", ["model", "prompt_lookup"])
def test_one_drafter_object_serves_concurrent_calls_exactly(target, partial_drafter, kind):
    drafter = hf_specdec.ModelDrafter(partial_drafter) if kind == "model" else hf_specdec.PromptLookupDrafter()
    # Different batch sizes and prompt lengths per job, so any state one call left on the drafter
    # (a cache of another width or length) breaks the other call.
    jobs = list(range(NUM_THREADS * CALLS_PER_THREAD))
    inputs = {job: tiny_models.prompts(1 + job % 3, seed=40 + job, min_len=3 + job) for job in jobs}

    def call(job):
        input_ids, mask = inputs[job]
        return target.generate(
            input_ids, attention_mask=mask, drafter=drafter, gamma=3, do_sample=False, max_new_tokens=16
        )

    results = _run_concurrently(call, [jobs[i::NUM_THREADS] for i in range(NUM_THREADS)])
    for job in jobs:
        input_ids, mask = inputs[job]
        expected = target.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=16)
        assert torch.equal(results[job], expected), job


def test_a_pipeline_built_with_a_drafter_serves_concurrent_calls(target, partial_drafter, tokenizer):
    drafter = hf_specdec.ModelDrafter(partial_drafter)  # one object for every call of the pipeline
    pipe = pipeline("text-generation", model=target, tokenizer=tokenizer, drafter=drafter, gamma=3)
    prompts = [" ".join(f"w{3 + (7 * job + i) % 90}" for i in range(4 + job)) for job in range(6)]

    def call(job):
        return pipe(prompts[job], max_new_tokens=12, do_sample=False, return_full_text=False)[0]["generated_text"]

    results = _run_concurrently(call, [[0, 2, 4], [1, 3, 5]])
    for job, prompt in enumerate(prompts):
        inputs = tokenizer(prompt, return_tensors="pt")
        expected = target.generate(**inputs, do_sample=False, max_new_tokens=12)
        new_tokens = expected[0, inputs["input_ids"].shape[1] :]
        assert results[job] == tokenizer.decode(new_tokens, skip_special_tokens=True), job


def test_one_stats_object_shared_by_threads_keeps_every_row():
    # `stats=` is meant to accumulate across calls, so a pipeline built with it and shared by threads merges into one
    # object concurrently: 2 threads x 3000 merges of 1-3 rows each. Without the merge lock the counters lost rows and
    # disagreed in length (3 threads x 3000: 17,317 `drafted` rows against 14,004 histogram rows of 18,000).
    shared = hf_specdec.SpeculativeStats()
    rows_of = lambda i, k: 1 + (i + k) % 3  # noqa: E731

    def merges(k):
        for i in range(3000):
            rows = rows_of(i, k)
            one = hf_specdec.SpeculativeStats.empty(rows, 4)
            ones = torch.ones(rows, dtype=torch.long)
            one.record_step(ones.bool(), ones * (1 + i % 4), ones, ones * 2)
            one.target_forwards = 1
            shared.merge(one)

    _run_concurrently(merges, [[k] for k in range(NUM_THREADS)])
    expected = sum(rows_of(i, k) for k in range(NUM_THREADS) for i in range(3000))
    for name in ("drafted", "accepted", "emitted", "steps", "accepted_histogram", "drafted_histogram",
                 "tree_size_histogram"):
        assert len(getattr(shared, name)) == expected, name
    assert shared.target_forwards == 3000 * NUM_THREADS
    assert int(shared.accepted_histogram.sum()) == int(shared.steps.sum()) == expected
    assert int(shared.emitted.sum()) == 2 * expected


def test_threads_first_calls_load_a_path_drafter_once(target, partial_drafter, tmp_path, monkeypatch):
    # A pipeline shared by a web app's threads: their first calls come together, and each used to load the checkpoint.
    import time

    partial_drafter.save_pretrained(tmp_path / "drafter")
    tokenizer = tiny_models.tokenizer()
    tokenizer.save_pretrained(tmp_path / "drafter")
    pipe = pipeline("text-generation", model=target, tokenizer=tokenizer)
    loads = []
    real_load = hf_specdec.pipelines.load_drafter

    def slow_load(*args, **kwargs):  # a real checkpoint takes a while: the threads overlap inside it
        loads.append(args)
        time.sleep(0.2)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(hf_specdec.pipelines, "load_drafter", slow_load)
    prompts = ["w5 w6 w7", "w10 w11 w12 w13"]
    greedy = dict(max_new_tokens=12, do_sample=False, return_tensors=True)
    results = _run_concurrently(lambda k: pipe(prompts[k], drafter=str(tmp_path / "drafter"), **greedy),
                                [[k] for k in range(NUM_THREADS)])
    assert len(loads) == 1
    for k in range(NUM_THREADS):
        assert results[k][0]["generated_token_ids"] == pipe(prompts[k], **greedy)[0]["generated_token_ids"]
