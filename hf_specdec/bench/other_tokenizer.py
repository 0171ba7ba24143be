"""A drafter of another tokenizer, made from a model we have: its vocabulary renumbered, some BPE merges removed,
its embedding and head rows gathered by token string.

Contract: `renumbered_tokenizer` returns a tokenizer that tokenizes text as the original does except where a removed
merge splits a token, with every id moved; `regathered` gives a causal LM those ids (rows copied by token string).
No second real model is reachable offline, so this is how the benchmark and the tests get a real pair.
"""

from __future__ import annotations

import copy
import json
import random

import torch
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast


def renumbered_tokenizer(
    tokenizer, drop_share: float = 0.0, seed: int = 0, rename: dict[str, str] | None = None
) -> tuple[PreTrainedTokenizerFast, torch.Tensor]:
    """(a tokenizer with the same text behaviour but other ids, old_ids [new vocab] long: the original id of each
    new id). `drop_share` of the BPE merges (chosen with `seed`) are removed, with every merge that needs a token
    they made, and the tokens they made leave the vocabulary; `rename` gives special tokens other contents (e.g.
    {"</s>": "<eos>"}), which the original's id then maps to."""
    rename = rename or {}
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    model = state["model"]
    vocab: dict[str, int] = model["vocab"]
    added = {token["content"] for token in state.get("added_tokens", [])}
    removed: set[str] = set()
    if model["type"] == "BPE" and drop_share > 0:
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        rng = random.Random(seed)
        chosen = {a + b for a, b in rng.sample(merges, int(len(merges) * drop_share))} - added
        kept = []
        for a, b in merges:  # in rank order, so a merge needing a removed token goes too
            if a in removed or b in removed or a + b in chosen:
                removed.add(a + b)
            else:
                kept.append([a, b] if not isinstance(model["merges"][0], str) else f"{a} {b}")
        model["merges"] = kept
        removed -= added
    # (content, original id, whether the model's vocabulary holds it) for every token that stays
    entries = [(token, index, True) for token, index in vocab.items() if token not in removed]
    entries += [(t["content"], t["id"], False) for t in state.get("added_tokens", []) if t["content"] not in vocab]
    entries.sort(key=lambda entry: entry[1])
    random.Random(seed + 1).shuffle(entries)  # new id i is entries[i]
    entries = [(rename.get(content, content), old, in_vocab) for content, old, in_vocab in entries]
    new_id = {content: index for index, (content, _, _) in enumerate(entries)}
    model["vocab"] = {content: index for index, (content, _, in_vocab) in enumerate(entries) if in_vocab}
    for token in state.get("added_tokens", []):
        token["content"] = rename.get(token["content"], token["content"])
        token["id"] = new_id[token["content"]]
    processor = state.get("post_processor") or {}
    for special in (processor.get("special_tokens") or {}).values():  # TemplateProcessing's bos/eos ids
        special["tokens"] = [rename.get(token, token) for token in special["tokens"]]
        special["ids"] = [new_id[token] for token in special["tokens"]]
    old_ids = [old for _, old, _ in entries]
    backend = Tokenizer.from_str(json.dumps(state))
    specials = {name: rename.get(getattr(tokenizer, name), getattr(tokenizer, name))
                for name in ("bos_token", "eos_token", "pad_token", "unk_token") if getattr(tokenizer, name) is not None}
    result = PreTrainedTokenizerFast(tokenizer_object=backend, padding_side=tokenizer.padding_side, **specials)
    return result, torch.tensor(old_ids, dtype=torch.long)


@torch.no_grad()
def regathered(model, old_ids: torch.Tensor, tokenizer=None):
    """A copy of `model` (a causal LM) scoring the renumbered vocabulary: embedding and head rows gathered by
    `old_ids` ([new vocab] long), the rest of its weights copied; special token ids from `tokenizer` (the
    renumbered one) in its generation config."""
    clone = copy.deepcopy(model)
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head.weight is embed.weight
    new_embed = torch.nn.Embedding(len(old_ids), embed.weight.shape[1], dtype=embed.weight.dtype)
    new_embed.weight.copy_(embed.weight[old_ids])
    clone.set_input_embeddings(new_embed)
    new_head = torch.nn.Linear(head.weight.shape[1], len(old_ids), bias=False, dtype=head.weight.dtype)
    if tied:
        new_head.weight = new_embed.weight
    else:
        new_head.weight.copy_(head.weight[old_ids])
    clone.set_output_embeddings(new_head)
    clone.config.get_text_config().vocab_size = len(old_ids)
    subset = getattr(clone.config, "hf_specdec_vocab_subset", None)
    if subset is not None:  # a reduced head's token ids, renumbered (those the new vocabulary lost are dropped)
        new_of_old = {int(old): new for new, old in enumerate(old_ids.tolist())}
        clone.config.hf_specdec_vocab_subset = sorted(new_of_old[old] for old in subset if old in new_of_old)
    if tokenizer is not None:
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            setattr(clone.generation_config, name, getattr(tokenizer, name))
            setattr(clone.config, name, getattr(tokenizer, name))
    return clone
