"""How big a draft tree should be: the measured choice, per device, block size and temperature.

A pass over N nodes yields on average c(N) commits (c grows with N and saturates) and costs t(N) seconds of target
time plus o(N) of drafting and verification, so decoding runs at about c(N) / (t(N) + o(N)) commits per second:
on a GPU, where a memory-bound pass carries extra nodes nearly free, t(N) is nearly flat up to tens of nodes; on a
CPU a pass's cost grows about linearly with nodes x block tokens, and the two choose very different budgets.
`spot build tune` (spot.lab.pipeline.tune) decodes with every candidate budget, budget 1 (the root alone, standard
decoding's cost) included, and records the one with the highest measured tokens/s; `default_budget` reads it
back from budgets.json.

budgets.json: {device: {block size: {"temperature": {"0": result, "1": result, ...}}}}, one result per measured
temperature, each holding "budget". The older format, {device: {block size: result}} (measured at one
temperature), is still read, for every temperature.
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


def tuned_entry(device, block_size: int, temperature: float = 0.0, path=BUDGETS_FILE) -> dict | None:
    """What `spot build tune` recorded for this device, block size and temperature class (its "budget" and the
    measurements behind it), or None when that class was never measured: T = 0 reads the entry measured at 0,
    T > 0 the one measured at the nearest positive temperature."""
    try:
        table = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    entry = table.get(device_key(device), {}).get(str(block_size))
    if not entry:
        return None
    if "budget" in entry:  # the older format: one measurement for every temperature
        return entry
    measured = {float(t): result for t, result in entry.get("temperature", {}).items()}
    same_class = [t for t in measured if (t > 0) == (temperature > 0)]
    if not same_class:
        return None
    nearest = min(same_class, key=lambda t: (abs(t - temperature), t))
    return measured[nearest]


def default_budget(device, block_size: int, temperature: float = 0.0, path=BUDGETS_FILE) -> int:
    """The budget `spot build tune` chose for this device, block size and temperature class (tuned_entry), or
    FALLBACK_BUDGET when that class was never measured for this device and block size."""
    entry = tuned_entry(device, block_size, temperature, path)
    return FALLBACK_BUDGET if entry is None else int(entry["budget"])


def temperature_key(temperature: float) -> str:
    """How a temperature is written in budgets.json: "0", "1", "0.7"."""
    return f"{float(temperature):g}"
