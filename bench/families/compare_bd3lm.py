"""BD3LMTarget against BD3-LM's own code (ckpt/bd3lm4, ckpt/bd3lm8 of build_ckpts.py), transformers 4.57.1.
(1) the target's pass logits equal the model's cached sampling protocol (reset cache, store_kv block by block,
    a block scored over the cache) on the same inputs; (2) standard = its one-commit greedy loop on the model's
    forward; (3) spot / confidence = standard, drafted commits accepted. Usage: compare_bd3lm.py"""
import math
import os

import torch
import spot
from spot.families import BD3LMTarget
from spot.order_model import LearnedDrafter, OrderModel, OrderModelConfig

ROOT = os.environ.get("SPOT_FAMILY_ROOT", ".cache/families")  # ckpt/bd3lm4, ckpt/bd3lm8
MASK = 63
PROMPTS = [[5, 9, 14, 20], [7, 8, 10, 11, 12, 13, 40, 41], [3, 50, 60, 17, 11],
           [4, 6, 9, 30, 31, 32, 33, 34, 35, 36, 37]]


def cached_logits(model, seq, B):
    """BD3-LM's kv-cache protocol (its reset_kv_cache, in float64 on CPU): whole blocks stored with store_kv=True,
    the last block scored over the cache. seq [1, L], L % B == 0."""
    cfg = model.config
    for blk in model.backbone.blocks:
        blk.kv_cache = torch.zeros(1, cfg.model_length, cfg.hidden_dim * 3, dtype=torch.float64)
        blk.cache_idx = 0
    try:
        with torch.no_grad():
            for k in range(seq.shape[1] // B - 1):
                model(input_ids=seq[:, k * B:(k + 1) * B], timesteps=torch.zeros(1), sample_mode=True, store_kv=True)
            return model(input_ids=seq[:, -B:], timesteps=torch.zeros(1), sample_mode=True).logits
    finally:
        for blk in model.backbone.blocks:
            blk.kv_cache, blk.cache_idx = None, 0


def own_greedy(model, prompt, gen, B):
    """One commit per forward, T = 0: the model's sampling forward on the window up to the current block (its
    sampler's kv_cache=False path), the most confident masked position of the block committed (mask logit -1e6)."""
    P = len(prompt)
    n_blocks = -(-(P + gen) // B)
    x = torch.full((1, n_blocks * B), MASK, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    for k in range(P // B, n_blocks):
        lo, hi = k * B, (k + 1) * B
        while bool((x[0, lo:hi] == MASK).any()):
            with torch.no_grad():
                logits = model(input_ids=x[:, :hi], timesteps=torch.zeros(1), sample_mode=True).logits[0, lo:]
            logits[:, MASK] -= 1e6
            conf, tok = torch.softmax(logits, -1).max(-1)
            conf[x[0, lo:hi] != MASK] = -math.inf
            pos = int(conf.argmax())
            x[0, lo + pos] = tok[pos]
    return x[0, P:P + gen].tolist()


def main():
    counts = dict(cache=[0, 0], standard=[0, 0], exact=[0, 0], drafted=0)
    worst = 0.0
    for B in (4, 8):
        t = spot.load_target(f"{ROOT}/ckpt/bd3lm{B}", trust_remote_code=True, mask_id=MASK,
                             dtype=torch.float64)
        assert isinstance(t, BD3LMTarget)
        g = torch.Generator().manual_seed(B)
        for trial in range(6):  # random sequences: target pass logits vs the cached protocol
            L = B * (2 + trial % 3)
            seq = torch.randint(0, 63, (1, L), generator=g)
            seq[0, -B + trial % B:] = MASK
            mine = t.forward(seq)[:, -B:]
            mine[..., MASK] += t.MASK_PENALTY
            theirs = cached_logits(t.model, seq, B)
            gap = float((mine - theirs).abs().max())
            worst = max(worst, gap)
            counts["cache"][0] += gap < 1e-9
            counts["cache"][1] += 1
        for p in PROMPTS:
            want = own_greedy(t.model, p, 16, B)
            got = spot.generate(t, [p], "standard", max_new_tokens=16, block_size=B, eos_id=None).tokens[0]
            counts["standard"][0] += got == want
            counts["standard"][1] += 1
        torch.manual_seed(0)
        drafter = LearnedDrafter(OrderModel(OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, top_k=8,
                                                             resampled=True)))
        for T in (0.0, 1.0):
            s = dict(max_new_tokens=16, block_size=B, temperature=T, eos_id=None, budget=8)
            ref = spot.generate(t, PROMPTS, "standard", **s)
            for method in ("confidence", "spot"):
                out = spot.generate(t, PROMPTS, method, drafter=drafter, **s)
                counts["exact"][0] += sum(a == b for a, b in zip(out.tokens, ref.tokens))
                counts["exact"][1] += len(PROMPTS)
                counts["drafted"] += sum((n - 1) * c for n, c in out.stats.commits_per_pass.items() if n > 1)
    print(counts, "max |logit gap| vs cache protocol", worst)


if __name__ == "__main__":
    main()
