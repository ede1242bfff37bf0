"""`spot export` against SDAR's real code: the embedded target written as an SDAR checkpoint, loaded by SDAR's own
modeling files through transformers 4.57.1, decoded by spot's SDAR family target and by SDAR's own
`block_diffusion_generate` (JetAstra/SDAR generate.py), each compared token for token with the embedded target's
`standard` under the matching rule, on held-out prompts. Their code is read from $SPOT_FAMILY_ROOT/src/sdar/
(configuration_sdar.py, modeling_sdar.py, generate.py: docs/integrations.md names the commits); the project holds
none of it.

Usage: SPOT_FAMILY_ROOT=DIR PYTHONPATH=.cache/tf4:DIR/py python bench/families/sdar_export.py [--target DIR]
       [--num-prompts 8] [--max-new-tokens 64] [--block-sizes 4,32] [--dtype float64]
(DIR/py holds opencompass/models/sdar_utils.py, which the modeling file imports.)

SDAR's draw `sample_with_temperature_topk_topp` divides by the temperature; it is replaced by its T -> 0 limit, the
argmax of the softmax in the logits' own dtype and its probability (bench/families/compare_rules.py does the same).
Forwards are counted per prompt: the denoising ones, and the `store_kv=True` ones that only write a finished block's
keys (spot's family target writes a block inside its next pass)."""
import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

import spot
from spot.export import SDAR_CODE_FILES, export_sdar
from spot.prompts import held_out_prompts

from compare import module

ROOT = os.environ.get("SPOT_FAMILY_ROOT", ".cache/families")


def greedy_in_own_dtype(logits, *args, **kwargs):
    p, tok = F.softmax(logits, dim=-1).max(-1)
    return tok, p


class Counted(torch.nn.Module):
    """The model with its forwards counted: `denoise` (store_kv False) and `store` (store_kv True)."""

    def __init__(self, m):
        super().__init__()
        self.m, self.denoise, self.store = m, 0, 0

    def forward(self, *a, **k):
        if k.get("store_kv"):
            self.store += 1
        else:
            self.denoise += 1
        return self.m(*a, **k)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.m, name)


def sdar_generate(model, prompt, mask_id, gen, B, strategy, threshold):
    g = module(f"{ROOT}/src/sdar/generate.py", "sdar_generate")
    g.sample_with_temperature_topk_topp = greedy_in_own_dtype
    m = Counted(model)
    out = g.block_diffusion_generate(m, {"input_ids": torch.tensor([prompt])}, mask_id, gen_length=gen,
                                     block_length=B, denoising_steps=B, temperature=1.0,
                                     remasking_strategy=strategy, confidence_threshold=threshold)
    return out[0, len(prompt):len(prompt) + gen].tolist(), m.denoise, m.store


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="default")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--block-sizes", default="4,32")
    ap.add_argument("--dtype", default="float64")
    a = ap.parse_args()
    embedded = spot.load_target(a.target, dtype=a.dtype)
    tmp = Path(tempfile.mkdtemp(prefix="spot-sdar-export-"))
    path = export_sdar(embedded.model, embedded.tokenizer, tmp / "ckpt")
    for name in SDAR_CODE_FILES:
        shutil.copy(Path(ROOT) / "src" / "sdar" / name, path / name)
    family = spot.load_target(str(path), trust_remote_code=True, dtype=a.dtype)
    print(f"exported {a.target} to {path}; loaded by SDAR's code as {type(family).__name__} "
          f"({type(family.model).__module__}.{type(family.model).__name__}), mask id {family.mask_id}")
    prompts = [embedded.tokenizer.encode(p) for p in held_out_prompts(a.num_prompts)]
    gen = a.max_new_tokens
    for B in [int(x) for x in a.block_sizes.split(",")]:
        kw = dict(max_new_tokens=gen, block_size=B, eos_id=None)
        for rule in ("one", "threshold:0.85", "threshold:0.9"):
            same = sum(spot.generate(embedded, [p], "standard", rule=rule, **kw).tokens
                       == spot.generate(family, [p], "standard", rule=rule, **kw).tokens for p in prompts)
            print(f"B {B} {rule}: the family target on SDAR's code == the embedded target {same}/{len(prompts)}")
        for strategy, threshold, rule in (("low_confidence_static", 0.85, "one"),
                                          ("low_confidence_dynamic", 0.85, "threshold:0.85"),
                                          ("low_confidence_dynamic", 0.9, "threshold:0.9")):
            same = denoise = store = passes = tokens = 0
            for p in prompts:
                theirs, d, s = sdar_generate(family.model, p, family.mask_id, gen, B, strategy, threshold)
                ours = spot.generate(embedded, [p], "standard", rule=rule, **kw)
                same += ours.tokens[0] == theirs
                denoise, store, passes = denoise + d, store + s, passes + ours.stats.target_passes
                tokens += len(theirs)
            print(f"B {B} block_diffusion_generate({strategy}, threshold {threshold}, denoising_steps {B}) == "
                  f"standard {rule}: {same}/{len(prompts)}; its forwards {denoise} denoising + {store} store_kv, "
                  f"standard's passes {passes}; tokens per denoising forward {tokens / denoise:.2f}")
        # SDAR's sampler at its own defaults (dynamic, threshold 0.85) is rule="family" on the exported checkpoint
        same = sum(spot.generate(family, [p], "standard", rule="family", **kw).tokens[0]
                   == sdar_generate(family.model, p, family.mask_id, gen, B, "low_confidence_dynamic", 0.85)[0]
                   for p in prompts)
        print(f"B {B} block_diffusion_generate at its defaults == standard rule='family' on the exported checkpoint: "
              f"{same}/{len(prompts)}")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
