"""Which causal-LM types keep one cache with `EarlyExit` (the verification skipping the drafted layers), and is each
exact? For every type in `arch_zoo.MODEL_TYPES` (or those named), the tiny seeded model, EOS off, greedy, 16 new
tokens from a left-padded batch of 3 prompts, `EarlyExit(1)` at gamma=3 against plain `generate()`:

    shared; exact=True             layers 0 and 1 ran on as many columns (nothing recomputed), tokens equal
    own cache: REASON; exact=...   `hf_specdec.cache.prefix_refusal`'s reason; the drafter kept its own cache
    error TYPE: MESSAGE            refused (by hf_specdec or EarlyExit), unbuildable, or plain generate() failed

    python tests/early_exit_sweep.py [OUT.json] [--only TYPE ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arch_zoo  # noqa: E402
import hf_specdec  # noqa: E402
import tiny_models  # noqa: E402
from hf_specdec.cache import prefix_refusal  # noqa: E402
from hf_specdec.drafters.early_exit import decoder_layers  # noqa: E402
from test_early_exit import columns_per_layer  # noqa: E402


def sweep_one(model_type: str) -> str:
    model = arch_zoo.build(model_type, 0)
    model.generation_config.eos_token_id = None
    _, decoder, name = decoder_layers(model)
    reason = prefix_refusal(model, list(getattr(decoder, name))[:1])
    input_ids, mask = tiny_models.prompts(3, seed=5, min_len=3, max_len=10)
    plain = model.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=16)
    with columns_per_layer(model, (0, 1)) as counts:
        out = model.generate(input_ids, attention_mask=mask, do_sample=False, max_new_tokens=16,
                             drafter=hf_specdec.EarlyExit(1), gamma=3)
    kept = "shared" if counts[0] == counts[1] else f"own cache: {reason}"
    return f"{kept}; exact={torch.equal(out, plain)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="benchmarks/data/early_exit_sharing.json")
    parser.add_argument("--only", nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(1)
    records = {}
    for model_type in args.only or arch_zoo.MODEL_TYPES:
        try:
            records[model_type] = sweep_one(model_type)
        except Exception as error:  # noqa: BLE001  (recorded: refusals, unbuildable types, failing baselines)
            first = str(error).strip().splitlines()[0][:160] if str(error).strip() else ""
            records[model_type] = f"error {type(error).__name__}: {first}"
        print(model_type, records[model_type], flush=True)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    shared = sum(record.startswith("shared") for record in records.values())
    own = sum(record.startswith("own cache") for record in records.values())
    inexact = [name for name, record in records.items() if "exact=False" in record]
    print(f"{shared} shared, {own} own cache, {len(records) - shared - own} refused or failing; inexact: {inexact or 'none'}")


if __name__ == "__main__":
    main()
