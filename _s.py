import torch, time, hf_specdec
torch.set_num_threads(1)
from hf_specdec.smollm2 import load_smollm2
from hf_specdec.bench.other_tokenizer import renumbered_tokenizer, regathered
from hf_specdec.drafters.early_exit import early_exit_view
model, tok = load_smollm2()
tok.padding_side = "left"
t0=time.time(); dtok, old = renumbered_tokenizer(tok, drop_share=0.0, seed=0); print("tok", time.time()-t0, len(tok), len(dtok))
s = "The quick brown fox jumps over the lazy dog. Speculative decoding is wonderful!"
a = tok(s)["input_ids"]; b = dtok(s)["input_ids"]; print(len(a), len(b), tok.decode(a) == dtok.decode(b))
view = model
d_same = regathered(view, torch.arange(len(tok)), tok)
d_other = regathered(view, old, dtok)
msgs = [[{"role":"user","content":"Write a short story about a robot learning to paint."}], [{"role":"user","content":"Explain photosynthesis."}]]
enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", padding=True, return_dict=True)
plain = model.generate(**enc, do_sample=False, max_new_tokens=48)
for name, dr, kw in [("same", d_same, {}), ("other", d_other, dict(tokenizer=tok, drafter_tokenizer=dtok))]:
    st = hf_specdec.SpeculativeStats(); t0=time.time()
    out = model.generate(**enc, do_sample=False, max_new_tokens=48, drafter=dr, gamma=4, stats=st, **kw)
    print(name, torch.equal(out, plain), round(st.acceptance_rate,3), round(time.time()-t0,2))
print(tok.decode(plain[0][enc["input_ids"].shape[1]:]))
