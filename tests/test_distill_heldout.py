"""The held-out evaluation: it refuses requests that leak into training prompts (token runs
or Magpie seeds), its top-k coverage counts what a hand computation counts, and its on-path acceptance
at gamma = 1 is what the speculative loop itself counts on the same requests."""

from __future__ import annotations

import json

import pytest
import torch

import hf_specdec
from hf_specdec.distill.data import Record, encode_prompt
from hf_specdec.distill.evaluate import topk_hits
from hf_specdec.distill.feature_head import build_feature_head
from hf_specdec.distill.heldout import (
    check_disjoint,
    check_seeds,
    evaluate_heldout,
    find_leaks,
    request_ids,
)
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.errors import HeldOutLeakError
from test_distill import tiny_target, tiny_tokenizer
from test_distill_feature import CHAT


def chat_tokenizer():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = CHAT
    return tokenizer


def train_record(tokenizer, prompt: str) -> Record:
    ids = encode_prompt(tokenizer, prompt)
    return Record(ids + [5, 6, 2], len(ids), True, prompt)


def test_hand_written_requests_are_distinct_and_many():
    assert len(HELDOUT_REQUESTS) >= 48 and len(set(HELDOUT_REQUESTS)) == len(HELDOUT_REQUESTS)


def test_request_ids_are_the_tokens_inside_the_chat_template():
    tokenizer = chat_tokenizer()
    ids = request_ids(tokenizer, "Write a poem about cats .")
    assert tokenizer.decode(ids) == "Write a poem about cats ."
    assert ids == tokenizer("Write a poem about cats .", add_special_tokens=False)["input_ids"]


def test_a_request_copied_into_a_training_prompt_is_refused_and_a_clean_one_passes():
    tokenizer = chat_tokenizer()
    long_request = "Write a short story about cats and dogs in the rain ."  # 12 tokens
    short_request = "Write a poem about bread ."  # 6 tokens, fewer than the n-gram
    training = [
        train_record(tokenizer, "Give me three tips about tea ."),
        # the long request's middle 8 tokens inside a longer message: a leak
        train_record(tokenizer, "Explain short story about cats and dogs in the to a ten year old ."),
        # the short request whole, inside another message: a leak
        train_record(tokenizer, "Describe it . Write a poem about bread . Thanks"),
    ]
    with pytest.raises(HeldOutLeakError, match="cats and dogs"):
        check_disjoint(tokenizer, [long_request], training)
    with pytest.raises(HeldOutLeakError, match="poem about bread"):
        check_disjoint(tokenizer, [short_request], training)
    # Negative controls: 7 shared tokens are not a leak; a short request whose tokens occur but not in one run
    # is not either; nor is anything when the leaking prompts are gone.
    check_disjoint(tokenizer, ["Write a short story about cats and dogs with the sun ."], training[1:2])
    check_disjoint(tokenizer, ["Write a poem about tea ."], training)
    check_disjoint(tokenizer, [long_request, short_request], training[:1])


def test_leaking_magpie_requests_are_dropped_in_order_and_clean_ones_kept():
    from hf_specdec.distill.heldout import without_leaks

    tokenizer = chat_tokenizer()
    requests = ["Write a short story about cats and dogs in the rain .", "Give me three tips about tea .",
                "Write a poem about bread .", "Explain the sun to a ten year old ."]
    training = [train_record(tokenizer, "Explain short story about cats and dogs in the to a ten year old ."),
                train_record(tokenizer, "Describe it . Write a poem about bread . Thanks")]
    kept, dropped = without_leaks(tokenizer, requests, training)
    assert kept == [requests[1], requests[3]] and dropped == [requests[0], requests[2]]
    assert without_leaks(tokenizer, requests, []) == (requests, [])  # control: nothing to leak into


def test_find_leaks_names_the_leaked_requests_only():
    requests = [list(range(10, 20)), list(range(30, 33)), list(range(50, 60))]
    prompts = [[1, 2, *range(12, 20), 9], [7, 30, 31, 32, 8], [50, 51, 52, 53, 54, 55, 56, 99]]
    leaks = find_leaks(requests, prompts, ngram=8)
    assert leaks == {0: tuple(range(12, 20)), 1: (30, 31, 32)}  # request 2 shares only 7 tokens
    # Two requests with the same run both leak (a run once named only the first request that had it).
    twins = [list(range(10, 20)), [5, *range(12, 20)], list(range(50, 60))]
    assert set(find_leaks(twins, prompts, ngram=8)) == {0, 1}


def test_held_out_magpie_seeds_must_differ_from_training_seeds(tmp_path):
    train, heldout = tmp_path / "train.jsonl", tmp_path / "heldout.jsonl"
    train.write_text("".join(json.dumps({"seed": s, "item": 0}) + "\n" for s in (0, 1)))
    heldout.write_text(json.dumps({"seed": 1000, "item": 0}) + "\n")
    check_seeds([heldout], [train])
    heldout.write_text(json.dumps({"seed": 1, "item": 0}) + "\n")
    with pytest.raises(HeldOutLeakError, match=r"\[1\]"):
        check_seeds([heldout], [train])


def test_topk_coverage_counts_on_hand_built_logits():
    draft_logits = torch.tensor([
        [5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0],  # target column 0: rank 1
        [0.0, 9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0],  # target column 3: rank 2
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],  # target column 4: rank 5
        [9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0],  # target column 8: rank 9
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],  # target outside the draft vocabulary
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],  # target column 8: rank 1
    ])
    target_columns = torch.tensor([0, 3, 4, 8, -1, 8])
    # ranks 1, 2, 5, 9, none, 1 -> within top-1: 2; top-2: 3; top-4: 3; top-8: 4
    assert topk_hits(draft_logits, target_columns, (1, 2, 4, 8)).tolist() == [2, 3, 3, 4]


def test_on_path_alpha_at_gamma_1_is_what_the_loop_counts(tmp_path):
    torch.set_num_threads(1)
    target, tokenizer = tiny_target(), chat_tokenizer()
    head = build_feature_head(target, "eagle3")
    with torch.no_grad():  # a head that agrees sometimes, not always
        head.fc.weight.add_(0.2 * torch.randn(head.fc.weight.shape, generator=torch.Generator().manual_seed(0)))
    requests = ["Write a poem about cats .", "Tell me about the ocean and the moon .", "Give me some advice about tea ."]
    result = evaluate_heldout(target, tokenizer, head, requests, [], max_new_tokens=24, batch_size=2,
                              responses=tmp_path / "heldout.jsonl", progress=False)
    accepted = drafted = 0
    for request in requests:
        ids = torch.tensor([encode_prompt(tokenizer, request)])
        out = target.generate(ids, drafter=hf_specdec.FeatureDrafter(head), gamma=1, do_sample=False,
                              max_new_tokens=24, return_dict_in_generate=True)
        accepted += int(out.speculative_stats.accepted.sum())
        drafted += int(out.speculative_stats.drafted.sum())
    assert 0 < accepted < drafted
    assert result["alpha_gamma1"] == pytest.approx(accepted / drafted, abs=0)
    assert result["coverage"][1] == pytest.approx(result["per_depth"][0])  # top-1 is depth-1 agreement
    assert result["coverage"][1] <= result["coverage"][2] <= result["coverage"][4] <= result["coverage"][8]
    # Kept answers are reused at the same cap and made again at another.
    kept = tmp_path / "heldout.jsonl"
    assert len(kept.read_text().splitlines()) == 3
    again = evaluate_heldout(target, tokenizer, head, requests, [], max_new_tokens=24, responses=kept, progress=False)
    assert again == result and len(kept.read_text().splitlines()) == 3
    evaluate_heldout(target, tokenizer, head, requests, [], max_new_tokens=12, responses=kept, progress=False)
    assert len(kept.read_text().splitlines()) == 6
    # A leaked request is refused before anything is generated.
    with pytest.raises(HeldOutLeakError):
        evaluate_heldout(target, tokenizer, head, requests[:1], [train_record(tokenizer, requests[0])], progress=False)
