"""The static round captured in a CUDA graph: replay bit-identical to eager, microseconds per round (docs/round.md).

    python bench/round_gpu.py --json round_gpu.json              # on a GPU (bench/gpu_check.sh runs it)
    python bench/round_gpu.py --device cpu --rows 2 --budgets 4  # a dry run of the same code, eager only

Per (rows, budget) bucket at B = 32: the round's inputs come from real passes of the embedded target and the
default drafter (a block's first pass, then its second pass's tree and logits), then `spot.round.draft` and
`spot.round.settle` (the target's forward outside: its logits are an input buffer) run eagerly and, on CUDA,
captured once in a torch.cuda.CUDAGraph and replayed. Checks every output of the replay equals eager's bit for
bit; times both (median microseconds per round, the host included: CUDA events around back-to-back rounds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

import spot
from spot.lab.bench import check_writable, write_json
from spot.round import RoundConfig, draft, settle


def round_inputs(target, drafter, rows: int, budget: int, block_size: int, temperature: float):
    """(cfg, block, step, noise rows, block_start, stale, logits): the state before a block's second pass and the
    logits of that pass's static tree."""
    dev = target.device
    prompt = target.tokenizer.encode("def add(a, b):\n")
    session = target.start([prompt] * rows, block_size, block_size)
    cfg = RoundConfig(target.mask_id, 0, temperature, budget=budget, branch=spot.tree.tree_branch(drafter),
                      eos_id=None, static=True)
    noise_rows = torch.arange(rows, device=dev)
    block = torch.full((rows, block_size), target.mask_id, dtype=torch.long, device=dev)
    step = torch.zeros(rows, dtype=torch.long, device=dev)
    tree = draft(cfg, None, block, step, noise_rows, None)
    first = settle(cfg, tree, session.score(tree.states), block, step, noise_rows, session.block_start)
    tree = draft(cfg, drafter, first.block, first.step, noise_rows, first.stale)
    logits = session.score(tree.states)
    return cfg, first.block, first.step, noise_rows, session.block_start, first.stale, logits


def one_round(cfg, drafter, block, step, rows, block_start, stale, logits):
    tree = draft(cfg, drafter, block, step, rows, stale)
    out = settle(cfg, tree, logits.clone(), block, step, rows, block_start)
    return (tree.states, tree.parents, out.block, out.step, out.accepted_pos, out.n_acc, out.stale.topk_probs,
            out.stale.topk_ids, out.stale.confidence)


def _median_us(fn, device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(1e6 * (time.perf_counter() - t0))
    return sorted(times)[len(times) // 2]


def check_bucket(target, drafter, rows: int, budget: int, block_size: int, temperature: float, repeats: int) -> dict:
    cfg, block, step, noise_rows, block_start, stale, logits = round_inputs(target, drafter, rows, budget,
                                                                            block_size, temperature)
    dev = block.device
    args = (cfg, drafter, block, step, noise_rows, block_start, stale, logits)
    eager = one_round(*args)
    entry = {"rows": rows, "budget": budget, "block_size": block_size, "temperature": temperature,
             "eager_us": _median_us(lambda: one_round(*args), dev, repeats)}
    if dev.type == "cuda":
        # a fresh StaleFeatures object: the drafter's per-pass inputs are then computed inside the graph
        captured_stale = dataclasses.replace(stale)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            one_round(cfg, drafter, block, step, noise_rows, block_start, dataclasses.replace(stale), logits)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = one_round(cfg, drafter, block, step, noise_rows, block_start, captured_stale, logits)
        graph.replay()
        torch.cuda.synchronize()
        entry["replay_bit_identical"] = all(torch.equal(a, b) for a, b in zip(outputs, eager))
        entry["replay_us"] = _median_us(graph.replay, dev, repeats)
    return entry


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--rows", default="1,32")
    p.add_argument("--budgets", default="4,16")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--temperatures", default="0,1")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    target = spot.load_target(device=a.device)
    drafter = spot.load_drafter(device=a.device)
    report = []
    with torch.no_grad():
        for t in (float(x) for x in a.temperatures.split(",")):
            for rows in (int(x) for x in a.rows.split(",")):
                for budget in (int(x) for x in a.budgets.split(",")):
                    entry = check_bucket(target, drafter, rows, budget, a.block_size, t, a.repeats)
                    print(json.dumps(entry))
                    report.append(entry)
    if a.json:
        write_json({"device": a.device, "buckets": report}, a.json)
    return 0 if all(e.get("replay_bit_identical", True) for e in report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
