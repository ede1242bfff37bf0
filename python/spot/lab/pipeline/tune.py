"""`spot build tune`: decode with every candidate tree budget, store the fastest per device, block size and
temperature (spot.budgets)."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from pathlib import Path

import torch

from ...budgets import device_key, predicted_rate, temperature_key
from ...decode import generate
from ...files import read_json
from ...loading import atomic_write_text, check_output_path
from ...settings import TreeSettings
from ...tree import WIDTH, tree_branch

MIN_GAIN = 0.03  # a tree must beat the root alone by 3% on both clocks to be chosen (`choose_measured`)


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
         temperature: float = 0.0, width: int = WIDTH, branch: int | None = None, min_gain: float = MIN_GAIN,
         log=print) -> dict:
    """Decode `prompts` with `spot` at every budget (budget 1 is the root alone: standard decoding's cost) and
    return the measurements and the chosen budget (`choose_measured`: the highest measured tokens/s, but a tree
    only where it beats the root alone by `min_gain` on both clocks).

    Prompts go one at a time (a batch advances in lock-step with its slowest row), the budgets interleaved per
    prompt, in reverse order every other prompt, so that a shared machine's drift falls on every budget alike.
    Both wall-clock and process CPU seconds are recorded (with one thread, CPU time leaves out the time other
    jobs held the core). Also recorded, to explain the choice: commits per pass c(N), the timed pass t(N)
    (`time_target_pass`) and the drafting + verification o(N) per pass."""
    budgets = sorted(set(budgets))
    branch = tree_branch(drafter, branch)
    seconds, cpu_seconds = dict.fromkeys(budgets, 0.0), dict.fromkeys(budgets, 0.0)
    tokens, passes = dict.fromkeys(budgets, 0), dict.fromkeys(budgets, 0)
    stages = {n: Counter() for n in budgets}
    settings = dict(tree=TreeSettings(width=width, branch=branch), block_size=block_size, temperature=temperature,
                    max_new_tokens=max_new_tokens, eos_id=None)
    generate(target, prompts[:1], "spot", drafter=drafter, budget=max(budgets), **{**settings, "max_new_tokens":
                                                                                   block_size})  # warm-up
    for i, prompt in enumerate(prompts):
        for n in budgets if i % 2 == 0 else budgets[::-1]:
            t0, c0 = time.perf_counter(), time.process_time()
            out = generate(target, [prompt], "spot", drafter=drafter, budget=n, rows=[i], **settings)
            seconds[n] += time.perf_counter() - t0
            cpu_seconds[n] += time.process_time() - c0
            tokens[n] += out.stats.generated_tokens
            passes[n] += out.stats.target_passes
            stages[n].update(out.stats.stage_seconds)
    rate = {n: tokens[n] / seconds[n] for n in budgets}
    cpu_rate = {n: tokens[n] / cpu_seconds[n] for n in budgets}
    commits = {n: tokens[n] / passes[n] for n in budgets}
    pass_seconds = {n: time_target_pass(target, block_size, n) for n in budgets}
    overhead = {n: (stages[n]["draft"] + stages[n]["verify"]) / passes[n] for n in budgets}
    for n in budgets:
        log(f"budget {n:>3}: {rate[n]:7.1f} tokens/s ({cpu_rate[n]:7.1f} per CPU second)  commits/pass "
            f"{commits[n]:.3f}  pass {pass_seconds[n] * 1e3:7.2f} ms  drafting + verification {overhead[n] * 1e3:6.2f}"
            " ms/pass")
    best = choose_measured(rate, cpu_rate, min_gain)
    return {"budget": best, "tokens_per_second": rate, "cpu_tokens_per_second": cpu_rate, "min_gain": min_gain,
            "commits_per_pass": commits, "pass_seconds": pass_seconds,
            "overhead_seconds": overhead, "predicted_commits_per_second": predicted_rate(commits, pass_seconds,
                                                                                            overhead),
            "prompts": len(prompts), "max_new_tokens": max_new_tokens, "width": width, "branch": branch}


def choose_measured(rate: dict[int, float], cpu_rate: dict[int, float] | None = None,
                    min_gain: float = MIN_GAIN) -> int:
    """The budget of the highest measured tokens/s `rate` (ties: the smaller tree). When the root alone (budget 1)
    was measured, a tree must beat it by `min_gain` (a fraction) in `rate` and in `cpu_rate` (tokens per CPU
    second) alike, else budget 1 is chosen: a tree that wins only within a shared machine's noise could make
    decoding slower, which the root alone never does."""
    best = max(rate, key=lambda n: (rate[n], -n))
    if 1 not in rate or best == 1:
        return best
    clocks = [rate] + ([cpu_rate] if cpu_rate else [])
    return best if all(c[best] >= (1 + min_gain) * c[1] for c in clocks) else 1


def save_tuning(result: dict, device, block_size: int, path, temperature: float = 0.0) -> None:
    """Add this device, block size and temperature's result to the budgets table at `path` (written atomically).
    An entry of the older format (no temperature) for this block size is replaced."""
    path = Path(path)
    table = read_json(path) if path.is_file() else {}  # the input-file rule: a JSON object under a cap
    per_block = table.setdefault(device_key(device), {})
    entry = per_block.get(str(block_size))
    if not entry or "temperature" not in entry:
        entry = per_block[str(block_size)] = {"temperature": {}}
    entry["temperature"][temperature_key(temperature)] = result
    check_output_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
