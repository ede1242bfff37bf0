"""spot::commit_rule: which masked positions one step of a commit rule commits (docs/ops.md, "Commit rules");
schema, wrapper, check and fake.

The rule is data (spot.rules.RuleTables): a quota table and a threshold table. Every rule commits the m most
confident eligible positions of a node, m = min(max(quota[step, n], passing), n), so one kernel serves one commit
per step, k per step, thresholds, LLaDA2's threshold with a quota, Fast-dLLM's factor rule and Dream's schedule.
"""

from __future__ import annotations

import torch

from .. import checks
from ..opdef import OpDef, call

SCHEMA = ('commit_rule(Tensor confidence, Tensor masked, Tensor steps, Tensor quota, Tensor thresholds, '
          'bool inclusive, str backend="auto") -> Tensor')


def commit_rule(
    confidence: torch.Tensor,
    masked: torch.Tensor,
    steps: torch.Tensor,
    quota: torch.Tensor,
    thresholds: torch.Tensor,
    inclusive: bool,
    backend: str = "auto",
) -> torch.Tensor:
    """The positions one rule step commits at each node, from the node's scored confidences.

    Args:
        confidence: [..., B] float32/float64, `score`'s confidence of each position (NaN: no valid token).
        masked: [..., B] bool, the node's masked positions.
        steps: [...] int64 >= 0, the node's step index in its block (the rule's step, not its commits).
        quota: [S, B + 1] int64 >= 0, S >= 1: quota[min(step, S - 1), n] is the step's count for a node with n
            eligible positions.
        thresholds: [B + 1, B] float64: thresholds[n, r], the threshold of rank r for a node with n eligible
            positions (+inf: no rank passes), compared in confidence's dtype.
        inclusive: a rank passes with confidence >= its threshold (else >).
    Returns:
        bool [..., B]: the committed positions. A position is eligible when masked and its confidence is not NaN;
        eligible positions are ranked by confidence, descending, ties to the lower position; `passing` is the
        number of leading ranks that all pass their threshold; the first min(max(quota, passing), n) ranks commit.
    """
    return call("commit_rule", confidence, masked, steps, quota, thresholds, inclusive, backend)


def check(confidence, masked, steps, quota, thresholds, inclusive, *, values: bool) -> torch.device:
    op = "commit_rule"
    checks.tensor(op, "confidence", confidence, checks.F32_64, min_ndim=1)
    block = confidence.shape[-1]
    lead = tuple(confidence.shape[:-1])
    checks.tensor(op, "masked", masked, checks.BOOL)
    checks.shape(op, "masked", masked, confidence.shape, "confidence.shape")
    checks.tensor(op, "steps", steps, checks.I64)
    checks.shape(op, "steps", steps, lead, "confidence.shape[:-1]")
    checks.tensor(op, "quota", quota, checks.I64, ndim=2)
    if quota.shape[0] < 1 or quota.shape[1] != block + 1:
        raise ValueError(f"spot.{op}: quota must have shape [S, B + 1] with S >= 1 and B = {block} (from "
                         f"confidence), got {list(quota.shape)}")
    checks.tensor(op, "thresholds", thresholds, (torch.float64,))
    checks.shape(op, "thresholds", thresholds, (block + 1, block), "[B + 1, B] from confidence")
    if not isinstance(inclusive, bool):
        raise TypeError(f"spot.{op}: inclusive must be a bool, got {type(inclusive).__name__}")
    device = checks.same_device(op, confidence=confidence, masked=masked, steps=steps, quota=quota,
                                thresholds=thresholds)
    if values and checks.values_enabled(device):
        checks.at_least(op, "steps", steps, 0)
        checks.at_least(op, "quota", quota, 0)
        if bool(thresholds.isnan().any()):
            raise ValueError(f"spot.{op}: thresholds must not be NaN; got NaN {checks.first_bad(thresholds.isnan())}")
    return device


def fake(confidence, masked, steps, quota, thresholds, inclusive, backend="auto"):
    check(confidence, masked, steps, quota, thresholds, inclusive, values=False)
    return masked.new_empty(masked.shape)


OPS = [OpDef(SCHEMA, check, fake)]
