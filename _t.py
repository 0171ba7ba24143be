import sys; sys.path.insert(0,'tests')
import torch, hf_specdec, tiny_models
from hf_specdec.bench.other_tokenizer import renumbered_tokenizer, regathered
tok = tiny_models.tokenizer()
dtok, old = renumbered_tokenizer(tok, rename={"</s>": "<eos>"})
print(len(dtok), dtok.eos_token, dtok.eos_token_id, old[dtok.eos_token_id], dtok.bos_token_id, old[dtok.bos_token_id])
print(tok("w5 w7 abcdef")["input_ids"], [int(old[i]) for i in dtok("w5 w7 abcdef")["input_ids"]])
t = tiny_models.llama(seed=0)
d = regathered(t, old, dtok)
ids, mask = tiny_models.prompts(3, seed=1)
for samp in (False,):
    plain = t.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=20)
    st = hf_specdec.SpeculativeStats()
    out = t.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=20, drafter=d, tokenizer=tok, drafter_tokenizer=dtok, gamma=3, stats=st)
    print(torch.equal(out, plain), st.acceptance_rate)
    print(plain[0].tolist()); print(out[0].tolist())
