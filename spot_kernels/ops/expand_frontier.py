"""spot::expand_frontier: one depth of a static draft tree in one op (docs/ops.md, "Frontier expansion"); schema,
wrapper, check and fake.

A depth of `spot.tree._grow_static` is spot::select_children on every frontier node plus its glue: the children's
block states, -inf for a child without a token, and the next frontier (each row's `width` most probable children).
Eagerly that glue is about 20 dispatched ops per depth; this op is one.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .. import checks
from ..opdef import OpDef, call
from .select_children import check_child_token_values

SCHEMA = ('expand_frontier(Tensor position_logits, Tensor states, Tensor path_logprob, Tensor stale_topk_probs, '
          'Tensor stale_topk_ids, int seed, Tensor rows, Tensor block_start, Tensor steps, float temperature, '
          'int mask_id, int branch, int width, str backend="auto") -> (Tensor child_pos, Tensor child_logprob, '
          'Tensor child_tokens, Tensor child_states, Tensor frontier, Tensor frontier_states, '
          'Tensor frontier_logprob)')


class Expansion(NamedTuple):
    child_pos: torch.Tensor  # [b, w * branch] int64
    child_logprob: torch.Tensor  # [b, w * branch], dtype of position_logits
    child_tokens: torch.Tensor  # [b, w * branch] int64
    child_states: torch.Tensor  # [b, w * branch, B] int64
    frontier: torch.Tensor  # [b, W] int64, W = min(width, w * branch)
    frontier_states: torch.Tensor  # [b * W, B] int64 (flat, as the next call takes it)
    frontier_logprob: torch.Tensor  # [b * W]


def expand_frontier(
    position_logits: torch.Tensor,
    states: torch.Tensor,
    path_logprob: torch.Tensor,
    stale_topk_probs: torch.Tensor,
    stale_topk_ids: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
    mask_id: int,
    branch: int,
    width: int,
    backend: str = "auto",
) -> Expansion:
    """Expand the w frontier nodes of each of b rows into their children and pick the next frontier.

    The frontier is flat, F = b * w nodes row by row (b = rows.shape[0]), as the drafter takes it.

    Args:
        position_logits: [F, B] float32/float64, the drafter's logits of each frontier node (as select_children).
        states: [F, B] int64, each frontier node's block state; its masked positions are those == mask_id.
        path_logprob: [F], position_logits' dtype, each frontier node's path log-probability (-inf: no node).
        stale_topk_probs: [b, B, K] float32/float64, per row (shared by the row's frontier nodes).
        stale_topk_ids: [b, B, K] int64, -1 for padding.
        seed: int in [0, 2^63).
        rows, block_start, steps: [b] int64, each row's noise row, block start and the frontier's step (every
            frontier node of a row is at the same depth, so at the same step; its children commit at it).
        temperature: finite float >= 0.
        mask_id: the mask token id.
        branch: children per frontier node, 1 <= branch <= 65536 (select_children's k).
        width: the next frontier's nodes per row, >= 1 (capped at w * branch).
    Returns:
        Expansion(child_pos, child_logprob, child_tokens [b, w * branch]: select_children's outputs row by row
        (frontier node, then child), the log-probability -inf where the child has no token; child_states
        [b, w * branch, B]: the frontier node's state with the child's token (clamped to >= 0) at its position, the
        node's own state where the child has no position; frontier [b, W], W = min(width, w * branch): the indices
        of each row's W most probable children, descending, ties to the lower index (a stable sort);
        frontier_states [b * W, B] and frontier_logprob [b * W]: theirs, flat: the next call's frontier).
    """
    return Expansion(*call("expand_frontier", position_logits, states, path_logprob, stale_topk_probs,
                           stale_topk_ids, seed, rows, block_start, steps, temperature, mask_id, branch, width,
                           backend))


def check(position_logits, states, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows, block_start, steps,
          temperature, mask_id, branch, width, *, values: bool, op: str = "expand_frontier") -> torch.device:
    checks.tensor(op, "position_logits", position_logits, checks.F32_64, ndim=2)
    frontier, block = position_logits.shape
    checks.tensor(op, "rows", rows, checks.I64, ndim=1)
    n_rows = rows.shape[0]
    if (frontier % n_rows if n_rows else frontier):
        raise ValueError(f"spot.{op}: position_logits must hold w frontier nodes per row, F = b * w with b = "
                         f"{n_rows} (rows.shape[0]), got F = {frontier}")
    w = frontier // n_rows if n_rows else 0
    checks.tensor(op, "states", states, checks.I64)
    checks.shape(op, "states", states, (frontier, block), "position_logits.shape")
    checks.tensor(op, "path_logprob", path_logprob, (position_logits.dtype,))
    checks.shape(op, "path_logprob", path_logprob, (frontier,), "[F] from position_logits")
    checks.tensor(op, "stale_topk_probs", stale_topk_probs, checks.F32_64, ndim=3)
    if tuple(stale_topk_probs.shape[:2]) != (n_rows, block):
        raise ValueError(
            f"spot.{op}: stale_topk_probs must have shape [b, B, K] = [{n_rows}, {block}, K] "
            f"(b from rows, B from position_logits), got {list(stale_topk_probs.shape)}"
        )
    checks.tensor(op, "stale_topk_ids", stale_topk_ids, checks.I64)
    checks.shape(op, "stale_topk_ids", stale_topk_ids, tuple(stale_topk_probs.shape), "stale_topk_probs.shape")
    for name, t in (("block_start", block_start), ("steps", steps)):
        checks.tensor(op, name, t, checks.I64)
        checks.shape(op, name, t, (n_rows,), "[b] from rows")
    checks.seed(op, seed)
    checks.temperature(op, temperature)
    checks.integer(op, "mask_id", mask_id)
    checks.integer(op, "branch", branch, 1, checks.MAX_K + 1)
    checks.integer(op, "width", width, 1)
    checks.size(f"spot.{op}: b = {n_rows} rows x w = {w} frontier nodes x branch = {branch} children x B = {block} "
                "positions give child states of", 8 * n_rows * w * branch * block)
    device = checks.same_device(op, position_logits=position_logits, states=states, path_logprob=path_logprob,
                                stale_topk_probs=stale_topk_probs, stale_topk_ids=stale_topk_ids, rows=rows,
                                block_start=block_start, steps=steps)
    checks.footprint(op, 0, position_logits=position_logits, states=states, path_logprob=path_logprob,
                     stale_topk_probs=stale_topk_probs, stale_topk_ids=stale_topk_ids, rows=rows,
                     block_start=block_start, steps=steps)
    if values and checks.values_enabled(device):
        check_child_token_values(op, stale_topk_ids, steps, block_start)
    return device


def fake(position_logits, states, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows, block_start, steps,
         temperature, mask_id, branch, width, backend="auto"):
    check(position_logits, states, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows, block_start, steps,
          temperature, mask_id, branch, width, values=False)
    frontier, block = position_logits.shape
    n_rows = rows.shape[0]
    w = frontier // n_rows if n_rows else 0
    n, kept = w * branch, min(width, w * branch)
    return (
        states.new_empty((n_rows, n)),
        position_logits.new_empty((n_rows, n)),
        states.new_empty((n_rows, n)),
        states.new_empty((n_rows, n, block)),
        states.new_empty((n_rows, kept)),
        states.new_empty((n_rows * kept, block)),
        position_logits.new_empty((n_rows * kept,)),
    )


STEPS_SCHEMA = ('expand_steps(Tensor position_logits, Tensor states, Tensor path_logprob, Tensor size_logprob, '
                'Tensor stale_topk_probs, Tensor stale_topk_ids, int seed, Tensor rows, Tensor block_start, '
                'Tensor steps, float temperature, int mask_id, int branch, int width, str backend="auto") -> '
                '(Tensor child_logprob, Tensor child_states, Tensor frontier, Tensor frontier_states, '
                'Tensor frontier_logprob)')


class StepExpansion(NamedTuple):
    child_logprob: torch.Tensor  # [b, w * branch], dtype of position_logits
    child_states: torch.Tensor  # [b, w * branch, B] int64
    frontier: torch.Tensor  # [b, W] int64, W = min(width, w * branch)
    frontier_states: torch.Tensor  # [b * W, B] int64 (flat, as the next call takes it)
    frontier_logprob: torch.Tensor  # [b * W]


def expand_steps(
    position_logits: torch.Tensor,
    states: torch.Tensor,
    path_logprob: torch.Tensor,
    size_logprob: torch.Tensor,
    stale_topk_probs: torch.Tensor,
    stale_topk_ids: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
    mask_id: int,
    branch: int,
    width: int,
    backend: str = "auto",
) -> StepExpansion:
    """expand_frontier for a commit rule's whole steps: each child of a frontier node is the node after one step
    that commits a set of positions (docs/ops.md, "Frontier expansion").

    Args: as expand_frontier's, plus
        size_logprob: [F, B + 1], position_logits' dtype: log P(the step commits m positions), m = 0..B, for each
            frontier node (-inf: impossible).
    A frontier node's eligible positions (masked, logit not -inf; NaN counts as -inf, +inf as the dtype's largest
    value / 4) are ranked by logit, descending, ties to the lower position. Its candidate sets, for every size m
    with size_logprob > -inf, are the first m ranks (log-probability: the Plackett-Luce probability of drawing
    those ranks in order), and that set with rank m - 1 swapped for rank m, m + 1, ..., m + 4, or rank m - 2 for
    rank m or m + 1 (the prefix's log-probability plus the logit gap: that of the rank swapped in minus that of the
    rank swapped out, a swap of tied logits scoring exactly the prefix);
    a candidate's path log-probability is path_logprob + size_logprob[m] + that, -inf unless its ranks exist and
    every position in it has a token (select_children's token, drawn at the row's step). The node's children are
    its `branch` most probable candidates (ties: the smaller size, then the order above), padded with -inf.
    Returns:
        StepExpansion(child_logprob [b, w * branch], child_states [b, w * branch, B]: the node's state with each
        set's tokens written in (a padding child: the node's state), frontier [b, W], frontier_states [b * W, B],
        frontier_logprob [b * W]: as expand_frontier's).
    """
    return StepExpansion(*call("expand_steps", position_logits, states, path_logprob, size_logprob, stale_topk_probs,
                               stale_topk_ids, seed, rows, block_start, steps, temperature, mask_id, branch, width,
                               backend))


def check_steps(position_logits, states, path_logprob, size_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
                block_start, steps, temperature, mask_id, branch, width, *, values: bool) -> torch.device:
    device = check(position_logits, states, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows, block_start,
                   steps, temperature, mask_id, branch, width, values=values, op="expand_steps")
    checks.tensor("expand_steps", "size_logprob", size_logprob, (position_logits.dtype,))
    frontier, block = position_logits.shape
    checks.shape("expand_steps", "size_logprob", size_logprob, (frontier, block + 1), "[F, B + 1] from position_logits")
    checks.same_device("expand_steps", position_logits=position_logits, size_logprob=size_logprob)
    return device


def fake_steps(position_logits, states, path_logprob, size_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
               block_start, steps, temperature, mask_id, branch, width, backend="auto"):
    check_steps(position_logits, states, path_logprob, size_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
                block_start, steps, temperature, mask_id, branch, width, values=False)
    frontier, block = position_logits.shape
    n_rows = rows.shape[0]
    w = frontier // n_rows if n_rows else 0
    n, kept = w * branch, min(width, w * branch)
    return (position_logits.new_empty((n_rows, n)), states.new_empty((n_rows, n, block)),
            states.new_empty((n_rows, kept)), states.new_empty((n_rows * kept, block)),
            position_logits.new_empty((n_rows * kept,)))


OPS = [OpDef(SCHEMA, check, fake), OpDef(STEPS_SCHEMA, check_steps, fake_steps)]
