"""Triton kernel for spot::expand_frontier (docs/ops.md, "Frontier expansion").

One program per row: select_children's per-node code (triton/select_children.py's `node_children`) on each of the
row's w frontier nodes, then, on the row's w * branch children it wrote: -inf where a child has no token, each
child's state (its frontier node's with the token at its position), and each child's rank by log-probability
(descending, ties to the lower index: a stable sort), which places the `width` best in the next frontier.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import NEG_INF, next_pow2, on_device, seed_key
from .select_children import node_children


@triton.jit(do_not_specialize=["seed_key", "temperature", "mask_id"])
def _expand_frontier_kernel(
    logits_ptr, states_ptr, path_ptr, probs_ptr, ids_ptr, rows_ptr, bstart_ptr, steps_ptr,
    seed_key, temperature, mask_id, W, B, K, k, width,
    ps_r, ps_b, ps_k, is_r, is_b, is_k,
    pos_out, lp_out, tok_out, cstates_out, front_out, fstates_out, flp_out,
    HAS_T: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    n = W * k
    j = tl.arange(0, BLOCK_B)
    inb = j < B
    row = tl.load(rows_ptr + r)
    start = tl.load(bstart_ptr + r)
    step = tl.load(steps_ptr + r)
    sk = seed_key.to(tl.uint32)
    for s in range(0, W):
        f = r * W + s
        logits = tl.load(logits_ptr + f * B + j, mask=inb, other=NEG_INF)
        masked = tl.load(states_ptr + f * B + j, mask=inb, other=0) == mask_id
        node_children(logits, masked, j, inb, tl.load(path_ptr + f), probs_ptr + r * ps_r, ids_ptr + r * is_r, row,
                      start, step, sk, K, k, ps_b, ps_k, is_b, is_k, r * n + s * k, pos_out, lp_out, tok_out, HAS_T,
                      BLOCK_B, BLOCK_K)
    tl.debug_barrier()  # the children written above are read back below

    c = tl.arange(0, BLOCK_N)
    in_n = c < n
    pos = tl.load(pos_out + r * n + c, mask=in_n, other=-1)
    tok = tl.load(tok_out + r * n + c, mask=in_n, other=-1)
    lp = tl.load(lp_out + r * n + c, mask=in_n, other=NEG_INF)
    lp = tl.where(tok < 0, NEG_INF, lp)  # no token: no child
    tl.store(lp_out + r * n + c, lp, mask=in_n)

    # each child's state: its frontier node's, with the token (clamped to >= 0) at its position
    both = in_n[:, None] & inb[None, :]
    parent = r * W + c // k
    st = tl.load(states_ptr + parent[:, None] * B + j[None, :], mask=both, other=0)
    st = tl.where(pos[:, None] == j[None, :], tl.maximum(tok, 0)[:, None], st)
    tl.store(cstates_out + (r * n + c)[:, None] * B + j[None, :], st, mask=both)

    # rank: the children before c in a stable descending sort
    other = tl.arange(0, BLOCK_N)
    lp_o = tl.load(lp_out + r * n + other, mask=other < n, other=NEG_INF)
    tok_o = tl.load(tok_out + r * n + other, mask=other < n, other=-1)
    lp_o = tl.where(tok_o < 0, NEG_INF, lp_o)
    before = (other[None, :] < n) & ((lp_o[None, :] > lp[:, None]) |
                                     ((lp_o[None, :] == lp[:, None]) & (other[None, :] < c[:, None])))
    rank = tl.sum(before.to(tl.int32), axis=1)
    kept = in_n & (rank < width)
    tl.store(front_out + r * width + rank, c.to(tl.int64), mask=kept)
    tl.store(flp_out + r * width + rank, lp, mask=kept)
    tl.store(fstates_out + (r * width + rank)[:, None] * B + j[None, :], st, mask=kept[:, None] & inb[None, :])


def expand_frontier(position_logits, states, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
                    block_start, steps, temperature, mask_id, branch, width):
    n_rows, (frontier, block) = rows.shape[0], states.shape
    w = frontier // n_rows if n_rows else 0
    top = stale_topk_probs.shape[-1]
    n = w * branch
    kept = min(width, n)
    out = dict(device=states.device)
    child_pos = torch.empty((n_rows, n), dtype=torch.int64, **out)
    child_logprob = torch.empty((n_rows, n), dtype=position_logits.dtype, **out)
    child_tokens = torch.empty((n_rows, n), dtype=torch.int64, **out)
    child_states = torch.empty((n_rows, n, block), dtype=torch.int64, **out)
    next_frontier = torch.empty((n_rows, kept), dtype=torch.int64, **out)
    frontier_states = torch.empty((n_rows * kept, block), dtype=torch.int64, **out)  # flat, as the next call takes it
    frontier_logprob = torch.empty((n_rows * kept,), dtype=position_logits.dtype, **out)
    outputs = (child_pos, child_logprob, child_tokens, child_states, next_frontier, frontier_states, frontier_logprob)
    if n_rows == 0 or w == 0:
        return outputs
    with on_device(states):
        _expand_frontier_kernel[(n_rows,)](
            position_logits.contiguous(), states.contiguous(), path_logprob.contiguous(), stale_topk_probs,
            stale_topk_ids, rows.contiguous(), block_start.contiguous(), steps.contiguous(),
            seed_key(seed), float(temperature), int(mask_id), w, block, top, branch, kept,
            *stale_topk_probs.stride(), *stale_topk_ids.stride(),
            *outputs,
            HAS_T=temperature > 0, BLOCK_B=next_pow2(block), BLOCK_K=next_pow2(top), BLOCK_N=next_pow2(n),
            num_warps=1 if block * max(top, 1) <= 2048 else 4,
        )
    return outputs


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {"expand_frontier": expand_frontier}
