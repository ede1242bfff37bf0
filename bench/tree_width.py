"""Tree width on this machine's CPU path: passes, CPU seconds and drafting's share of spot's time per width, for
choosing the CPU path's default width (spot.tree.CPU_WIDTH; docs/round.md, "Wall clock on this CPU").

    OMP_NUM_THREADS=1 python bench/tree_width.py --num-prompts 16 --widths 4,2,1 --temperatures 0,1 \
        --json bench/results/tree-width-b32.json

Per temperature, the widths run in the given order and then reversed, in one process (drift on a shared machine
falls on every width alike); per width: target passes, CPU seconds of the process (`time.process_time`, averaged
over the two runs), drafting's share of the stage seconds (wall clock: drafting / (drafting + target +
verification)), drafted nodes per pass, and whether the tokens equal the first width's (they must: the width
changes trees, never tokens). Budget 16 by default, the drafter's own branch (8 for the shipped one), batch 1.
"""

from __future__ import annotations

import argparse
import time

import spot
from spot.lab.bench import check_writable, write_json
from spot.prompts import held_out_prompts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--widths", default="4,2,1")
    ap.add_argument("--temperatures", default="0,1")
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
        runs = {w: [] for w in widths}
        for w in widths + widths[::-1]:
            nodes["n"] = 0
            t0 = time.process_time()
            out = spot.generate(target, prompts, "spot", drafter=drafter, max_new_tokens=a.max_new_tokens,
                                block_size=a.block_size, temperature=temperature,
                                tree=spot.TreeSettings(a.budget, width=w), batching=spot.Batching(max_batch=1))
            seconds = time.process_time() - t0
            stages = out.stats.stage_seconds
            runs[w].append(dict(cpu_seconds=seconds, draft_share=stages["draft"] / sum(stages.values()),
                                target_passes=out.stats.target_passes, tokens=out.tokens,
                                nodes_per_pass=nodes["n"] / out.stats.target_passes))
        first = runs[widths[0]][0]["tokens"]
        table = {}
        print(f"T {temperature:g}")
        for w, r in runs.items():
            row = table[w] = {
                "target_passes": r[0]["target_passes"],
                "cpu_seconds": sum(x["cpu_seconds"] for x in r) / len(r),
                "cpu_seconds_runs": [x["cpu_seconds"] for x in r],
                "draft_share": sum(x["draft_share"] for x in r) / len(r),
                "nodes_per_pass": r[0]["nodes_per_pass"],
                "exact_vs_first_width": all(x["tokens"] == first for x in r)}
            print(f"  width {w}: passes {row['target_passes']:>5}  cpu {row['cpu_seconds']:7.2f} s  "
                  f"drafting {row['draft_share']:6.1%}  nodes/pass {row['nodes_per_pass']:5.2f}  "
                  f"exact {row['exact_vs_first_width']}")
        report["temperatures"][temperature] = table
    if a.json:
        write_json(report, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
