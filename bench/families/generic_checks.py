"""What the generic HFTarget (family='generic') says about each family's real code (transformers 4.57.1)."""
import compare
import spot
for fam, layout, extra in (("llada", "bidirectional", {}), ("dream", "bidirectional", dict(logits_shift=1)),
                           ("sdar", "block_causal", dict(mask_id=63)), ("llada2", "block_causal", dict(mask_id=63))):
    for attn in ("sdpa", "eager"):
        try:
            t = spot.load_target(f"{compare.ROOT}/ckpt/{fam}", trust_remote_code=True, dtype="float64",
                                 family="generic", layout=layout, attn_implementation=attn, **extra)
            spot.generate(t, [[5, 9, 14]], "standard", max_new_tokens=4, block_size=4)
            print(f"{fam:7} {attn:6} accepted")
        except Exception as e:
            print(f"{fam:7} {attn:6} {type(e).__name__}: {getattr(e, 'cause', '') or str(e)[:150]}")
