"""Each family's own sampler vs spot's family target on the real modeling code (tiny random float64 checkpoints of
build_ckpts.py). transformers 4.57.1. Usage: compare.py FAMILY..."""
import importlib.util
import os
import sys

import torch
import torch.nn.functional as F
import spot
from spot.order_model import LearnedDrafter, OrderModel, OrderModelConfig

ROOT = os.environ.get("SPOT_FAMILY_ROOT", ".cache/families")  # src/<family>/ (their code), ckpt/<family>/
MASK, EOS = 63, 2
PROMPTS = [[5, 9, 14, 20, 33], [7, 8, 10, 11, 12, 13, 40, 41], [3, 50, 60, 17, 11, 12, 13, 4, 6, 9, 30], [4, 5, 6, 7]]


def module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def greedy(logits, *args, **kwargs):  # the T -> 0 limit of SDAR's / LLaDA2's multinomial draw
    probs = F.softmax(logits.double(), dim=-1)
    p, tok = probs.max(-1)
    return tok, p


class MaskLogitOff(torch.nn.Module):
    """The model with the mask token's logit at -inf, as a trained checkpoint effectively has it (SPOT never commits
    the mask id; LLaDA's and Dream's loops keep its probability in the softmax)."""

    def __init__(self, m):
        super().__init__()
        self.m, self.device, self.config = m, m.device, m.config

    def forward(self, *a, **k):
        out = self.m(*a, **k)
        out.logits[..., MASK] = -float("inf")
        return out

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.m, name)


MASK_OFF = False
DREAM_EPS = None
DREAM_ONE_PER_STEP = False


def own(family, model, prompt, gen, B):
    x = torch.tensor([prompt])
    if MASK_OFF and family == "llada":
        model = MaskLogitOff(model)
    if family == "llada":
        g = module(f"{ROOT}/src/llada/generate.py", "llada_generate")
        out = g.generate(model, x, steps=gen, gen_length=gen, block_length=B, temperature=0.0,
                         remasking="low_confidence", mask_id=MASK)
        return out[0, len(prompt):].tolist()
    if family == "dream":
        extra = {} if DREAM_EPS is None else dict(eps=DREAM_EPS)
        linspace, forward = torch.linspace, type(model).forward
        if DREAM_ONE_PER_STEP:  # timesteps t_0 = 1, t_i = (N - i - 0.5) / N: int(n (1 - s / t)) = 1 at every step
            def one_per_step(start, end, count, **k):
                n = count - 1
                t = torch.tensor([1.0] + [(n - i - 0.5) / n for i in range(1, n)] + [float(end)], **k)
                return t
            torch.linspace = one_per_step
        if MASK_OFF:
            def forward_off(self, *a, **k):
                out = forward(self, *a, **k)
                out.logits[..., MASK] = -float("inf")
                return out
            model.forward = forward_off.__get__(model)
        try:
            out = model.diffusion_generate(x, max_new_tokens=gen, steps=gen, temperature=0.0, alg="maskgit_plus",
                                           return_dict_in_generate=True, output_history=False, **extra)
        finally:
            torch.linspace = linspace
            if MASK_OFF:
                del model.forward
        return out.sequences[0, len(prompt):].tolist()
    if family == "sdar":
        g = module(f"{ROOT}/src/sdar/generate.py", "sdar_generate")
        g.sample_with_temperature_topk_topp = greedy
        g.block_diffusion_generate(model, {"input_ids": x}, MASK, gen_length=gen, block_length=B,
                                   denoising_steps=B, remasking_strategy="low_confidence_static")
        # block_diffusion_generate returns nothing in this snapshot: rerun its loop's x by a hook below
        raise RuntimeError("see sdar_own")
    if family == "llada2":
        model._sample_with_temperature_topk_topp = greedy
        llada2_forward64(model, MASK_OFF)
        out = model.generate(x, temperature=0.0, block_length=B, steps=B, gen_length=gen, threshold=1.0,
                             eos_early_stop=False, eos_id=EOS, mask_id=MASK)
        del model.forward
        return out[0].tolist()


def llada2_forward64(model, mask_off, calls=None):
    """LLaDA2's forward on the instance (`del model.forward` undoes it) with its bf16 0/-inf mask cast to float64,
    exactly (sdpa refuses a bf16 mask beside float64 queries), -inf on the mask token's logit with `mask_off`, and
    its calls counted in calls[0] (its generate() calls self.forward, so no hook sees them)."""
    forward = type(model).forward

    def forward64(self, input_ids, attention_mask=None, **k):
        if calls is not None:
            calls[0] += 1
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(torch.float64)
        out = forward(self, input_ids, attention_mask=attention_mask, **k)
        if mask_off:
            out.logits[..., MASK] = -float("inf")
        return out
    model.forward = forward64.__get__(model)


def portable(seed=0):
    torch.manual_seed(seed)
    return LearnedDrafter(OrderModel(OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, top_k=8,
                                                      resampled=True)))


def through_eos(row):
    return row[:row.index(EOS) + 1] if EOS in row else row


def main(family, attn=None):
    d = f"{ROOT}/ckpt/{family}"
    kw = {} if attn is None else dict(attn_implementation=attn)
    if family in ("sdar", "llada2"):
        kw["mask_id"] = MASK  # their config.json names no mask token (SDAR: the tokenizer does)
    target = spot.load_target(d, trust_remote_code=True, dtype="float64", **kw)
    print(family, type(target).__name__, "attention", target.attention, "mask form", target.mask_form)
    model = target.model
    same = total = 0
    gens = {"llada": [8, 16], "dream": [8, 12], "sdar": [16], "llada2": [16]}[family]
    blocks = {"llada": [4, 8], "dream": [None], "sdar": [4, 8], "llada2": [4, 8]}[family]
    for B in blocks:
        for gen in gens:
            block = gen if B is None else B
            for p in PROMPTS:
                theirs = own(family, model, p, gen, block) if family != "sdar" else sdar_own(model, p, gen, block)
                ours = spot.generate(target, [p], "standard", max_new_tokens=gen, block_size=block, eos_id=None,
                                     allow_partial_block=True).tokens[0]
                if family == "llada2":
                    ours = through_eos(ours)
                ok = ours == theirs
                same += ok
                total += 1
                if not ok:
                    diff = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
                    print(f"  B {block} gen {gen} prompt {len(p)}: differ at {diff[:6]} of {len(theirs)}; "
                          f"ours {ours} theirs {theirs}")
    print(f"{family}: standard == own sampler {same}/{total}")
    # spot and confidence vs standard on the real code, both temperatures, blocks 4 and 8, all prompts together
    drafter, eq, n, drafted = portable(), 0, 0, 0
    for B in (4, 8):
        for T in (0.0, 1.0):
            s = dict(max_new_tokens=16, block_size=B, temperature=T, eos_id=None, budget=8)
            ref = spot.generate(target, PROMPTS, "standard", **s)
            for method in ("confidence", "spot"):
                out = spot.generate(target, PROMPTS, method, drafter=drafter, **s)
                eq += out.tokens == ref.tokens
                n += 1
                drafted += sum((k - 1) * c for k, c in out.stats.commits_per_pass.items() if k > 1)
    print(f"{family}: spot/confidence == standard {eq}/{n} (4 prompts each), drafted commits accepted {drafted}")


def sdar_own(model, prompt, gen, B):
    """SDAR's block_diffusion_generate (low_confidence_static, steps = B), its sampler replaced by greedy."""
    g = module(f"{ROOT}/src/sdar/generate.py", "sdar_generate")
    g.sample_with_temperature_topk_topp = greedy
    x = g.block_diffusion_generate(model, {"input_ids": torch.tensor([prompt])}, MASK, gen_length=gen,
                                   block_length=B, denoising_steps=B, remasking_strategy="low_confidence_static")
    return x[0, len(prompt):len(prompt) + gen].tolist()


if __name__ == "__main__":
    attn = None
    args = sys.argv[1:]
    if args and args[0] == "--mask-logit-off":
        MASK_OFF = True
        args.pop(0)
    if args and args[0] == "--dream-one-per-step":
        DREAM_ONE_PER_STEP = True
        args.pop(0)
    if args and args[0].startswith("--dream-eps="):
        DREAM_EPS = float(args.pop(0).split("=", 1)[1])
    if args and args[0].startswith("--attn="):
        attn = args.pop(0).split("=", 1)[1]
    for fam in args:
        main(fam, attn)
