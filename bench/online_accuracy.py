"""How well an online-calibrated drafter (`NAME+online`, spot/online.py) predicts the target's commits while it
decodes: prequential top-1 per depth bucket (each commit predicted before the drafter learned from it), beside the
base drafter's on the same commits, with spot's passes and a check that the tokens equal standard's.

    OMP_NUM_THREADS=1 python bench/online_accuracy.py --target target2 --drafter portable+online --num-prompts 16 \
        --json bench/results/online-accuracy-target2.json

The examples are the accepted chains of spot's own passes (depth k only where the first k drafted commits were
accepted), not the held-out trajectories `spot build evaluate` reads, so the two accuracies do not compare.
"""

from __future__ import annotations

import argparse

import spot
from spot.lab.bench import check_writable, decode_all, write_json
from spot.prompts import held_out_prompts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="default", help="an embedded target name or a target directory")
    ap.add_argument("--drafter", default="portable+online", help="NAME+online (spot.load_drafter)")
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    target, drafter = spot.load_target(a.target), spot.load_drafter(a.drafter)
    if not hasattr(drafter, "prequential_accuracy"):
        raise SystemExit(f"--drafter {a.drafter}: not an online-calibrated drafter (NAME+online)")
    prompts = [target.tokenizer.encode(t) for t in held_out_prompts(a.num_prompts)]
    settings = dict(max_new_tokens=a.max_new_tokens, block_size=a.block_size, temperature=a.temperature,
                    eos_id=None, budget=a.budget)
    standard = decode_all(target, prompts, "standard", **settings)
    run = decode_all(target, prompts, "spot", drafter=drafter, **settings)
    accuracy = drafter.prequential_accuracy()
    report = {"settings": {**vars(a)}, "standard_passes": standard["target_passes"],
              "spot_passes": run["target_passes"], "exact_match_vs_standard": run["tokens"] == standard["tokens"],
              "prequential_top1": accuracy}
    print(f"passes: standard {standard['target_passes']}, spot {run['target_passes']}; exact "
          f"{report['exact_match_vs_standard']}")
    for d, (online, base, n) in enumerate(zip(accuracy["online"], accuracy["base"], accuracy["examples"])):
        print(f"depth {d}{'+' if d == len(accuracy['examples']) - 1 else ' '}: top-1 online {online:.3f}, base "
              f"{base:.3f} ({n} commits)")
    if a.json:
        write_json(report, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
