"""Tree width on this machine's CPU path: passes, CPU seconds and drafting's share of spot's time per width (what a
CPU gains from a narrower tree than the default spot.tree.WIDTH; docs/round.md, "Wall clock on this CPU").

    OMP_NUM_THREADS=1 python bench/tree_width.py --num-prompts 16 --widths 4,2,1 --temperatures 0,1 \
        --json bench/results/tree-width-b32.json

Per temperature, every prompt is decoded by every width in turn (the given order, reversed in odd rounds), in one
process, `--repeats` rounds: drift on a shared machine falls on every width alike. Per width: target passes, CPU
seconds of the process (`time.process_time`, summed over the prompts, averaged over the rounds), drafting's share
of the stage seconds (wall clock: drafting / (drafting + target + verification)), drafted nodes per pass, and
whether the tokens equal the first width's (they must: the width changes trees, never tokens). Budget 16 by
default, the drafter's own branch (8 for the shipped one), one prompt at a time (its row: its index).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import spot
from spot.lab.bench import check_writable, draft_share, write_json
from spot.prompts import held_out_prompts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--widths", default="4,2,1")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    widths = [int(w) for w in a.widths.split(",")]
    target, drafter = spot.load_target(), spot.load_drafter()
    prompts = [target.tokenizer.encode(t) for t in held_out_prompts(a.num_prompts)]
    nodes = {"n": 0}
    real = drafter.position_logits

    def counted(stale, node_masked, *args, **kwargs):  # the drafted nodes: the drafter's rows
        nodes["n"] += node_masked.shape[0]
        return real(stale, node_masked, *args, **kwargs)

    drafter.position_logits = counted
    report = {"settings": vars(a), "temperatures": {}}
    for temperature in map(float, a.temperatures.split(",")):
        runs = {w: dict(cpu_seconds=0.0, stages=Counter(), target_passes=0, nodes=0, tokens=[]) for w in widths}
        for rnd in range(a.repeats):
            for i, prompt in enumerate(prompts):
                for w in widths if rnd % 2 == 0 else widths[::-1]:
                    nodes["n"] = 0
                    t0 = time.process_time()
                    out = spot.generate(target, [prompt], "spot", drafter=drafter, rows=[i],
                                        max_new_tokens=a.max_new_tokens, block_size=a.block_size,
                                        temperature=temperature, tree=spot.TreeSettings(a.budget, width=w))
                    r = runs[w]
                    r["cpu_seconds"] += (time.process_time() - t0) / a.repeats
                    r["stages"].update(out.stats.stage_seconds)
                    if rnd == 0:
                        r["target_passes"] += out.stats.target_passes
                        r["nodes"] += nodes["n"]
                        r["tokens"] += out.tokens
        first = runs[widths[0]]["tokens"]
        table = {}
        print(f"T {temperature:g}")
        for w, r in runs.items():
            st = r["stages"]
            row = table[w] = {
                "target_passes": r["target_passes"], "cpu_seconds": r["cpu_seconds"],
                "stage_seconds": {k: v / a.repeats for k, v in st.items()},
                "draft_share": draft_share(st),
                "nodes_per_pass": r["nodes"] / r["target_passes"],
                "exact_vs_first_width": r["tokens"] == first}
            print(f"  width {w}: passes {row['target_passes']:>5}  cpu {row['cpu_seconds']:7.2f} s  "
                  f"drafting {row['draft_share']:6.1%}  nodes/pass {row['nodes_per_pass']:5.2f}  "
                  f"exact {row['exact_vs_first_width']}")
        report["temperatures"][temperature] = table
    if a.json:
        write_json(report, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
