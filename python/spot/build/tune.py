"""`spot build tune`: decode with every candidate tree budget, store the fastest per device, block size and
temperature (spot.budgets)."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path

import torch

from ..budgets import device_key, predicted_rate, temperature_key
from ..decode import generate


@torch.no_grad()
def time_target_pass(target, block_size: int, nodes: int, prompt_len: int = 256, repeats: int = 3) -> float:
    """Median seconds of one target pass scoring `nodes` copies of a block after a `prompt_len` prefix."""
    prompt = [[3 + i % (target.vocab_size - 3) for i in range(prompt_len)]]
    block = torch.full((1, nodes, block_size), target.mask_id, dtype=torch.long, device=target.device)
    times = []
    for _ in range(repeats + 1):  # the first pass also appends the prompt: not timed
        session = target.start(prompt, block_size, block_size)
        session.score(block[:, :1])
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        session.score(block)
        if target.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def tune(target, drafter, prompts, *, block_size: int, budgets=(1, 2, 4, 8, 16), max_new_tokens: int = 64,
         temperature: float = 0.0, width: int = 4, branch: int = 4, log=print) -> dict:
    """Decode `prompts` with `spot` at every budget (budget 1 is the root alone: standard decoding's cost) and
    return the measurements and the budget with the highest measured tokens/s (ties: the smaller tree).

    Prompts go one at a time (a batch advances in lock-step with its slowest row), the budgets interleaved per
    prompt, so that a shared machine's drift falls on every budget alike. Also recorded, to explain the choice:
    commits per pass c(N), the timed pass t(N) (`time_target_pass`) and the drafting + verification o(N) per pass."""
    budgets = sorted(set(budgets))
    seconds, tokens, passes = dict.fromkeys(budgets, 0.0), dict.fromkeys(budgets, 0), dict.fromkeys(budgets, 0)
    stages = {n: Counter() for n in budgets}
    settings = dict(width=width, branch=branch, block_size=block_size, temperature=temperature,
                    max_new_tokens=max_new_tokens, eos_id=None)
    generate(target, prompts[:1], "spot", drafter=drafter, budget=max(budgets), **{**settings, "max_new_tokens":
                                                                                   block_size})  # warm-up
    for i, prompt in enumerate(prompts):
        for n in budgets:
            t0 = time.perf_counter()
            out = generate(target, [prompt], "spot", drafter=drafter, budget=n, rows=[i], **settings)
            seconds[n] += time.perf_counter() - t0
            tokens[n] += out.stats.generated_tokens
            passes[n] += out.stats.target_passes
            stages[n].update(out.stats.stage_seconds)
    rate = {n: tokens[n] / seconds[n] for n in budgets}
    commits = {n: tokens[n] / passes[n] for n in budgets}
    pass_seconds = {n: time_target_pass(target, block_size, n) for n in budgets}
    overhead = {n: (stages[n]["draft"] + stages[n]["verify"]) / passes[n] for n in budgets}
    for n in budgets:
        log(f"budget {n:>3}: {rate[n]:7.1f} tokens/s  commits/pass {commits[n]:.3f}  pass {pass_seconds[n] * 1e3:7.2f}"
            f" ms  drafting + verification {overhead[n] * 1e3:6.2f} ms/pass")
    best = max(rate, key=lambda n: (rate[n], -n))
    return {"budget": best, "tokens_per_second": rate, "commits_per_pass": commits, "pass_seconds": pass_seconds,
            "overhead_seconds": overhead, "predicted_commits_per_second": predicted_rate(commits, pass_seconds,
                                                                                            overhead),
            "prompts": len(prompts), "max_new_tokens": max_new_tokens, "width": width, "branch": branch}


def save_tuning(result: dict, device, block_size: int, path, temperature: float = 0.0) -> None:
    """Add this device, block size and temperature's result to the budgets table at `path` (written atomically).
    An entry of the older format (no temperature) for this block size is replaced."""
    path = Path(path)
    table = json.loads(path.read_text()) if path.is_file() else {}
    per_block = table.setdefault(device_key(device), {})
    entry = per_block.get(str(block_size))
    if not entry or "temperature" not in entry:
        entry = per_block[str(block_size)] = {"temperature": {}}
    entry["temperature"][temperature_key(temperature)] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
