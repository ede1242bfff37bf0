"""The semantics each stand-in of tests/families_tiny.py re-derives, probed identically on the real modeling code
(ckpt/<family>, transformers 4.57.1) and on the stand-in. Usage: semantics.py"""
import math
import os
import sys
import torch
import transformers
from transformers import DynamicCache
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
import families_tiny as ft

ROOT = os.environ.get("SPOT_FAMILY_ROOT", ".cache/families")  # src/<family>/ (their code), ckpt/<family>/
IDS = torch.tensor([[5, 9, 14, 20, 33, 7]])
L = IDS.shape[1]


def logits(m, *a, **k):
    out = m(*a, **k)
    return (out.logits if hasattr(out, "logits") else out[0]).double()


def changed(a, b):
    a, b = a.nan_to_num(0, 0, 0), b.nan_to_num(0, 0, 0)
    return bool((a - b).abs().max() > 1e-9 * (1 + a.abs().max()))


def attempt(f):
    try:
        return f()
    except Exception as e:  # the probe's answer is then the error's type
        return type(e).__name__


def probe(m, family):
    r = {}
    pos = torch.arange(L)[None]
    full = torch.ones(1, 1, L, L, dtype=torch.bool)
    lonely = full.clone()
    lonely[..., -1, :-1] = False
    swapped = pos.clone()
    swapped[0, [1, 4]] = swapped[0, [4, 1]]
    other = IDS.clone()
    other[0, -1] = 40
    ones = torch.ones(1, L, dtype=torch.long)
    dtype = next(m.parameters()).dtype
    add = torch.where(lonely, 0.0, -math.inf).to(dtype)
    r["position_ids honoured"] = attempt(lambda: changed(logits(m, IDS, attention_mask=full, position_ids=swapped),
                                                         logits(m, IDS, attention_mask=full, position_ids=pos)))
    if r["position_ids honoured"] != "TypeError":
        r["position_ids honoured (no mask)"] = attempt(lambda: changed(logits(m, IDS, position_ids=swapped),
                                                                       logits(m, IDS, position_ids=pos)))
    r["4D bool mask honoured"] = attempt(lambda: changed(logits(m, IDS, attention_mask=lonely),
                                                         logits(m, IDS, attention_mask=full)))
    r["additive 0/-inf mask = bool mask"] = attempt(lambda: not changed(logits(m, IDS, attention_mask=add),
                                                                        logits(m, IDS, attention_mask=lonely)))
    r["float 1/0 mask honoured"] = attempt(lambda: changed(logits(m, IDS, attention_mask=lonely.to(dtype)),
                                                           logits(m, IDS, attention_mask=full.to(dtype))))
    r["float 1/0 mask = bool mask"] = attempt(lambda: not changed(logits(m, IDS, attention_mask=lonely.to(dtype)),
                                                                  logits(m, IDS, attention_mask=lonely)))
    r["2D all-ones mask: first sees last"] = attempt(lambda: changed(logits(m, other, attention_mask=ones)[0, 0],
                                                                     logits(m, IDS, attention_mask=ones)[0, 0]))
    r["no mask: first sees last"] = attempt(lambda: changed(logits(m, other)[0, 0], logits(m, IDS)[0, 0]))
    if family in ("sdar", "llada2"):
        for flag in (False, True):
            def run():
                c = DynamicCache()
                m(IDS[:, :4], attention_mask=torch.ones(1, 1, 4, 4, dtype=torch.bool), position_ids=pos[:, :4],
                  past_key_values=c, use_cache=True, store_kv=True)
                m(IDS[:, 4:], attention_mask=torch.ones(1, 1, 2, 6, dtype=torch.bool), position_ids=pos[:, 4:],
                  past_key_values=c, use_cache=True, store_kv=flag)
                return c.get_seq_length()
            r[f"cache length after store_kv={flag}"] = attempt(run)
    return r


def real(family, attn, dtype=torch.float64):
    d = f"{ROOT}/ckpt/{family}"
    auto = transformers.AutoModel if family == "dream" else transformers.AutoModelForCausalLM
    return auto.from_pretrained(d, trust_remote_code=True, dtype=dtype, attn_implementation=attn).eval()


if __name__ == "__main__":
    same = total = 0
    for family, attn, dtype in (("llada", None, torch.float64), ("dream", "sdpa", torch.float64),
                                ("sdar", "sdpa", torch.float64), ("llada2", "sdpa", torch.float64),
                                ("llada2", "eager", torch.float32)):
        a = probe(real(family, attn, dtype), family)
        b = probe(ft.model(family, attn=attn or "eager", dtype=dtype), family)
        print(f"== {family} ({attn or 'default'} attention, {dtype})")
        for k in a:
            ok = a[k] == b.get(k)
            same += ok
            total += 1
            print(f"  {k:<36} real {str(a[k]):<13} stand-in {str(b.get(k)):<13} {'same' if ok else 'DIFFERENT'}")
    print(f"stand-in semantics == real code: {same}/{total} probes")
