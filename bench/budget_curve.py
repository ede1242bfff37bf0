"""Pass reduction against the tree's node budget, for `spot` and `confidence`, on held-out prompts.

    OMP_NUM_THREADS=1 python bench/budget_curve.py --num-prompts 16 --budgets 2,4,8,16,32 --json curve.json

`standard` runs once per prompt; every other (method, budget) decodes the same prompts with the same seeds, so
the pass ratios and the exactness check compare like with like. Wall-clock ratios are within this one run.
"""

from __future__ import annotations

import argparse
import json

import spot
from spot.bench import decode_all
from spot.prompts import held_out_prompts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--budgets", default="2,4,8,16,32")
    ap.add_argument("--methods", default="spot,confidence", help="any of spot,confidence,oracle")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    target = spot.load_target(dtype=a.dtype)
    drafter = spot.load_drafter()
    prompts = [target.tokenizer.encode(t) for t in held_out_prompts(a.num_prompts)]
    settings = dict(max_new_tokens=a.max_new_tokens, block_size=a.block_size, temperature=a.temperature,
                    eos_id=None)

    standard = decode_all(target, prompts, "standard", **settings)
    ref, base_passes, base_seconds = standard["tokens"], standard["target_passes"], standard["seconds"]
    rows = []
    print(f"standard: {base_passes} passes, {base_seconds:.1f} s")
    for budget in [int(x) for x in a.budgets.split(",")]:
        for method in a.methods.split(","):
            run = decode_all(target, prompts, method, budget=budget, drafter=drafter,
                             standard_orders=standard["orders"], **settings)
            tokens, passes, seconds = run["tokens"], run["target_passes"], run["seconds"]
            rows.append({"method": method, "budget": budget, "target_passes": passes,
                         "pass_reduction_vs_standard": base_passes / passes,
                         "speedup_vs_standard": base_seconds / seconds, "exact_match_vs_standard": tokens == ref})
            r = rows[-1]
            print(f"{method:<10} budget {budget:>3}: {passes:>6} passes  reduction {r['pass_reduction_vs_standard']:.2f}x"
                  f"  wall speedup {r['speedup_vs_standard']:.2f}x  exact {r['exact_match_vs_standard']}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": {**settings, "num_prompts": len(prompts), "dtype": a.dtype},
                       "standard_passes": base_passes, "standard_seconds": base_seconds, "runs": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
