"""Pass reduction against the tree's node budget (and tree shape), for `spot` and `confidence`, on held-out prompts.

    OMP_NUM_THREADS=1 python bench/budget_curve.py --num-prompts 16 --budgets 2,4,8,16,32 --json curve.json
    OMP_NUM_THREADS=1 python bench/budget_curve.py --budgets 16 --shapes 4x4,8x2,2x8 --methods spot
    OMP_NUM_THREADS=1 python bench/budget_curve.py --budgets 16 --sharpness 1,1.25,1.5 --methods spot

A shape WxB grows the tree with `width` W frontier nodes per depth and `branch` B children per node. `--sharpness`
runs spot with the drafter's logits scaled by each value (LearnedDrafter.sharpness; default: the drafter's own).

`standard` runs once per prompt; every other (method, budget) decodes the same prompts with the same seeds, so
the pass ratios and the exactness check compare like with like. Wall-clock ratios are within this one run.
"""

from __future__ import annotations

import argparse

import spot
from spot.lab.bench import check_writable, decode_all, write_json
from spot.prompts import held_out_prompts
from spot.tree import WIDTH, tree_branch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--budgets", default="2,4,8,16,32")
    ap.add_argument("--shapes", help="tree shapes width x branch, comma-separated (default: the decoder's width and "
                                      "each method's branch, spot.tree.tree_branch)")
    ap.add_argument("--methods", default="spot,confidence", help="any of spot,confidence,oracle")
    ap.add_argument("--sharpness", help="comma-separated drafter sharpness values for spot (default: the drafter's)")
    ap.add_argument("--drafter", default="default",
                    help="'default', 'portable' (shipped), NAME+online, or a drafter directory")
    ap.add_argument("--target", default="default", help="'default' (embedded), 'target2', or a weights directory")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    target = spot.load_target(a.target, dtype=a.dtype)
    drafter = spot.load_drafter(a.drafter)
    sharpness = [float(x) for x in a.sharpness.split(",")] if a.sharpness else [None]
    if a.sharpness and not isinstance(drafter, spot.LearnedDrafter):
        raise SystemExit(f"--sharpness: drafter {a.drafter} is not a LearnedDrafter")
    prompts = [target.tokenizer.encode(t) for t in held_out_prompts(a.num_prompts)]
    settings = dict(max_new_tokens=a.max_new_tokens, block_size=a.block_size, temperature=a.temperature,
                    eos_id=None)

    standard = decode_all(target, prompts, "standard", **settings)
    ref, base_passes, base_seconds = standard["tokens"], standard["target_passes"], standard["seconds"]
    rows = []
    print(f"standard: {base_passes} passes, {base_seconds:.1f} s")
    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")] if a.shapes else [(WIDTH, None)]
    for budget in [int(x) for x in a.budgets.split(",")]:
        for width, branch in shapes:
            runs = [(m, s) for m in a.methods.split(",") for s in (sharpness if m == "spot" else [None])]
            for method, sharp in runs:
                d = drafter if sharp is None else spot.LearnedDrafter(drafter.model, sharp, drafter.branch)
                tree = spot.TreeSettings(budget=budget, width=width, branch=branch)
                run = decode_all(target, prompts, method, tree=tree, drafter=d, standard_orders=standard["orders"],
                                 **settings)
                used = tree_branch(d if method == "spot" else None, branch)  # None: the method's own
                tokens, passes, seconds = run["tokens"], run["target_passes"], run["seconds"]
                rows.append({"method": method, "budget": budget, "width": width, "branch": used,
                             "sharpness": getattr(d, "sharpness", None) if method == "spot" else None,
                             "target_passes": passes, "pass_reduction_vs_standard": base_passes / passes,
                             "speedup_vs_standard": base_seconds / seconds, "exact_match_vs_standard": tokens == ref})
                r = rows[-1]
                sharp_text = f" sharpness {d.sharpness_at(a.temperature):g}" if hasattr(d, "sharpness_at") \
                    and method == "spot" else ""
                print(f"{method:<10} budget {budget:>3} shape {width}x{used}{sharp_text}: {passes:>6} passes  "
                      f"reduction {r['pass_reduction_vs_standard']:.2f}x  "
                      f"wall speedup {r['speedup_vs_standard']:.2f}x  exact {r['exact_match_vs_standard']}", flush=True)
    if a.json:
        write_json({"settings": {**settings, "num_prompts": len(prompts), "dtype": a.dtype, "drafter": a.drafter,
                                 "target": a.target},
                    "standard_passes": base_passes, "standard_seconds": base_seconds, "runs": rows}, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
