"""Triton kernel for spot::select_children (docs/ops.md, "Drafter child selection").

One program per frontier node, fused: NaN -> -inf, eligibility (masked and > -inf), the log-normaliser over
eligible positions (the +inf limit: the +inf positions share the mass), then for each of the k children in order
the best remaining position (largest logit, ties lowest position), its path log-probability, and its token: the
coupled-noise Gumbel-max over the stale top-K at that position (log and noise in float64 for float64 stale
probabilities, else float32; T = 0: the stale top-1 id). The stale tensors are read through their strides, so
expanded views cost nothing.

The order drafter's transformer forward is its own op, spot::order_logits (triton/order_logits.py), whose position
logits the decoder hands to this op.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import (NEG_INF, POS_INF, mix32, next_pow2, on_device, precise_log, row_key, seed_key,
                      uniform_from_words)


@triton.jit
def position_tokens(probs_ptr, ids_ptr, p, take, row, start, step, sk, K, ps_b, ps_k, is_b, is_k,
                    HAS_T: tl.constexpr, BLOCK_K: tl.constexpr):
    """The token a child committing position p draws, for a vector of positions p ([N]; take: which to draw, -1
    elsewhere): the coupled-noise Gumbel-max over the stale top-K at p (probs_ptr / ids_ptr at position 0 of the
    node's row, strides ps_b, ps_k / is_b, is_k) with the noise of (row, start + p, step), log and noise in float64
    for float64 stale probabilities, else float32; T = 0: the stale top-1 id; -1 where no entry qualifies or K = 0.
    Shared by select_children (one position per child) and expand_steps (a step's positions)."""
    if HAS_T:
        i = tl.arange(0, BLOCK_K)[None, :]
        both = (i < K) & take[:, None]
        probs = tl.load(probs_ptr + p[:, None] * ps_b + i * ps_k, mask=both, other=0.0)
        ids = tl.load(ids_ptr + p[:, None] * is_b + i * is_k, mask=both, other=-1)
        ok = (ids >= 0) & (probs > 0)
        word = mix32(row_key(sk, row, start + p, step)[:, None] ^ ids.to(tl.uint32))
        u = uniform_from_words(word).to(probs.dtype)
        value = tl.where(ok, precise_log(tl.where(ok, probs, 1.0)) - precise_log(-precise_log(u)), NEG_INF)
        _, arg = tl.max(value, axis=1, return_indices=True, return_indices_tie_break_left=True)
        any_ok = tl.sum(ok.to(tl.int32), axis=1) > 0
        token = tl.where(take & any_ok, tl.sum(tl.where(i == arg[:, None], ids, 0), axis=1), -1)
    else:
        token = tl.where(take & (K > 0), tl.load(ids_ptr + p * is_b, mask=take & (K > 0), other=-1), -1)
    return token


@triton.jit
def node_children(logits, masked, j, inb, path, probs_ptr, ids_ptr, row, start, step, sk, K, k, ps_b, ps_k, is_b,
                  is_k, out, pos_out, lp_out, tok_out, HAS_T: tl.constexpr, BLOCK_B: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    """The k children of one frontier node, stored at out + c: its logits and masked flags loaded ([BLOCK_B], j the
    positions, inb those < B), its path log-probability, its stale top-K (probs_ptr / ids_ptr at position 0 of the
    node's row, read through the strides ps_b, ps_k / is_b, is_k), its noise row, block start and step."""
    logits = tl.where(logits != logits, NEG_INF, logits)  # NaN counts as -inf
    eligible = inb & masked & (logits > NEG_INF)
    key = tl.where(eligible, logits, NEG_INF)

    # log_softmax over eligible positions; with +inf logits, the limit (those positions share the mass)
    n_inf = tl.sum((key == POS_INF).to(tl.int32), axis=0)
    norm_key = tl.where(n_inf > 0, tl.where(key == POS_INF, 0.0, NEG_INF), key)
    mx = tl.max(norm_key, axis=0)
    shift = tl.where(mx == NEG_INF, 0.0, mx)
    log_norm = shift + precise_log(tl.sum(tl.exp(norm_key - shift), axis=0))  # -inf when nothing is eligible

    avail = eligible
    for c in range(0, k):
        cur = tl.where(avail, key, NEG_INF)
        has = tl.sum(avail.to(tl.int32), axis=0) > 0
        best = tl.max(cur, axis=0)
        p = tl.min(tl.where(avail & (cur == best), j, BLOCK_B), axis=0)
        p = tl.where(has, p, 0)
        logprob = path + (tl.max(tl.where(j == p, norm_key, NEG_INF), axis=0) - log_norm)
        one = tl.zeros([1], dtype=tl.int32)  # the child's position as a one-element vector of positions
        token = tl.sum(position_tokens(probs_ptr, ids_ptr, p + one, (one == 0) & has, row, start, step, sk, K,
                                       ps_b, ps_k, is_b, is_k, HAS_T, BLOCK_K), axis=0)
        tl.store(pos_out + out + c, tl.where(has, p.to(tl.int64), -1))
        tl.store(lp_out + out + c, tl.where(has, logprob, NEG_INF))
        tl.store(tok_out + out + c, token.to(tl.int64))
        avail = avail & (j != p)


@triton.jit(do_not_specialize=["seed_key", "temperature"])
def _select_children_kernel(
    logits_ptr, masked_ptr, path_ptr, probs_ptr, ids_ptr, rows_ptr, bstart_ptr, steps_ptr,
    seed_key, temperature, B, K, k,
    ps_f, ps_b, ps_k, is_f, is_b, is_k,
    pos_out, lp_out, tok_out,
    HAS_T: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr,
):
    f = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_B)
    inb = j < B
    logits = tl.load(logits_ptr + f * B + j, mask=inb, other=NEG_INF)
    masked = tl.load(masked_ptr + f * B + j, mask=inb, other=0) != 0
    node_children(logits, masked, j, inb, tl.load(path_ptr + f), probs_ptr + f * ps_f, ids_ptr + f * is_f,
                  tl.load(rows_ptr + f), tl.load(bstart_ptr + f), tl.load(steps_ptr + f), seed_key.to(tl.uint32),
                  K, k, ps_b, ps_k, is_b, is_k, f * k, pos_out, lp_out, tok_out, HAS_T, BLOCK_B, BLOCK_K)


def select_children(position_logits, masked, path_logprob, stale_topk_probs, stale_topk_ids, seed, rows,
                    block_start, steps, temperature, k):
    frontier, block = position_logits.shape
    top = stale_topk_probs.shape[-1]
    device = position_logits.device
    child_pos = torch.empty((frontier, k), dtype=torch.int64, device=device)
    child_logprob = torch.empty((frontier, k), dtype=position_logits.dtype, device=device)
    child_tokens = torch.empty((frontier, k), dtype=torch.int64, device=device)
    if frontier == 0:
        return child_pos, child_logprob, child_tokens
    with on_device(position_logits):
        _select_children_kernel[(frontier,)](
            position_logits.contiguous(), masked.contiguous().view(torch.uint8), path_logprob.contiguous(),
            stale_topk_probs, stale_topk_ids, rows.contiguous(), block_start.contiguous(), steps.contiguous(),
            seed_key(seed), float(temperature), block, top, k,
            *stale_topk_probs.stride(), *stale_topk_ids.stride(),
            child_pos, child_logprob, child_tokens,
            HAS_T=temperature > 0, BLOCK_B=next_pow2(block), BLOCK_K=next_pow2(top),
            num_warps=1 if block * max(top, 1) <= 2048 else 4,
        )
    return child_pos, child_logprob, child_tokens


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {"select_children": select_children}
