"""Triton kernels for spot::expand_frontier and spot::expand_steps (docs/ops.md, "Frontier expansion").

expand_frontier, one program per row: select_children's per-node code (triton/select_children.py's `node_children`)
on each of the row's w frontier nodes, then, on the row's w * branch children it wrote: -inf where a child has no
token, each child's state (its frontier node's with the token at its position), and each child's rank by
log-probability (descending, ties to the lower index: a stable sort), which places the `width` best in the next
frontier.

expand_steps, two launches, no host sync: one program per frontier node ranks its eligible positions (pairwise
counts), scores its (B + 1) x 8 candidate sets as one [sizes, variants] tile and writes its `branch` best as children,
each state drawn with select_children's per-position token code (`position_tokens`); then one program per row
ranks the row's children and writes the next frontier.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import NEG_INF, next_pow2, on_device, precise_log, seed_key
from .select_children import node_children, position_tokens


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
    _store_frontier(r, c, in_n & (rank < width), rank, lp, st, width, B, j, inb, front_out, fstates_out, flp_out)


@triton.jit
def _store_frontier(r, c, kept, rank, lp, st, width, B, j, inb, front_out, fstates_out, flp_out):
    """Row r's children c ([N]) where kept: their index, log-probability and state ([N, B]) at their rank in the
    next frontier."""
    tl.store(front_out + r * width + rank, c.to(tl.int64), mask=kept)
    tl.store(flp_out + r * width + rank, lp, mask=kept)
    tl.store(fstates_out + (r * width + rank)[:, None] * B + j[None, :], st, mask=kept[:, None] & inb[None, :])


def _depth_outputs(position_logits, states, rows, branch, width, commits):
    """(w, n, kept, outputs) of one depth: w frontier nodes per row, n = w * branch children per row, kept = W, and
    the outputs, freshly allocated: child_pos, child_logprob, child_tokens (child_logprob alone without commits),
    child_states, frontier, frontier_states (flat, as the next call takes it), frontier_logprob."""
    n_rows, (frontier, block) = rows.shape[0], states.shape
    w = frontier // n_rows if n_rows else 0
    n = w * branch
    kept = min(width, n)
    out = dict(device=states.device)
    child_logprob = torch.empty((n_rows, n), dtype=position_logits.dtype, **out)
    children = ((torch.empty((n_rows, n), dtype=torch.int64, **out), child_logprob,
                 torch.empty((n_rows, n), dtype=torch.int64, **out)) if commits else (child_logprob,))
    return w, n, kept, (*children, torch.empty((n_rows, n, block), dtype=torch.int64, **out),
                        torch.empty((n_rows, kept), dtype=torch.int64, **out),
                        torch.empty((n_rows * kept, block), dtype=torch.int64, **out),
                        torch.empty((n_rows * kept,), dtype=position_logits.dtype, **out))


def expand_frontier(position_logits, states, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
                    block_start, steps, temperature, mask_id, branch, width):
    n_rows, block, top = rows.shape[0], states.shape[1], stale_topk_probs.shape[-1]
    w, n, kept, outputs = _depth_outputs(position_logits, states, rows, branch, width, commits=True)
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


# ------------------------------------------------------------------------------------------------ expand_steps

@triton.jit
def _at_rank(values, rank, eligible, r):
    """values [BLOCK_B] by position, at the ranks r [BLOCK_M]: the eligible position of rank r[i] (0 if none)."""
    sel = eligible[None, :] & (rank[None, :] == r[:, None])
    return tl.sum(tl.where(sel, values[None, :], 0), axis=1)


@triton.jit
def _variant_at(v, c0, c1, c2, c3, c4, c5, c6, c7):
    """[BLOCK_M, 8] tile whose column v is c<v> ([BLOCK_M] each)."""
    x = tl.where(v == 0, c0[:, None], c1[:, None])
    x = tl.where(v == 2, c2[:, None], x)
    x = tl.where(v == 3, c3[:, None], x)
    x = tl.where(v == 4, c4[:, None], x)
    x = tl.where(v == 5, c5[:, None], x)
    x = tl.where(v == 6, c6[:, None], x)
    return tl.where(v == 7, c7[:, None], x)


@triton.jit
def _rank_out(v):
    """spot_kernels.reference.expand_frontier.STEP_VARIANTS: variant v swaps rank m + _rank_out(v) out ..."""
    return tl.where(v == 0, 0, tl.where(v < 6, -1, -2))


@triton.jit
def _rank_in(v):
    """... for rank m + _rank_in(v) (variant 0: the first m ranks, nothing swapped)."""
    return tl.where(v == 0, 0, tl.where(v < 6, v - 1, v - 6))


@triton.jit(do_not_specialize=["seed_key", "mask_id"])
def _expand_steps_nodes_kernel(
    logits_ptr, states_ptr, path_ptr, sizes_ptr, probs_ptr, ids_ptr, rows_ptr, bstart_ptr, steps_ptr,
    seed_key, mask_id, W, B, K, branch, n_sel,
    ps_r, ps_b, ps_k, is_r, is_b, is_k,
    lp_out, cstates_out,
    BIG: tl.constexpr, HAS_T: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
    PAD_ROWS: tl.constexpr,
):
    f = tl.program_id(0).to(tl.int64)
    r = f // W
    j = tl.arange(0, BLOCK_B)
    inb = j < B
    x = tl.load(logits_ptr + f * B + j, mask=inb, other=NEG_INF)
    x = tl.minimum(tl.where(x != x, NEG_INF, x), tl.full([BLOCK_B], BIG, x.dtype))  # NaN: -inf; +inf: BIG
    state = tl.load(states_ptr + f * B + j, mask=inb, other=0)
    eligible = inb & (state == mask_id) & (x > NEG_INF)
    key = tl.where(eligible, x, NEG_INF)
    n_e = tl.sum(eligible.to(tl.int32), axis=0)

    # rank of each eligible position: the eligible positions before it by (logit desc, position asc)
    tied_before = (key[None, :] == key[:, None]) & (j[None, :] < j[:, None])
    before = eligible[None, :] & ((key[None, :] > key[:, None]) | tied_before)
    rank = tl.sum(before.to(tl.int32), axis=1)
    # Plackett-Luce: the position of rank k is drawn with log-probability lv[k] - log-sum-exp(lv[k:])
    later = eligible[None, :] & (rank[None, :] >= rank[:, None])
    diff = tl.where(later & eligible[:, None], key[None, :] - key[:, None], NEG_INF)
    suffix = key + precise_log(tl.sum(tl.exp(diff), axis=1))
    step_lp = tl.where(eligible, key - suffix, 0.0)

    # every eligible position's token (select_children's draw, at the row's step); ranks without one are missing
    tok = position_tokens(probs_ptr + r * ps_r, ids_ptr + r * is_r, j, eligible, tl.load(rows_ptr + r),
                          tl.load(bstart_ptr + r), tl.load(steps_ptr + r), seed_key.to(tl.uint32), K, ps_b, ps_k,
                          is_b, is_k, HAS_T, BLOCK_K)
    missing = (eligible & (tok < 0)).to(tl.int32)

    # per size m: the first m ranks' log-probability and missing tokens, and the ranks around m
    m = tl.arange(0, BLOCK_M)
    below = eligible[None, :] & (rank[None, :] < m[:, None])
    prefix = tl.sum(tl.where(below, step_lp[None, :], 0.0), axis=1)
    m_missing = tl.sum(tl.where(below, missing[None, :], 0), axis=1)
    lv_m2, lv_m1 = _at_rank(key, rank, eligible, m - 2), _at_rank(key, rank, eligible, m - 1)
    lv_0, lv_1 = _at_rank(key, rank, eligible, m), _at_rank(key, rank, eligible, m + 1)
    lv_2, lv_3 = _at_rank(key, rank, eligible, m + 2), _at_rank(key, rank, eligible, m + 3)
    lv_4 = _at_rank(key, rank, eligible, m + 4)
    mi_m2, mi_m1 = _at_rank(missing, rank, eligible, m - 2), _at_rank(missing, rank, eligible, m - 1)
    mi_0, mi_1 = _at_rank(missing, rank, eligible, m), _at_rank(missing, rank, eligible, m + 1)
    mi_2, mi_3 = _at_rank(missing, rank, eligible, m + 2), _at_rank(missing, rank, eligible, m + 3)
    mi_4 = _at_rank(missing, rank, eligible, m + 4)

    # the [size, variant] tile of candidates, index m * 8 + v; -inf unless its ranks exist and all have tokens
    v = tl.arange(0, 8)[None, :]
    lv_out = tl.where(_rank_out(v) == -1, lv_m1[:, None], lv_m2[:, None])
    mi_out = tl.where(_rank_out(v) == -1, mi_m1[:, None], mi_m2[:, None])
    lv_in = _variant_at(v, lv_0, lv_0, lv_1, lv_2, lv_3, lv_4, lv_0, lv_1)
    mi_in = _variant_at(v, mi_0, mi_0, mi_1, mi_2, mi_3, mi_4, mi_0, mi_1)
    r_out = m[:, None] + _rank_out(v)
    r_in = m[:, None] + _rank_in(v)
    ok_prefix = (m[:, None] <= n_e) & (m_missing[:, None] == 0)
    ok_swap = (r_out >= 0) & (r_in < n_e) & (m_missing[:, None] - mi_out + mi_in == 0)
    size = tl.load(sizes_ptr + f * (B + 1) + m, mask=m <= B, other=NEG_INF)
    ok = tl.where(v == 0, ok_prefix, ok_swap) & (size > NEG_INF)[:, None]
    lp = tl.where(v == 0, prefix[:, None], prefix[:, None] + (lv_in - lv_out))  # the gap first, as the reference
    cand = tl.where(ok, (tl.load(path_ptr + f) + size)[:, None] + lp, NEG_INF)
    idx = m[:, None] * 8 + v

    # the `branch` best, in order: NaN first (torch's sort), then the largest, ties to the lower index
    avail = idx < 8 * (B + 1)  # every candidate, once
    tok_in = tl.maximum(tok, 0)
    for c in range(0, n_sel):
        nan = avail & (cand != cand)
        any_nan = tl.sum(nan.to(tl.int32), axis=None) > 0
        best = tl.max(tl.where(avail & (cand == cand), cand, NEG_INF), axis=None)
        pick = tl.min(tl.where(tl.where(any_nan, nan, avail & (cand == best)), idx, 8 * BLOCK_M), axis=None)
        avail = avail & (idx != pick)
        lp_c = tl.sum(tl.where(idx == pick, cand, 0.0), axis=None)  # the pick's, NaN included
        m_c, v_c = pick // 8, pick % 8
        out_c = tl.where(v_c == 0, -1, m_c + _rank_out(v_c))
        in_c = tl.where(v_c == 0, -1, m_c + _rank_in(v_c))
        in_set = eligible & (((rank < m_c) & (rank != out_c)) | (rank == in_c))
        in_set = tl.where(lp_c > NEG_INF, in_set, False)  # a -inf or NaN child is no set
        o = f * branch + c
        tl.store(lp_out + o, lp_c)
        tl.store(cstates_out + o * B + j, tl.where(in_set, tok_in, state), mask=inb)
    # padding children (branch beyond the candidates): -inf, the node's state
    pad = tl.arange(0, PAD_ROWS)
    for c0 in range(n_sel, branch, PAD_ROWS):
        padded = c0 + pad
        at = f * branch + padded
        tl.store(lp_out + at, tl.full([PAD_ROWS], NEG_INF, cand.dtype), mask=padded < branch)
        tl.store(cstates_out + at[:, None] * B + j[None, :], tl.broadcast_to(state[None, :], [PAD_ROWS, BLOCK_B]),
                 mask=(padded < branch)[:, None] & inb[None, :])


@triton.jit
def _expand_steps_frontier_kernel(lp_ptr, cstates_ptr, n, width, B, front_out, fstates_out, flp_out,
                                  BLOCK_C: tl.constexpr, BLOCK_B: tl.constexpr):
    """Per row: each child's rank in a stable descending sort (NaN first, as torch's), counted against the row's
    children BLOCK_C at a time; the `width` first are the next frontier."""
    r = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_B)
    inb = j < B
    span = tl.arange(0, BLOCK_C)
    for c0 in range(0, n, BLOCK_C):
        c = c0 + span
        in_n = c < n
        lp = tl.load(lp_ptr + r * n + c, mask=in_n, other=NEG_INF)
        nan = lp != lp
        rank = tl.zeros([BLOCK_C], dtype=tl.int32)
        for o0 in range(0, n, BLOCK_C):
            other = o0 + span
            lp_o = tl.load(lp_ptr + r * n + other, mask=other < n, other=NEG_INF)
            nan_o = lp_o != lp_o
            greater = (nan_o[None, :] & ~nan[:, None]) | (lp_o[None, :] > lp[:, None])
            same = (nan_o[None, :] & nan[:, None]) | (lp_o[None, :] == lp[:, None])
            before = (other[None, :] < n) & (greater | (same & (other[None, :] < c[:, None])))
            rank += tl.sum(before.to(tl.int32), axis=1)
        kept = in_n & (rank < width)
        st = tl.load(cstates_ptr + (r * n + c)[:, None] * B + j[None, :], mask=kept[:, None] & inb[None, :], other=0)
        _store_frontier(r, c, kept, rank, lp, st, width, B, j, inb, front_out, fstates_out, flp_out)


def expand_steps(position_logits, states, path_logprob, size_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
                 block_start, steps, temperature, mask_id, branch, width):
    n_rows, (frontier, block), top = rows.shape[0], states.shape, stale_topk_probs.shape[-1]
    w, n, kept, outputs = _depth_outputs(position_logits, states, rows, branch, width, commits=False)
    child_logprob, child_states, next_frontier, frontier_states, frontier_logprob = outputs
    if frontier == 0:
        return outputs
    candidates = (block + 1) * 8
    with on_device(states):
        _expand_steps_nodes_kernel[(frontier,)](
            position_logits.contiguous(), states.contiguous(), path_logprob.contiguous(), size_logprob.contiguous(),
            stale_topk_probs, stale_topk_ids, rows.contiguous(), block_start.contiguous(), steps.contiguous(),
            seed_key(seed), int(mask_id), w, block, top, branch, min(branch, candidates),
            *stale_topk_probs.stride(), *stale_topk_ids.stride(),
            child_logprob, child_states,
            BIG=torch.finfo(position_logits.dtype).max / 4, HAS_T=temperature > 0, BLOCK_B=next_pow2(block),
            BLOCK_K=next_pow2(top), BLOCK_M=next_pow2(block + 1), PAD_ROWS=16,
            num_warps=4 if block <= 32 else 8,  # fewer spill registers (bench/triton_compile_check.py)
        )
        _expand_steps_frontier_kernel[(n_rows,)](
            child_logprob, child_states, n, kept, block, next_frontier, frontier_states, frontier_logprob,
            BLOCK_C=min(next_pow2(n), 128), BLOCK_B=next_pow2(block), num_warps=1 if n <= 64 else 4,
        )
    return outputs


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {"expand_frontier": expand_frontier, "expand_steps": expand_steps}
