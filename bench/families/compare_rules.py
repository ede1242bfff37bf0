"""Each family's own sampler at its parallel setting (several commits per forward) against spot's `standard` with the
matching rule (spot.rules), and spot / confidence over that rule, on the real code: the tiny float64 checkpoints of
build_ckpts.py, transformers 4.57.1, T = 0 (SDAR's and LLaDA2's draws replaced by their T -> 0 limit, as compare.py
does). Usage: compare_rules.py [--mask-logit-off] [CASE...] (default: every case of CASES).

Per case: token-identical outputs (x/y), the sampler's model forwards against `standard`'s passes (one per step),
and the passes of confidence and spot (the shipped portable drafter) over the rule, one prompt per call; then
confidence and spot against standard with all prompts in one call at T 0 and T 1."""
import sys

import torch
import torch.nn.functional as F

import spot
from compare import MASK, PROMPTS, ROOT, MaskLogitOff, llada2_forward64, module

GEN = 16


def own_dtype_greedy(logits, *args, **kwargs):
    """SDAR's / LLaDA2's draw at T -> 0 in the logits' own dtype (LLaDA2: float32): the argmax of softmax(logits)
    and its probability, the probability the sampler compares with its threshold."""
    p, tok = F.softmax(logits, dim=-1).max(-1)
    return tok, p


class Counted(MaskLogitOff):
    """The model with its forwards counted (`calls`; `stores`: SDAR's store_kv=True calls, which commit nothing) and,
    with `mask_off`, -inf on the mask token's logit (compare.MaskLogitOff's reason)."""

    def __init__(self, m, mask_off):
        super().__init__(m)
        self.mask_off, self.calls, self.stores = mask_off, 0, 0

    def forward(self, *a, **k):
        self.calls += 1
        self.stores += bool(k.get("store_kv"))
        return super().forward(*a, **k) if self.mask_off else self.m(*a, **k)


def llada(steps_div):
    def run(model, x, B, mask_off):
        g = module(f"{ROOT}/src/llada/generate.py", "llada_generate")
        m = Counted(model, mask_off)
        out = g.generate(m, x, steps=GEN // steps_div, gen_length=GEN, block_length=B, temperature=0.0,
                         remasking="low_confidence", mask_id=MASK)
        return out[0, x.shape[1]:].tolist(), m.calls, 0
    return run


def fast_dllm(prefix_cache=False, **rule):
    def run(model, x, B, mask_off):
        sys.path.insert(0, f"{ROOT}/src/fastdllm")  # its `from model.modeling_llada import ...`
        try:
            if "factor" in rule:  # f6b35ec (the stored index's copy): the snapshot's generate has no factor
                g = module(f"{ROOT}/src/fastdllm_f6b35ec/generate.py", "fastdllm_f6b35ec_generate")
            else:
                g = module(f"{ROOT}/src/fastdllm/generate.py", "fastdllm_generate")
        finally:
            sys.path.pop(0)
        m = Counted(model, mask_off)
        call = g.generate_with_prefix_cache if prefix_cache else g.generate
        out, nfe = call(m, x, steps=GEN // B, gen_length=GEN, block_length=B, temperature=0.0,
                        remasking="low_confidence", mask_id=MASK, **rule)
        assert nfe == m.calls
        return out[0, x.shape[1]:].tolist(), m.calls, 0
    return run


TOPK_PICKED_UNMASKED = [0]


def sdar(steps_div, threshold=0.85):
    def run(model, x, B, mask_off):
        g = module(f"{ROOT}/src/sdar/generate.py", "sdar_generate")
        g.sample_with_temperature_topk_topp = own_dtype_greedy
        topk = torch.topk

        def watched(values, k, *a, **kw):  # SDAR's unclamped quota: topk reaching -inf (unmasked) positions
            out = topk(values, k, *a, **kw)
            TOPK_PICKED_UNMASKED[0] += int(torch.isinf(out.values).any())
            return out
        m = Counted(model, mask_off)
        g.torch = type(sys)("torch_watched")
        g.torch.__dict__.update(torch.__dict__)
        g.torch.topk = watched
        out = g.block_diffusion_generate(m, {"input_ids": x}, MASK, gen_length=GEN, block_length=B,
                                         denoising_steps=B // steps_div, temperature=1.0,
                                         remasking_strategy="low_confidence_dynamic",
                                         confidence_threshold=threshold)
        return out[0, x.shape[1]:x.shape[1] + GEN].tolist(), m.calls, m.stores
    return run


def llada2(steps_div, threshold=0.95):
    def run(model, x, B, mask_off):
        calls = [0]
        llada2_forward64(model, mask_off, calls)
        model._sample_with_temperature_topk_topp = own_dtype_greedy
        try:  # eos_id -1 (no token has it): the whole generation, as standard with eos_id=None
            out = model.generate(x, temperature=0.0, block_length=B, steps=B // steps_div, gen_length=GEN,
                                 threshold=threshold, eos_early_stop=False, eos_id=-1, mask_id=MASK)
        finally:
            del model.forward, model._sample_with_temperature_topk_topp
        return out[0].tolist(), calls[0], 0
    return run


ENTROPY_SETS = {"steps": 0, "differ": 0, "min_gap": float("inf")}


def dream(steps_div, alg):
    def run(model, x, B, mask_off):
        calls = [0]

        def logits_hook(i, x_now, logits):  # called once per forward, on the shifted logits
            calls[0] += 1
            if mask_off:
                logits[..., MASK] = -float("inf")
            if alg == "entropy":
                entropy_sets(x_now, logits, i, GEN // steps_div)
            return logits
        out = model.diffusion_generate(x, max_new_tokens=GEN, steps=GEN // steps_div, temperature=0.0, alg=alg,
                                       return_dict_in_generate=True, output_history=False,
                                       generation_logits_hook_func=logits_hook)
        return out.sequences[0, x.shape[1]:].tolist(), calls[0], 0
    return run


def entropy_sets(x_now, logits, i, steps):
    """Dream's entropy confidence sum p log(p + 1e-10) against the project's sum p log p (xlogy), in float64: does
    the step's top-n set differ, and how close are the two forms' n-th and (n+1)-th confidences."""
    masked = x_now[0] == MASK
    probs = torch.softmax(logits[0], -1)
    dream_conf = torch.where(masked, (probs * torch.log(probs + 1e-10)).sum(-1), -torch.inf)
    ours = torch.where(masked, torch.special.xlogy(probs, probs).sum(-1), -torch.inf)
    t = torch.linspace(1, 1e-3, steps + 1)
    n = masked.sum().to(torch.float32)
    k = int(n * (1 - t[i + 1] / t[i])) if i < steps - 1 else int(n)
    ENTROPY_SETS["steps"] += 1
    if 0 < k < int(masked.sum()):
        a = set(torch.sort(dream_conf, descending=True, stable=True).indices[:k].tolist())
        b = set(torch.sort(ours, descending=True, stable=True).indices[:k].tolist())
        ENTROPY_SETS["differ"] += a != b
        s = torch.sort(ours, descending=True).values
        ENTROPY_SETS["min_gap"] = min(ENTROPY_SETS["min_gap"], float(s[k - 1] - s[k]))


# name: (family, the sampler, the matching rule as a function of the block size, block sizes)
CASES = {
    "llada-gen/2": ("llada", llada(2), lambda B: f"steps:{B // 2}", (4, 8)),
    "llada-gen/4": ("llada", llada(4), lambda B: f"steps:{B // 4}", (4, 8)),
    "fastdllm-threshold": ("llada", fast_dllm(threshold=0.9), lambda B: "threshold:0.9,cmp:ge", (4, 8)),
    "fastdllm-threshold-0.5": ("llada", fast_dllm(threshold=0.5), lambda B: "threshold:0.5,cmp:ge", (4, 8)),
    "fastdllm-prefix-cache": ("llada", fast_dllm(prefix_cache=True, threshold=0.9),
                              lambda B: "threshold:0.9,cmp:ge", (4, 8)),
    "fastdllm-factor": ("llada", fast_dllm(factor=1.0), lambda B: "factor:1.0", (4, 8)),
    "sdar-dynamic": ("sdar", sdar(1), lambda B: f"threshold:0.85,steps:{B}", (4, 8)),
    "sdar-dynamic-steps<block": ("sdar", sdar(2), lambda B: f"threshold:0.85,steps:{B // 2}", (4, 8)),
    "llada2-threshold": ("llada2", llada2(1), lambda B: f"threshold:0.95,steps:{B}", (4, 8)),
    "llada2-threshold-steps<block": ("llada2", llada2(2), lambda B: f"threshold:0.95,steps:{B // 2}", (4, 8)),
    "dream-entropy-steps=gen": ("dream", dream(1, "entropy"), lambda B: f"dream:{B},alg:entropy", (GEN,)),
    "dream-maskgit_plus-steps=gen": ("dream", dream(1, "maskgit_plus"), lambda B: f"dream:{B}", (GEN,)),
    "dream-maskgit_plus": ("dream", dream(2, "maskgit_plus"), lambda B: f"dream:{B // 2}", (GEN,)),
    "dream-maskgit_plus-gen/4": ("dream", dream(4, "maskgit_plus"), lambda B: f"dream:{B // 4}", (GEN,)),
    "dream-entropy": ("dream", dream(2, "entropy"), lambda B: f"dream:{B // 2},alg:entropy", (GEN,)),
    "dream-entropy-gen/4": ("dream", dream(4, "entropy"), lambda B: f"dream:{B // 4},alg:entropy", (GEN,)),
}
TARGETS = {}


def target_of(family):
    if family not in TARGETS:
        kw = dict(mask_id=MASK) if family in ("sdar", "llada2") else {}
        TARGETS[family] = spot.load_target(f"{ROOT}/ckpt/{family}", trust_remote_code=True, dtype="float64", **kw)
    return TARGETS[family]


def run_case(name, mask_off, drafter):
    family, sampler, rule_of, blocks = CASES[name]
    target = target_of(family)
    same = total = forwards = stores = std_passes = 0
    spec = {"confidence": [0, 0], "spot": [0, 0]}  # passes, outputs equal to standard
    for B in blocks:
        rule = rule_of(B)
        s = dict(max_new_tokens=GEN, block_size=B, eos_id=None, rule=rule)
        for p in PROMPTS:
            quirks = TOPK_PICKED_UNMASKED[0]
            theirs, calls, stored = sampler(target.model, torch.tensor([p]), B, mask_off)
            quirks = TOPK_PICKED_UNMASKED[0] - quirks
            ref = spot.generate(target, [p], "standard", **s)
            same += ref.tokens[0] == theirs
            total += 1
            forwards, stores, std_passes = forwards + calls, stores + stored, std_passes + ref.stats.target_passes
            if ref.tokens[0] != theirs:
                diff = [i for i, (a, b) in enumerate(zip(ref.tokens[0], theirs)) if a != b]
                quirk = f" (its topk took unmasked positions {quirks} times)" if quirks else ""
                print(f"  {rule} B {B} prompt {len(p)}: differ at {diff[:6]}{quirk}; ours {ref.tokens[0]} theirs "
                      f"{theirs}")
            for method in spec:
                out = spot.generate(target, [p], method, drafter=drafter, budget=8, **s)
                spec[method][0] += out.stats.target_passes
                spec[method][1] += out.tokens == ref.tokens
    eq = n = 0  # all prompts in one call, T 0 and T 1 (the coupled noise)
    for B in blocks:
        for T in (0.0, 1.0):
            s = dict(max_new_tokens=GEN, block_size=B, eos_id=None, rule=rule_of(B), temperature=T, budget=8)
            ref = spot.generate(target, PROMPTS, "standard", **s)
            for method in spec:
                eq += spot.generate(target, PROMPTS, method, drafter=drafter, **s).tokens == ref.tokens
                n += 1
    store_note = f" (+{stores} store_kv forwards)" if stores else ""
    rules = " / ".join(dict.fromkeys(rule_of(B) for B in blocks))
    print(f"{name}: {rules} (B {', '.join(map(str, blocks))}, gen {GEN}): standard == sampler "
          f"{same}/{total}; forwards: sampler {forwards - stores}{store_note}, standard {std_passes}, confidence "
          f"{spec['confidence'][0]} ({spec['confidence'][1]}/{total} == standard), spot {spec['spot'][0]} "
          f"({spec['spot'][1]}/{total}); batched T 0, 1: {eq}/{n} == standard")


if __name__ == "__main__":
    args = sys.argv[1:]
    mask_off = bool(args) and args[0] == "--mask-logit-off"
    args = args[1:] if mask_off else args
    drafter = spot.load_drafter("portable")
    for name in args or CASES:
        run_case(name, mask_off, drafter)
    if ENTROPY_SETS["steps"]:
        print(f"dream entropy, sum p log(p + 1e-10) vs sum p log p (float64): {ENTROPY_SETS['differ']} of "
              f"{ENTROPY_SETS['steps']} steps commit a different set; smallest gap at a step's cut "
              f"{ENTROPY_SETS['min_gap']:.3g}")
    if TOPK_PICKED_UNMASKED[0]:
        print(f"sdar: its unclamped topk took unmasked positions {TOPK_PICKED_UNMASKED[0]} times")
    print("mask logit off" if mask_off else "mask logit as the model gives it")
