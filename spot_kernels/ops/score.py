"""spot::score: fused scoring of block states (docs/ops.md, "Fused scoring"); schema, wrapper, check and fake."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .. import checks
from ..contract import compute_dtype
from ..opdef import OpDef, call

# The confidence kinds, in the order of the kernels' codes (0, 1, 2, 3). The one definition: import it from
# spot_kernels (`from spot_kernels import CONFIDENCE_KINDS`).
CONFIDENCE_KINDS = ("prob", "raw_prob", "margin", "neg_entropy")

SCHEMA = ('score(Tensor logits, Tensor masked, int seed, Tensor rows, Tensor block_start, Tensor steps, '
          'float temperature, str confidence="prob", int top_k=32, str backend="auto") -> '
          '(Tensor tokens, Tensor confidence, Tensor topk_probs, Tensor topk_ids, Tensor commit_pos)')


class ScoreOutput(NamedTuple):
    tokens: torch.Tensor  # [..., B] int64
    confidence: torch.Tensor  # [..., B] float32 (float64 for float64 logits)
    topk_probs: torch.Tensor  # [..., B, K] float32 / float64
    topk_ids: torch.Tensor  # [..., B, K] int64
    commit_pos: torch.Tensor  # [...] int64


def score(
    logits: torch.Tensor,
    masked: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
    confidence: str = "prob",
    top_k: int = 32,
    backend: str = "auto",
) -> ScoreOutput:
    """Fused scoring of block states: coupled Gumbel-max tokens, confidences, top-K and the next commit.

    Args:
        logits: [..., B, V] float16/bfloat16/float32/float64, V >= 1. Computed in float64 for float64 logits,
            else float32, as x = logits / temperature (T = 0: x = logits).
        masked: [..., B] bool, True where the position is still masked.
        seed: int in [0, 2^63).
        rows: [...] int64, noise row id of the sequence each node belongs to.
        block_start: [...] int64 >= 0, absolute position of block position 0.
        steps: [...] int64 >= 0, commits already made inside the block (depth d under a root with k commits:
            k + d).
        temperature: finite float >= 0; 0 means greedy (argmax, ties lowest id).
        confidence: one of CONFIDENCE_KINDS: "prob" | "raw_prob" | "margin" | "neg_entropy".
        top_k: 1 <= K <= 65536 (checks.MAX_K); when K > V the tail is padded with probability 0 and id -1.
        backend: see spot_kernels.ops.
    Returns:
        ScoreOutput(tokens [..., B] int64, confidence [..., B] cdtype, topk_probs [..., B, K] cdtype,
        topk_ids [..., B, K] int64, commit_pos [...] int64). Rows with NaN or +inf, or all -inf, give token -1,
        confidence NaN, top-K (0, -1) and are never committed; commit_pos is -1 when nothing can be committed.
    """
    return ScoreOutput(*call("score", logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k,
                             backend))


def check(logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k, *,
          values: bool) -> torch.device:
    op = "score"
    checks.tensor(op, "logits", logits, checks.FLOAT_DTYPES, min_ndim=2)
    if logits.shape[-1] < 1:
        raise ValueError(f"spot.{op}: logits must have a vocabulary dimension V >= 1, got shape {list(logits.shape)}")
    lead = tuple(logits.shape[:-2])
    checks.tensor(op, "masked", masked, checks.BOOL)
    checks.shape(op, "masked", masked, tuple(logits.shape[:-1]), "logits.shape[:-1]")
    for name, t in (("rows", rows), ("block_start", block_start), ("steps", steps)):
        checks.tensor(op, name, t, checks.I64)
        checks.shape(op, name, t, lead, "logits.shape[:-2]; use .expand() to broadcast")
    checks.seed(op, seed)
    checks.temperature(op, temperature)
    checks.choice(op, "confidence", confidence, CONFIDENCE_KINDS)
    checks.integer(op, "top_k", top_k, 1, checks.MAX_K + 1)
    device = checks.same_device(op, logits=logits, masked=masked, rows=rows, block_start=block_start, steps=steps)
    positions, c = math.prod(logits.shape[:-1]), 8 if logits.dtype == torch.float64 else 4
    checks.footprint(op, positions * (8 + c + top_k * (c + 8)) + 8 * math.prod(lead), logits=logits, masked=masked,
                     rows=rows, block_start=block_start, steps=steps)
    if values and checks.values_enabled(device):
        checks.at_least(op, "steps", steps, 0, "commits already made inside the block")
        checks.at_least(op, "block_start", block_start, 0, "an absolute position")
    return device


def fake(logits, masked, seed, rows, block_start, steps, temperature, confidence="prob", top_k=32, backend="auto"):
    check(logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k, values=False)
    lead_b = logits.shape[:-1]
    cdtype = compute_dtype(logits.dtype)
    return (
        logits.new_empty(lead_b, dtype=torch.int64),
        logits.new_empty(lead_b, dtype=cdtype),
        logits.new_empty((*lead_b, top_k), dtype=cdtype),
        logits.new_empty((*lead_b, top_k), dtype=torch.int64),
        logits.new_empty(logits.shape[:-2], dtype=torch.int64),
    )


OPS = [OpDef(SCHEMA, check, fake)]
