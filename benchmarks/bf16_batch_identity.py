"""bf16 plain generate(): do greedy tokens depend on the batch composition? (docs/how-it-works.md, "Exactness in half precision".)"""
import torch

from hf_specdec.bench.prompts import CHAT_PROMPTS, batches, encode
from hf_specdec.smollm2 import load_smollm2


def main() -> None:
    torch.set_num_threads(1)
    for dtype in (torch.float32, torch.bfloat16):
        target, tok = load_smollm2(dtype)
        ids = encode(tok, CHAT_PROMPTS[:4])
        (batch,) = batches(ids, 4, 2)
        together = target.generate(**batch, max_new_tokens=64, do_sample=False, pad_token_id=2)
        differ = []
        for row, prompt in enumerate(ids):
            alone = target.generate(torch.tensor([prompt]), max_new_tokens=64, do_sample=False, pad_token_id=2)
            alone, mine = alone[0, len(prompt):], together[row, batch["input_ids"].shape[1]:]
            n = min(len(alone), len(mine))
            differ.append(next((i for i in range(n) if alone[i] != mine[i]), None))
        print(str(dtype), "first differing position per row (None = identical):", differ, flush=True)


if __name__ == "__main__":
    main()
