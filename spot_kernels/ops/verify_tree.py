"""spot::verify_tree: parallel accept/reject of a drafted tree (docs/ops.md, "Parallel verification"); schema,
wrapper, check and fake."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .. import checks
from ..registry import OpDef, call

SCHEMA = ('verify_tree(Tensor parents, Tensor draft_pos, Tensor draft_tokens, Tensor target_pos, '
          'Tensor target_tokens, Tensor block, str backend="auto") -> (Tensor accepted_pos, '
          'Tensor accepted_tokens, Tensor num_accepted, Tensor new_block, Tensor last_node)')


class VerifyOutput(NamedTuple):
    accepted_pos: torch.Tensor  # [b, N] int64
    accepted_tokens: torch.Tensor  # [b, N] int64
    num_accepted: torch.Tensor  # [b] int64
    new_block: torch.Tensor  # [b, B] int64
    last_node: torch.Tensor  # [b] int64


def verify_tree(
    parents: torch.Tensor,
    draft_pos: torch.Tensor,
    draft_tokens: torch.Tensor,
    target_pos: torch.Tensor,
    target_tokens: torch.Tensor,
    block: torch.Tensor,
    backend: str = "auto",
) -> VerifyOutput:
    """Accept the longest drafted chain that matches the target's own commits, on device, without host sync.

    Args:
        parents: [b, N] int64, N >= 1; parents[:, 0] = -1 (root); for i > 0, 0 <= parents[:, i] < i, or -1 for
            an inactive (padding) node.
        draft_pos, draft_tokens: [b, N] int64, the commit that turns the parent's state into node i's state.
        target_pos, target_tokens: [b, N] int64, the target's own commit from node i's state (score's commit_pos
            and its token); -1 = none.
        block: [b, B] int64, the root's block state.
        backend: see spot_kernels.ops.
    Returns:
        VerifyOutput(accepted_pos [b, N], accepted_tokens [b, N] (commits in order, -1 padded),
        num_accepted [b], new_block [b, B] (block with the commits written in), last_node [b] (deepest accepted
        node, ties lowest index)); all int64.
    """
    return VerifyOutput(*call("verify_tree", parents, draft_pos, draft_tokens, target_pos, target_tokens, block,
                              backend))


def check(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, *, values: bool) -> torch.device:
    op = "verify_tree"
    checks.tensor(op, "parents", parents, checks.I64, ndim=2)
    b, n = parents.shape
    if n < 1:
        raise ValueError(f"spot.{op}: parents must have N >= 1 nodes (node 0 is the root), got shape {[b, n]}")
    named = {"draft_pos": draft_pos, "draft_tokens": draft_tokens, "target_pos": target_pos,
             "target_tokens": target_tokens}
    for name, t in named.items():
        checks.tensor(op, name, t, checks.I64)
        checks.shape(op, name, t, (b, n), "parents.shape")
    checks.tensor(op, "block", block, checks.I64, ndim=2)
    if block.shape[0] != b:
        raise ValueError(f"spot.{op}: block must have shape [b, B] with b = {b} (from parents), "
                         f"got {list(block.shape)}")
    device = checks.same_device(op, parents=parents, **named, block=block)
    if values and checks.values_enabled(device):
        width = block.shape[1]
        node = torch.arange(n, device=device).expand(b, n)
        if bool((parents[:, 0] != -1).any()):
            raise ValueError(f"spot.{op}: parents[:, 0] must be -1 (node 0 is the root); "
                             f"got {parents[:, 0].tolist()[:8]}")
        bad = (node > 0) & ((parents < -1) | (parents >= node))
        if bool(bad.any()):
            raise ValueError(f"spot.{op}: parents must satisfy -1 <= parents[:, i] < i (parents precede children); "
                             f"got {parents[bad][0].item()} {checks.first_bad(bad)}")
        child = (node > 0) & (parents >= 0)
        active = child | (node == 0)
        checks.in_range(op, "draft_pos", draft_pos, 0, width, child,
                        "a block position, for every non-root active node")
        checks.at_least(op, "draft_tokens", torch.where(child, draft_tokens, 0), 0, "a token id, for every non-root "
                        "active node")
        checks.in_range(op, "target_pos", target_pos, -1, width, active,
                        "a block position or -1, for every active node")
        checks.at_least(op, "target_tokens", torch.where(active & (target_pos >= 0), target_tokens, 0), 0,
                        "a token id wherever target_pos >= 0")
    return device


def fake(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, backend="auto"):
    check(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, values=False)
    b = parents.shape[0]
    return (
        parents.new_empty(parents.shape),
        parents.new_empty(parents.shape),
        parents.new_empty((b,)),
        block.new_empty(block.shape),
        parents.new_empty((b,)),
    )


OPS = [OpDef(SCHEMA, check, fake)]
