"""`spot build tune`: measure the cost model of spot.budgets (c(N), t(N), o(N)) and store the best tree budget."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import torch

from ..bench import decode_all
from ..budgets import choose_budget, device_key, predicted_rate



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


def tune(target, drafter, prompts, *, block_size: int, budgets=(1, 2, 4, 8, 16, 32), max_new_tokens: int = 64,
         temperature: float = 0.0, width: int = 4, branch: int = 4, log=print) -> dict:
    """Measure c(N), t(N) and o(N) with `spot` decoding of `prompts`; return the table and the chosen budget."""
    pass_seconds, commits, overhead = {}, {}, {}
    for n in budgets:
        pass_seconds[n] = time_target_pass(target, block_size, n)
        # one prompt at a time (batch_size 1): a batch advances in lock-step with its slowest row
        run = decode_all(target, prompts, "spot" if n > 1 else "standard", drafter=drafter, budget=n, width=width,
                         branch=branch, block_size=block_size, temperature=temperature,
                         max_new_tokens=max_new_tokens, eos_id=None)
        commits[n] = run["generated_tokens"] / run["target_passes"]
        overhead[n] = (run["stage_seconds"]["draft"] + run["stage_seconds"]["verify"]) / run["target_passes"]
        log(f"budget {n:>3}: pass {pass_seconds[n] * 1e3:8.2f} ms  overhead {overhead[n] * 1e3:7.2f} ms  "
            f"commits/pass {commits[n]:.3f}")
    best = choose_budget(commits, pass_seconds, overhead)
    return {"budget": best, "commits_per_pass": commits, "pass_seconds": pass_seconds,
            "overhead_seconds": overhead, "predicted_commits_per_second": predicted_rate(commits, pass_seconds,
                                                                                            overhead)}


def save_tuning(result: dict, device, block_size: int, path) -> None:
    """Add this device and block size's result to the budgets table at `path` (written atomically)."""
    path = Path(path)
    table = json.loads(path.read_text()) if path.is_file() else {}
    table.setdefault(device_key(device), {})[str(block_size)] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
