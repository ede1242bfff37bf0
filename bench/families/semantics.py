"""The semantics each stand-in of tests/families_tiny.py re-derives, probed identically on the real modeling code
(ckpt/<family>, transformers 4.57.1) and on the stand-in. Usage: semantics.py [FAMILY...] (default all)"""
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


def bd3lm_probe(m):
    """BD3-LM's sampling forward (block size 4): what its family target and the stand-in rely on."""
    r = {}
    ids = torch.tensor([[5, 9, 14, 20, 33, 7, 40, 41, 3, 50, 60, 17]])
    later = ids.clone()
    later[0, 9] = 11
    sibling = ids.clone()
    sibling[0, 7] = 12

    def fwd(x, t=0.0, **k):
        return logits(m, input_ids=x, timesteps=torch.full((x.shape[0],), t), sample_mode=True, **k)

    base = fwd(ids)
    r["timesteps ignored (no time conditioning)"] = attempt(lambda: not changed(fwd(ids, 0.7), base))
    r["a block sees a later block"] = attempt(lambda: changed(fwd(later)[0, :8], base[0, :8]))
    r["a block sees its own last token"] = attempt(lambda: changed(fwd(sibling)[0, 4], base[0, 4]))
    r["a prefix's logits = the longer sequence's"] = attempt(lambda: not changed(fwd(ids[:, :8]), base[:, :8]))
    r["positions: same block at 0 and 4 differ"] = attempt(
        lambda: changed(fwd(torch.cat((ids[:, :4], ids[:, :4]), 1))[0, 4:], fwd(ids[:, :4])[0]))
    r["mask token's logit finite"] = attempt(lambda: bool(torch.isfinite(base[..., 63]).all()))

    def cached(store_last):
        cfg = m.config
        for blk in m.backbone.blocks:
            blk.kv_cache = torch.zeros(1, cfg.model_length, 3 * cfg.hidden_dim, dtype=next(m.parameters()).dtype)
            blk.cache_idx = 0
        try:
            for k in range(2):
                m(input_ids=ids[:, 4 * k:4 * k + 4], timesteps=torch.zeros(1), sample_mode=True, store_kv=True)
            out = logits(m, input_ids=ids[:, 8:], timesteps=torch.zeros(1), sample_mode=True, store_kv=store_last)
            return out, m.backbone.blocks[0].cache_idx
        finally:
            for blk in m.backbone.blocks:
                blk.kv_cache, blk.cache_idx = None, 0

    r["cache protocol = no-cache forward"] = attempt(lambda: not changed(cached(False)[0], base[:, 8:]))
    r["cache_idx after 2 stores + store_kv=False"] = attempt(lambda: cached(False)[1])
    r["cache_idx after 2 stores + store_kv=True"] = attempt(lambda: cached(True)[1])
    return r


def real(family, attn, dtype=torch.float64):
    if family == "bd3lm":
        from spot.families import float32_conditioning
        m = transformers.AutoModelForMaskedLM.from_pretrained(f"{ROOT}/ckpt/bd3lm4", trust_remote_code=True,
                                                              dtype=dtype)
        return float32_conditioning(m).eval()
    d = f"{ROOT}/ckpt/{family}"
    auto = transformers.AutoModel if family == "dream" else transformers.AutoModelForCausalLM
    return auto.from_pretrained(d, trust_remote_code=True, dtype=dtype, attn_implementation=attn).eval()


if __name__ == "__main__":
    same = total = 0
    wanted = sys.argv[1:] or ("llada", "dream", "sdar", "llada2", "bd3lm")
    for family, attn, dtype in (("llada", None, torch.float64), ("dream", "sdpa", torch.float64),
                                ("sdar", "sdpa", torch.float64), ("llada2", "sdpa", torch.float64),
                                ("llada2", "eager", torch.float32)):
        if family not in wanted:
            continue
        a = probe(real(family, attn, dtype), family)
        b = probe(ft.model(family, attn=attn or "eager", dtype=dtype), family)
        print(f"== {family} ({attn or 'default'} attention, {dtype})")
        for k in a:
            ok = a[k] == b.get(k)
            same += ok
            total += 1
            print(f"  {k:<36} real {str(a[k]):<13} stand-in {str(b.get(k)):<13} {'same' if ok else 'DIFFERENT'}")
    a = bd3lm_probe(real("bd3lm", None)) if "bd3lm" in wanted else {}
    b = bd3lm_probe(ft.model("bd3lm", block_size=4)) if "bd3lm" in wanted else {}
    print("== bd3lm (sdpa attn_backend, block 4, float64, conditioning float32)" if a else "")
    for k in a:
        ok = a[k] == b.get(k)
        same += ok
        total += 1
        print(f"  {k:<42} real {str(a[k]):<7} stand-in {str(b.get(k)):<7} {'same' if ok else 'DIFFERENT'}")
    print(f"stand-in semantics == real code: {same}/{total} probes")
