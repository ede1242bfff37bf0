"""The static round captured in a CUDA graph, alone and with the embedded target's forward inside: replay
bit-identical to eager, microseconds per round (docs/round.md, "Capture").

    python bench/round_gpu.py --json round_gpu.json              # on a GPU (bench/gpu_check.sh runs it)
    python bench/round_gpu.py --device cpu --rows 2 --budgets 4  # a dry run of the same code, eager only

Per (rows, budget) bucket at B = 32: the round's inputs come from real passes of the embedded target and the
default drafter (a block's first pass, then its second pass's tree and logits), then `spot.round.draft` and
`spot.round.settle` (the target's forward outside: its logits are an input buffer) run eagerly and, on CUDA,
captured once in a torch.cuda.CUDAGraph and replayed. Then the whole pass, `draft` -> the embedded target's
tensor work (`ModelSession.forward` over its KV cache, capturable kernels) -> `settle`, the same way: one graph
per (rows, budget, B, cache capacity). Checks every output of each replay equals eager's bit for bit, and that
the whole pass eagerly gives the round's outputs; times them (median microseconds per round, the host included).
On CUDA, last: `generate` with `TreeSettings(compile="cudagraphs")` against the eager static round (tokens,
passes, seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

import spot
from spot.lab.bench import check_writable, write_json
from spot.model import Append, Kernels
from spot.round import RoundConfig, draft, settle
from spot.rules import parse_rule
from spot.target import ModelSession


def round_inputs(target, drafter, rows: int, budget: int, block_size: int, temperature: float, rule: str = "one"):
    """(cfg, block, step, noise rows, block_start, stale, logits, session): the state before a block's second pass,
    the logits of that pass's static tree, and the session (capturable kernels) whose cache holds the prefix."""
    dev = target.device
    prompt = target.tokenizer.encode("def add(a, b):\n")
    session = ModelSession(target, [prompt] * rows, block_size, block_size, Kernels(target.kernels, capturable=True))
    rule = parse_rule(rule)
    tables = None if rule.is_one else rule.tables(block_size, dev)  # with the probes generate gives the rule
    top_k = min(spot.drafters.default_top_k(rule.is_one, temperature), target.vocab_size)  # generate's default
    cfg = RoundConfig(target.mask_id, 0, temperature, top_k=top_k, budget=budget,
                      branch=spot.tree.tree_branch(drafter), eos_id=None, static=True, rule=tables,
                      probes=spot.tree.default_probes(tables, budget))
    noise_rows = torch.arange(rows, device=dev)
    block = torch.full((rows, block_size), target.mask_id, dtype=torch.long, device=dev)
    step = torch.zeros(rows, dtype=torch.long, device=dev)
    tree = draft(cfg, None, block, step, noise_rows, None)
    first = settle(cfg, tree, session.score(tree.states), block, step, noise_rows, session.block_start)
    tree = draft(cfg, drafter, first.block, first.step, noise_rows, first.stale)
    logits = session.score(tree.states)
    return cfg, first.block, first.step, noise_rows, session.block_start, first.stale, logits, session


def _outputs(tree, out):
    return (tree.states, tree.parents, out.block, out.step, out.accepted_pos, out.n_acc, out.stale.topk_probs,
            out.stale.topk_ids, out.stale.confidence)


def one_round(cfg, drafter, block, step, rows, block_start, stale, logits):
    tree = draft(cfg, drafter, block, step, rows, stale)
    return _outputs(tree, settle(cfg, tree, logits.clone(), block, step, rows, block_start))


def whole_pass(cfg, drafter, session, block, step, rows, block_start, stale):
    """The round with the embedded target's forward inside: a pass that appends nothing reads the cache only."""
    tree = draft(cfg, drafter, block, step, rows, stale)
    b, n, B = tree.states.shape
    logits = session.forward(tree.states.reshape(b, n * B), Append(session.cache.capacity, 0), n, B, True)
    return _outputs(tree, settle(cfg, tree, logits.view(b, n, B, -1), block, step, rows, block_start))


def _capture(fn, run_again):
    """fn() captured in a CUDA graph after a warm-up on a side stream (run_again() builds fresh inputs for it)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run_again()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph, outputs


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


def check_bucket(target, drafter, rows: int, budget: int, block_size: int, temperature: float, repeats: int,
                 rule: str = "one") -> dict:
    cfg, block, step, noise_rows, block_start, stale, logits, session = round_inputs(target, drafter, rows, budget,
                                                                                     block_size, temperature, rule)
    dev = block.device
    args = (cfg, drafter, block, step, noise_rows, block_start, stale, logits)
    eager = one_round(*args)

    def whole(stale_now):  # a fresh StaleFeatures object: the drafter's per-pass inputs are computed again
        return whole_pass(cfg, drafter, session, block, step, noise_rows, block_start, stale_now)

    whole_eager = whole(dataclasses.replace(stale))
    entry = {"rows": rows, "budget": budget, "block_size": block_size, "temperature": temperature, "rule": rule,
             "cache_capacity": session.cache.capacity,
             "whole_pass_equals_round": all(torch.equal(a, b) for a, b in zip(whole_eager, eager)),
             "eager_us": _median_us(lambda: one_round(*args), dev, repeats),
             "whole_pass_eager_us": _median_us(lambda: whole(dataclasses.replace(stale)), dev, repeats)}
    if dev.type == "cuda":
        captured_stale = dataclasses.replace(stale)
        graph, outputs = _capture(lambda: one_round(cfg, drafter, block, step, noise_rows, block_start,
                                                    captured_stale, logits),
                                  lambda: one_round(*args[:6], dataclasses.replace(stale), logits))
        entry["replay_bit_identical"] = all(torch.equal(a, b) for a, b in zip(outputs, eager))
        entry["replay_us"] = _median_us(graph.replay, dev, repeats)
        captured_stale = dataclasses.replace(stale)
        graph, outputs = _capture(lambda: whole(captured_stale), lambda: whole(dataclasses.replace(stale)))
        entry["whole_pass_replay_bit_identical"] = all(torch.equal(a, b) for a, b in zip(outputs, whole_eager))
        entry["whole_pass_replay_us"] = _median_us(graph.replay, dev, repeats)
    return entry


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def check_generate(target, drafter, temperature: float, budget: int, block_size: int, rule: str = "one") -> dict:
    """`generate` with the round compiled through the "cudagraphs" backend (each bucket captured in a CUDA graph,
    the embedded forward inside for passes that append nothing) against the eager static round: same tokens and
    passes, and the wall clock of each (the second of two runs: the first captures)."""
    prompts = [target.tokenizer.encode(p) for p in ("def add(a, b):\n", "import os\n")]
    kw = dict(drafter=drafter, max_new_tokens=4 * block_size, block_size=block_size, temperature=temperature,
              rule=rule)
    entry = {"check": "generate", "temperature": temperature, "budget": budget, "block_size": block_size,
             "rule": rule}
    runs = {}
    for name, tree in (("eager", spot.TreeSettings(budget, static=True)),
                       ("cudagraphs", spot.TreeSettings(budget, compile="cudagraphs"))):
        try:
            for _ in range(2):
                _sync(target.device)
                t0 = time.perf_counter()
                out = spot.generate(target, prompts, "spot", tree=tree, **kw)
                _sync(target.device)
                runs[name] = (out, time.perf_counter() - t0)
        except Exception as err:  # recorded, not raised: the other checks still run
            entry[f"{name}_error"] = f"{type(err).__name__}: {err}"[:500]
            return entry
    (eager, t_eager), (graphs, t_graphs) = runs["eager"], runs["cudagraphs"]
    entry.update(tokens_equal=graphs.tokens == eager.tokens, passes=[eager.stats.target_passes,
                 graphs.stats.target_passes], eager_s=t_eager, cudagraphs_s=t_graphs, speedup=t_eager / t_graphs)
    return entry


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--rows", default="1,32")
    p.add_argument("--budgets", default="4,16")
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--temperatures", default="0,1")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rules", default="one", help="commit rules, semicolon-separated (docs/rules.md): each bucket "
                   "and the generate check run once per rule")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    target = spot.load_target(device=a.device)
    drafter = spot.load_drafter(device=a.device)
    report = []
    rules = [r.strip() for r in a.rules.split(";") if r.strip()]
    with torch.no_grad():
        for rule in rules:
            for t in (float(x) for x in a.temperatures.split(",")):
                for rows in (int(x) for x in a.rows.split(",")):
                    for budget in (int(x) for x in a.budgets.split(",")):
                        entry = check_bucket(target, drafter, rows, budget, a.block_size, t, a.repeats, rule)
                        print(json.dumps(entry))
                        report.append(entry)
        if target.device.type == "cuda":
            for rule in rules:
                for t in (float(x) for x in a.temperatures.split(",")):
                    entry = check_generate(target, drafter, t, 16, a.block_size, rule)
                    print(json.dumps(entry))
                    report.append(entry)
    if a.json:
        write_json({"device": a.device, "buckets": report}, a.json)
    checks = ("whole_pass_equals_round", "replay_bit_identical", "whole_pass_replay_bit_identical", "tokens_equal")
    return 0 if all(e.get(c, True) for e in report for c in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
