"""How big a draft tree should be: a measured cost model, per device and block size.

A pass over N nodes yields on average c(N) commits (c grows with N and saturates) and costs t(N) seconds of target
time plus o(N) of drafting and verification. Decoding speed is c(N) / (t(N) + o(N)) commits per second, so the
best budget is where a bigger tree stops paying for itself: on a GPU t(N) is nearly flat up to tens of nodes, on a
CPU it grows about linearly, and the two choose very different budgets. `spot tune` measures t, c and o on
the device at hand and writes the winner to budgets.json; `default_budget` reads it back.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from .bench import decode_all

BUDGETS_FILE = Path(__file__).parent / "weights" / "budgets.json"
FALLBACK_BUDGET = 16  # when nothing was measured for this device and block size


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


def predicted_rate(commits_per_pass: dict[int, float], pass_seconds: dict[int, float],
                   overhead_seconds: dict[int, float] | None = None) -> dict[int, float]:
    """Commits per second for every budget measured in both tables."""
    overhead_seconds = overhead_seconds or {}
    return {n: commits_per_pass[n] / (pass_seconds[n] + overhead_seconds.get(n, 0.0))
            for n in sorted(commits_per_pass) if n in pass_seconds}


def choose_budget(commits_per_pass, pass_seconds, overhead_seconds=None) -> int:
    rate = predicted_rate(commits_per_pass, pass_seconds, overhead_seconds)
    if not rate:
        raise ValueError("choose_budget: no budget was measured in both tables")
    return max(rate, key=lambda n: (rate[n], -n))  # ties: the smaller tree


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


def device_key(device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return "cuda:" + torch.cuda.get_device_name(device).replace(" ", "_")
    return device.type


def default_budget(device, block_size: int, path=BUDGETS_FILE) -> int:
    """The budget `spot tune` chose for this device and block size (FALLBACK_BUDGET when never measured)."""
    try:
        table = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return FALLBACK_BUDGET
    entry = table.get(device_key(device), {}).get(str(block_size))
    return int(entry["budget"]) if entry else FALLBACK_BUDGET


def save_tuning(result: dict, device, block_size: int, path=BUDGETS_FILE) -> None:
    path = Path(path)
    table = json.loads(path.read_text()) if path.is_file() else {}
    table.setdefault(device_key(device), {})[str(block_size)] = result
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
