"""A/B of the training objective (issue 25): from the same head (work/distill/head-cont), the same records in the
same order, STEPS steps each: KL alone, and KL + TV_WEIGHT * (1 - sum min(p, q)). Then on-path alpha and per-depth
agreement on the 225 held-out responses (float32 target, states in memory), both arms on the same positions.
    taskset -c 0 python docs/bench/issue25/tv_ab.py STEPS TV_WEIGHT   # results: tv_ab.txt
"""
import copy, json, sys, time
import torch
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.distill.data import read_records
from hf_specdec.distill.features import FeatureStore, features_in_memory
from hf_specdec.distill.feature_head import train_feature_head, evaluate_feature_head
from hf_specdec.eagle import load_feature_head, save_feature_head

torch.set_num_threads(1)
steps, weight = int(sys.argv[1]), float(sys.argv[2])
target, tokenizer = load_smollm2(torch.float32)
records = read_records("work/distill/magpie-l0.jsonl", [2])
store = FeatureStore("work/distill/magpie-l0.jsonl.features")
print(len(records), sum(r in store for r in records), flush=True)
heldout = read_records("work/distill/heldout-responses.jsonl", [2])
base = load_feature_head("work/distill/head-cont")
layers = sorted({*base.feature_layers_for(30), 30})
eval_store = features_in_memory(target, heldout, layers)
results = {}
for name, w in (("kl", 0.0), (f"kl+tv{weight:g}", weight)):
    head = copy.deepcopy(base)
    started = time.time()
    losses = train_feature_head(head, target, records, store, steps=steps, batch_size=8, ttt_steps=3, lr=3e-4,
                                seed=0, progress=False, tv_weight=w)
    agreement = evaluate_feature_head(head, target, heldout, eval_store, depth=4, max_new_tokens=96)
    results[name] = agreement
    save_feature_head(head, f"work/distill/tv-ab-{name}")
    print(json.dumps({"arm": name, "steps": steps, "minutes": round((time.time() - started) / 60, 1),
                      "loss_last50": sum(losses[-50:]) / 50, **agreement.as_dict()}), flush=True)
