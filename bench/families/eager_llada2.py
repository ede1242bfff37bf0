"""LLaDA2 under eager attention (real code): the family target (float 1/0 mask) against the same target under sdpa."""
import compare
import spot
kw = dict(trust_remote_code=True, dtype="float64", mask_id=63)
e = spot.load_target(f"{compare.ROOT}/ckpt/llada2", attn_implementation="eager", **kw)
s = spot.load_target(f"{compare.ROOT}/ckpt/llada2", attn_implementation="sdpa", **kw)
print("eager mask form", e.mask_form)
ok = n = 0
for B in (4, 8):
    for T in (0.0, 1.0):
        a = dict(max_new_tokens=16, block_size=B, temperature=T, eos_id=None)
        ref = spot.generate(s, compare.PROMPTS, "standard", **a).tokens
        for m in ("standard", "confidence", "spot"):
            out = spot.generate(e, compare.PROMPTS, m, drafter=compare.portable(), budget=8, **a).tokens
            ok += out == ref
            n += 1
print(f"llada2 eager (family target) == llada2 sdpa standard: {ok}/{n}")
try:
    spot.HFTarget(e.model, "block_causal", mask_id=63).self_check(4)
except Exception as err:
    print("generic HFTarget on eager LLaDA2:", type(err).__name__, getattr(err, "cause", ""), "|", str(err)[:200])
