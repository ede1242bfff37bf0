"""Commit rule reference (docs/ops.md, "Commit rules"): rank the eligible positions, count the leading ranks that
pass their threshold, commit the first min(max(quota, passing), n)."""

from __future__ import annotations

import math

import torch


def commit_rule(confidence: torch.Tensor, masked: torch.Tensor, steps: torch.Tensor, quota: torch.Tensor,
                thresholds: torch.Tensor, inclusive: bool) -> torch.Tensor:
    """Reference for spot::commit_rule. Arguments are validated by the router; see docs/ops.md."""
    block = confidence.shape[-1]
    eligible = masked & ~confidence.isnan()
    key = torch.where(eligible, confidence, -math.inf)
    by_value = torch.sort(key, dim=-1, descending=True, stable=True).indices  # ties: the lower position first
    # then the eligible positions first (stable), so that an eligible -inf ranks before every ineligible position
    first_eligible = torch.sort(eligible.gather(-1, by_value).to(torch.uint8), dim=-1, descending=True, stable=True)
    order = by_value.gather(-1, first_eligible.indices)
    values = confidence.gather(-1, order)
    n = eligible.sum(-1)
    # the thresholds as the confidence's dtype holds them (PyTorch's comparison with a Python float)
    tau = thresholds.to(confidence.dtype)[n]  # [..., B], per rank
    passes = values >= tau if inclusive else values > tau
    rank = torch.arange(block, device=confidence.device)
    passes = passes & (rank < n[..., None])
    passing = passes.long().cumprod(-1).sum(-1)
    q = quota[steps.clamp_max(quota.shape[0] - 1), n]
    m = torch.minimum(torch.maximum(q, passing), n)
    first = rank < m[..., None]  # by rank; back to positions
    return torch.zeros_like(eligible).scatter(-1, order, first) & eligible


# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {"commit_rule": commit_rule}
