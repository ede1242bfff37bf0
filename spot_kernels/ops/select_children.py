"""spot::select_children: drafted children of frontier nodes (docs/ops.md, "Drafter child selection"); schema,
wrapper, check and fake."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .. import checks
from ..opdef import OpDef, call

SCHEMA = ('select_children(Tensor position_logits, Tensor masked, Tensor path_logprob, Tensor stale_topk_probs, '
          'Tensor stale_topk_ids, int seed, Tensor rows, Tensor block_start, Tensor steps, float temperature, '
          'int k, str backend="auto") -> (Tensor child_pos, Tensor child_logprob, Tensor child_tokens)')


class ChildSelection(NamedTuple):
    child_pos: torch.Tensor  # [F, k] int64
    child_logprob: torch.Tensor  # [F, k] dtype of position_logits
    child_tokens: torch.Tensor  # [F, k] int64


def select_children(
    position_logits: torch.Tensor,
    masked: torch.Tensor,
    path_logprob: torch.Tensor,
    stale_topk_probs: torch.Tensor,
    stale_topk_ids: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
    k: int,
    backend: str = "auto",
) -> ChildSelection:
    """Expand F frontier nodes into their k most likely children (drafted commits).

    Args:
        position_logits: [F, B] float32/float64, the drafter's unnormalised log P(next commit = j). NaN counts as
            -inf; +inf as the largest finite value.
        masked: [F, B] bool, the frontier node's own masked flags.
        path_logprob: [F], same dtype as position_logits, log probability of the path root -> node.
        stale_topk_probs: [F, B, K] float32/float64 (expanded views are fine).
        stale_topk_ids: [F, B, K] int64, -1 for padding.
        seed: int in [0, 2^63).
        rows, block_start, steps: [F] int64; `steps` is the frontier node's step (its children commit at it).
        temperature: finite float >= 0.
        k: children per node, 1 <= k <= 65536 (checks.MAX_K); k beyond the eligible positions is padding.
        backend: see spot_kernels.ops.
    Returns:
        ChildSelection(child_pos [F, k] int64 (masked positions with the largest logits, ties lowest position,
        -1 padding), child_logprob [F, k] (path_logprob + log_softmax over eligible positions; -inf padding),
        child_tokens [F, k] int64 (coupled Gumbel-max over the stale top-K; T = 0: stale_topk_ids[p, 0]; -1
        when none)).
    """
    return ChildSelection(*call("select_children", position_logits, masked, path_logprob, stale_topk_probs,
                                stale_topk_ids, seed, rows, block_start, steps, temperature, k, backend))


def check(position_logits, masked, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows, block_start, steps,
          temperature, k, *, values: bool) -> torch.device:
    op = "select_children"
    checks.tensor(op, "position_logits", position_logits, checks.F32_64, ndim=2)
    frontier, block = position_logits.shape
    checks.tensor(op, "masked", masked, checks.BOOL)
    checks.shape(op, "masked", masked, (frontier, block), "position_logits.shape")
    checks.tensor(op, "path_logprob", path_logprob, (position_logits.dtype,))
    checks.shape(op, "path_logprob", path_logprob, (frontier,), "[F] from position_logits")
    checks.tensor(op, "stale_topk_probs", stale_topk_probs, checks.F32_64, ndim=3)
    if tuple(stale_topk_probs.shape[:2]) != (frontier, block):
        raise ValueError(
            f"spot.{op}: stale_topk_probs must have shape [F, B, K] = [{frontier}, {block}, K] "
            f"(F, B from position_logits), got {list(stale_topk_probs.shape)}"
        )
    checks.tensor(op, "stale_topk_ids", stale_topk_ids, checks.I64)
    checks.shape(op, "stale_topk_ids", stale_topk_ids, tuple(stale_topk_probs.shape), "stale_topk_probs.shape")
    for name, t in (("rows", rows), ("block_start", block_start), ("steps", steps)):
        checks.tensor(op, name, t, checks.I64)
        checks.shape(op, name, t, (frontier,), "[F] from position_logits")
    checks.seed(op, seed)
    checks.temperature(op, temperature)
    checks.integer(op, "k", k, 1, checks.MAX_K + 1)
    device = checks.same_device(op, position_logits=position_logits, masked=masked, path_logprob=path_logprob,
                                stale_topk_probs=stale_topk_probs, stale_topk_ids=stale_topk_ids, rows=rows,
                                block_start=block_start, steps=steps)
    checks.footprint(op, frontier * k * (16 + position_logits.element_size()), position_logits=position_logits,
                     masked=masked, path_logprob=path_logprob, stale_topk_probs=stale_topk_probs,
                     stale_topk_ids=stale_topk_ids, rows=rows, block_start=block_start, steps=steps)
    if values and checks.values_enabled(device):
        check_child_token_values(op, stale_topk_ids, steps, block_start)
    return device


def check_child_token_values(op: str, stale_topk_ids, steps, block_start) -> None:
    """The values a drafted child's token is drawn from (its coupled-noise coordinates and the stale top-K ids),
    checked alike by every op that drafts children (select_children, expand_frontier)."""
    checks.at_least(op, "stale_topk_ids", stale_topk_ids, -1, "token ids, -1 for padding")
    checks.at_least(op, "steps", steps, 0, "commits already made inside the block")
    checks.at_least(op, "block_start", block_start, 0, "an absolute position")


def fake(position_logits, masked, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows, block_start, steps,
         temperature, k, backend="auto"):
    check(position_logits, masked, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows, block_start, steps,
          temperature, k, values=False)
    frontier = position_logits.shape[0]
    return (
        position_logits.new_empty((frontier, k), dtype=torch.int64),
        position_logits.new_empty((frontier, k)),
        position_logits.new_empty((frontier, k), dtype=torch.int64),
    )


OPS = [OpDef(SCHEMA, check, fake)]
