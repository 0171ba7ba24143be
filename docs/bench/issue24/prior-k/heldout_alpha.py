"""Session k (issue 24): the shipped independent drafter's on-path acceptance at gamma = 1 on the 48 hand-written held-out
requests, measured as `hf-specdec distill-eval` measures a head: the float32 target answers each request greedily
(96 tokens), and along each answer the drafter drafts from the true prefix (`agreement_flags`, `simulate_acceptance`).
This is the value written to drafters/smollm2-135m-instruct/config.json as `hf_specdec_acceptance`. The drafter's
training data (/tmp/exp/data in session b) is gone, so the leak check of distill-eval cannot run; the held-out requests
were written after it was trained, by hand.
Run: nice -n -15 taskset -c 1 .venv/bin/python docs/bench/issue24/prior-k/heldout_alpha.py
"""
import json

import torch

from hf_specdec.distill.data import Record, encode_prompt, eos_ids
from hf_specdec.distill.evaluate import agreement_flags, simulate_acceptance
from hf_specdec.distill.generation import Sampling, stream_generate
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.loading import load_drafter
from hf_specdec.smollm2 import load_smollm2

torch.set_num_threads(1)
target, tok = load_smollm2(torch.float32)
drafter = load_drafter("drafters/smollm2-135m-instruct", dtype=torch.float32)
records = [None] * len(HELDOUT_REQUESTS)
with torch.inference_mode():
    for index, ids, response in stream_generate(
        target, (encode_prompt(tok, r) for r in HELDOUT_REQUESTS), eos_ids=eos_ids(target, tok), max_new_tokens=96,
        batch_size=16, sampling=Sampling(),
    ):
        records[index] = Record(ids + response, len(ids), True, HELDOUT_REQUESTS[index])
flags = agreement_flags(target, drafter, records)
result = {f"gamma{g}": simulate_acceptance(flags, g).as_dict() for g in (1, 2, 4)}
result["alpha_gamma1"] = result["gamma1"]["acceptance_rate"]
print(json.dumps(result, indent=2))
