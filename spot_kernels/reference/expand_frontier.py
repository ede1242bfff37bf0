"""Frontier expansion reference (docs/ops.md, "Frontier expansion"): the reference select_children on every
frontier node, then the glue of one static tree depth (spot.tree._grow_static) in plain PyTorch."""

from __future__ import annotations

import math

import torch

from .select_children import _child_tokens, select_children

# The variants of a step's set of m positions that expand_steps scores, for ranks r(0..) of the drafter's logits:
# the first m ranks, then that set with rank m - 1 replaced by rank m, ..., m + 4, or rank m - 2 by rank m or m + 1.
# (rank out, rank in) relative to m; (0, 0): the plain prefix. (Measured against the first five of these on the
# embedded target: docs/rules.md.)
STEP_VARIANTS = ((0, 0), (-1, 0), (-1, 1), (-1, 2), (-1, 3), (-1, 4), (-2, 0), (-2, 1))


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
) -> tuple[torch.Tensor, ...]:
    """Reference for spot::expand_steps. Arguments are validated by the router; see docs/ops.md."""
    b, (frontier, block) = rows.shape[0], states.shape
    w = frontier // b if b else 0
    dev, dtype = states.device, position_logits.dtype
    node_row = torch.arange(b, device=dev).repeat_interleave(w)
    big = torch.finfo(dtype).max / 4  # +inf logits: the largest that log-sum-exp keeps finite
    logits = torch.where(position_logits.isnan(), -math.inf, position_logits).clamp_max(big)
    eligible = (states == mask_id) & (logits > -math.inf)
    ranked = torch.sort(torch.where(eligible, logits, -math.inf), dim=1, descending=True, stable=True)
    lv, order = ranked.values, ranked.indices  # [F, B]
    n_e = eligible.sum(1)  # [F]
    rank = torch.arange(block, device=dev)
    valid_rank = rank < n_e[:, None]
    # Plackett-Luce log-probability of drawing ranks 0, 1, ..., m - 1 in that order: sum of lv[k] - lse(lv[k:])
    suffix = torch.logcumsumexp(torch.where(valid_rank, lv, -math.inf).flip(1), 1).flip(1)
    step_lp = torch.where(valid_rank, lv - suffix, 0.0)
    prefix_lp = torch.cat((step_lp.new_zeros(frontier, 1), step_lp.cumsum(1)), 1)  # [F, B + 1], m = 0..B
    # the token of every eligible position, drawn at the frontier's step
    tok = _child_tokens(stale_topk_probs[node_row], stale_topk_ids[node_row], rank.expand(frontier, block),
                        eligible, seed, rows[node_row], block_start[node_row], steps[node_row], temperature)
    # positions without a token (no stale top-K entry to draw from) cannot be committed by a child
    missing = ((tok.gather(1, order) < 0) & valid_rank).long()  # [F, B], by rank
    missing_prefix = torch.cat((missing.new_zeros(frontier, 1), missing.cumsum(1)), 1)  # [F, B + 1]
    m = torch.arange(block + 1, device=dev)
    last = max(block - 1, 0)
    cand_lp, cand_out, cand_in = [], [], []
    for out_off, in_off in STEP_VARIANTS:
        if out_off == 0:  # the first m ranks
            ok = (m[None] <= n_e[:, None]) & (missing_prefix == 0)
            lp = prefix_lp
            r_out = r_in = torch.full_like(m, -1)
        else:  # rank r_out swapped for rank r_in (r_in >= m): the prefix's log-probability + their logit gap
            r_out, r_in = m + out_off, m + in_off
            at_out, at_in = r_out.clamp(0, last).expand(frontier, -1), r_in.clamp(0, last).expand(frontier, -1)
            ok = (r_out[None] >= 0) & (r_in[None] < n_e[:, None])
            if block:
                ok = ok & (missing_prefix - missing.gather(1, at_out) + missing.gather(1, at_in) == 0)
                # the gap first: the same two logits give the same gap on every backend, and a swap of tied logits
                # scores exactly the prefix (a tie, to the lower index) whatever the prefix's last bits
                lp = prefix_lp + (lv.gather(1, at_in) - lv.gather(1, at_out))
            else:
                lp = prefix_lp
        cand_lp.append(torch.where(ok & (size_logprob > -math.inf), path_logprob[:, None] + size_logprob + lp,
                                   -math.inf))
        cand_out.append(r_out)
        cand_in.append(r_in)
    # candidates size-major, then variant: index m * V + v
    n_var = len(STEP_VARIANTS)
    cand_lp = torch.stack(cand_lp, 2).reshape(frontier, (block + 1) * n_var)  # (not -1: F may be 0)
    cand_m = m.repeat_interleave(n_var)
    cand_out = torch.stack(cand_out, 1).reshape(-1)
    cand_in = torch.stack(cand_in, 1).reshape(-1)
    pick = torch.sort(cand_lp, dim=1, descending=True, stable=True).indices[:, :branch]  # [F, <= branch]
    c_logprob = cand_lp.gather(1, pick)
    # each child's set, by rank: ranks < m, minus r_out, plus r_in
    pm, po, pi = cand_m[pick], cand_out[pick], cand_in[pick]
    in_set = (rank < pm[..., None]) & (rank != po[..., None]) | (rank == pi[..., None])  # [F, k, B] by rank
    in_set = in_set & (c_logprob > -math.inf)[..., None]
    by_pos = torch.zeros_like(in_set).scatter(2, order[:, None].expand_as(in_set), in_set)
    c_states = torch.where(by_pos, tok.clamp_min(0)[:, None], states[:, None])
    if pick.shape[1] < branch:  # fewer candidates than children asked for: pad
        pad = branch - pick.shape[1]
        c_logprob = torch.cat((c_logprob, c_logprob.new_full((frontier, pad), -math.inf)), 1)
        c_states = torch.cat((c_states, states[:, None].expand(frontier, pad, block)), 1)
    n = w * branch
    c_logprob = c_logprob.reshape(b, n)
    c_states = c_states.reshape(b, n, block)
    order_f = torch.sort(c_logprob, dim=1, descending=True, stable=True).indices[:, :width]
    f_states = c_states.gather(1, order_f[..., None].expand(b, order_f.shape[1], block))
    kept = order_f.shape[1]
    return (c_logprob.contiguous(), c_states.contiguous(), order_f, f_states.reshape(b * kept, block),
            c_logprob.gather(1, order_f).reshape(b * kept))


# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {"expand_frontier": expand_frontier, "expand_steps": expand_steps}
