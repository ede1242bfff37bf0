"""Frontier expansion reference (docs/ops.md, "Frontier expansion"): the reference select_children on every
frontier node, then the glue of one static tree depth (spot.tree._grow_static) in plain PyTorch."""

from __future__ import annotations

import math

import torch

from .select_children import select_children


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
) -> tuple[torch.Tensor, ...]:
    """Reference for spot::expand_frontier. Arguments are validated by the router; see docs/ops.md."""
    b, (frontier, block) = rows.shape[0], states.shape
    w = frontier // b if b else 0
    n = w * branch
    node_row = torch.arange(b, device=states.device).repeat_interleave(w)  # frontier node -> its row
    c_pos, c_logprob, c_tok = select_children(
        position_logits, states == mask_id, path_logprob, stale_topk_probs[node_row], stale_topk_ids[node_row], seed,
        rows[node_row], block_start[node_row], steps[node_row], temperature, branch)
    c_logprob = torch.where(c_tok < 0, -math.inf, c_logprob).view(b, n)  # no token: no child
    # each child: its frontier node's state with one more commit (a child without a token is never kept, but the
    # target may read it as a padding slot: clamp_min keeps its token id valid)
    j = torch.arange(block, device=states.device)
    c_states = torch.where(c_pos[..., None] == j, c_tok.clamp_min(0)[..., None], states[:, None])
    c_states = c_states.view(b, n, block)
    order = torch.sort(c_logprob, dim=1, descending=True, stable=True).indices[:, :width]  # ties: the lower index
    f_states = c_states.gather(1, order[..., None].expand(b, order.shape[1], block))
    kept = order.shape[1]
    return (c_pos.view(b, n), c_logprob, c_tok.view(b, n), c_states, order, f_states.view(b * kept, block),
            c_logprob.gather(1, order).view(b * kept))


# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {"expand_frontier": expand_frontier}
