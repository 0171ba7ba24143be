"""Where a feature head's depth-1 misses fall (issue 25): its agreement with the float32 target's greedy token,
bucketed by how sure the target was (its top-1 probability and its top-1 minus top-2 margin), teacher-forced on
greedy records: the answers to the 48 hand-written held-out requests (distill-eval's responses file with
--hand-written), or the first --n greedy records of a training file (what the head was fit on).

A target token outside the head's draft vocabulary is a miss whatever the head learns (`outside_draft_vocab`).
If the misses sit where the target itself hesitates (a top-1 probability near its top-2), no drafter reads the
argmax there reliably and greedy α has a ceiling below 1; if they sit where the target is sure, the head has
room to learn. Also prints the mean of sum(min(p, q)), the acceptance of a sampled depth-1 draft at temperature 1.

    python docs/bench/issue25/alpha_by_confidence.py HEAD_DIR [HEAD_DIR ...] --records work/distill/heldout-responses.jsonl \
        --hand-written
"""
import argparse
import json

import torch
from torch.nn import functional as F

from alpha_by_origin import greedy  # this folder's: the first n greedy records, cut to cap new tokens
from hf_specdec.distill.feature_head import _scores, _step_mask, make_batch, unrolled_states
from hf_specdec.distill.features import features_in_memory
from hf_specdec.distill.heldout_requests import HELDOUT_REQUESTS
from hf_specdec.eagle import load_feature_head
from hf_specdec.smollm2 import load_smollm2

TOP1_EDGES = (0.0, 0.3, 0.5, 0.7, 0.9, 1.01)


def depth1_positions(head, target, records, store, batch_size=8):
    """Per drafted position: the target's top-1 probability, top-1 minus top-2, the head's hit and sum(min(p, q))."""
    embed_weight = target.get_input_embeddings().weight.detach().float()
    label_weight = target.get_output_embeddings().weight.detach().float()
    draft_ids = head.draft_ids()
    final_layer = target.config.get_text_config().num_hidden_layers
    in_vocab = torch.zeros(label_weight.shape[0], dtype=torch.bool)
    in_vocab[draft_ids if draft_ids is not None else slice(None)] = True
    top1, margin, hits, overlap, outside = [], [], [], [], []
    for start in range(0, len(records), batch_size):
        batch = make_batch(records[start : start + batch_size], store, head.feature_layers_for(final_layer), final_layer)
        state = unrolled_states(head, lambda ids: F.embedding(ids, embed_weight), batch, 1)[0]
        mask = _step_mask(batch, 0)  # anchors whose next-but-one token is a response token
        target_probs = F.softmax(batch.final[:, 1:][mask].float() @ label_weight.T, dim=-1)  # [positions, vocab]: after p + 1
        scores = _scores(head, state, label_weight if draft_ids is None else None)[mask]
        head_probs = F.softmax(scores.float(), dim=-1)
        if draft_ids is not None:  # back to the target's vocabulary
            head_probs = torch.zeros_like(target_probs).index_copy_(1, draft_ids, head_probs)
        best = target_probs.topk(2, dim=-1).values
        top1.append(best[:, 0])
        margin.append(best[:, 0] - best[:, 1])
        hits.append(head_probs.argmax(-1) == target_probs.argmax(-1))
        overlap.append(torch.minimum(target_probs, head_probs).sum(-1))
        outside.append(~in_vocab[target_probs.argmax(-1)])
    return torch.cat(top1), torch.cat(margin), torch.cat(hits), torch.cat(overlap), torch.cat(outside)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("heads", nargs="+")
    parser.add_argument("--records", required=True)
    parser.add_argument("--hand-written", action="store_true", help="only the answers to the hand-written requests")
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, _ = load_smollm2(torch.float32)
    records = greedy(args.records, args.n, args.max_new_tokens, set(HELDOUT_REQUESTS) if args.hand_written else None)
    heads = {path: load_feature_head(path) for path in args.heads}
    layers = sorted({layer for head in heads.values() for layer in head.feature_layers_for(30)} | {30})
    store = features_in_memory(target, records, layers)
    for name, head in heads.items():
        head.eval()
        with torch.no_grad():
            top1, margin, hits, overlap, outside = depth1_positions(head, target, records, store)
        rows = []
        for low, high in zip(TOP1_EDGES, TOP1_EDGES[1:]):
            inside = (top1 >= low) & (top1 < high)
            rows.append({"target_top1": f"[{low:.1f}, {min(high, 1.0):.1f})", "share": round(inside.float().mean().item(), 4),
                         "head_agrees": round(hits[inside].float().mean().item(), 4) if inside.any() else None,
                         "outside_draft_vocab": round(outside[inside].float().mean().item(), 4) if inside.any() else None})
        near_tie = margin < 0.1
        print(json.dumps({"head": name, "records": args.records, "positions": len(hits), "agrees": round(hits.float().mean().item(), 4),
                          "sampled_acceptance": round(overlap.mean().item(), 4), "by_target_top1": rows,
                          "near_ties": {"share": round(near_tie.float().mean().item(), 4),
                                        "head_agrees": round(hits[near_tie].float().mean().item(), 4),
                                        "misses_there": round((~hits & near_tie).sum().item() / max((~hits).sum().item(), 1), 4)}}),
              flush=True)


if __name__ == "__main__":
    main()
