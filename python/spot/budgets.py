"""How big a draft tree should be: the measured cost model, per device and block size.

A pass over N nodes yields on average c(N) commits (c grows with N and saturates) and costs t(N) seconds of target
time plus o(N) of drafting and verification. Decoding speed is c(N) / (t(N) + o(N)) commits per second, so the
best budget is where a bigger tree stops paying for itself: on a GPU t(N) is nearly flat up to tens of nodes, on a
CPU it grows about linearly, and the two choose very different budgets. `spot build tune` measures t, c and o on
the device at hand (spot.build.tune); `default_budget` reads the winner back from budgets.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

BUDGETS_FILE = Path(__file__).parent / "weights" / "budgets.json"
FALLBACK_BUDGET = 16  # when nothing was measured for this device and block size


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


def device_key(device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return "cuda:" + torch.cuda.get_device_name(device).replace(" ", "_")
    return device.type


def default_budget(device, block_size: int, path=BUDGETS_FILE) -> int:
    """The budget `spot build tune` chose for this device and block size (FALLBACK_BUDGET when never measured)."""
    try:
        table = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return FALLBACK_BUDGET
    entry = table.get(device_key(device), {}).get(str(block_size))
    return int(entry["budget"]) if entry else FALLBACK_BUDGET
