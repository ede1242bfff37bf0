"""Triton kernel for spot::commit_rule (docs/ops.md, "Commit rules").

One program per node holds the node's B positions in one tile (BLOCK_B = next power of two >= B) and ranks the
eligible ones (masked, confidence not NaN; descending, ties to the lower position) by counting, the positions
compared against K-chunks of the same row: [BLOCK_B, BLOCK_K] tiles, O(B^2) per node (B is a block size). A rank
passes when its confidence passes thresholds[n, rank] cast to the confidence dtype (round to nearest, as PyTorch
compares); `passing` is the lowest failing rank (n if none), and the first min(max(quota, passing), n) ranks commit.
Inputs are read through their strides; one launch, no host synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import next_pow2, on_device


@triton.jit
def _commit_kernel(conf_ptr, cs0, cs1, masked_ptr, ms0, ms1, steps_ptr, ss0, quota_ptr, S, qs0, qs1,
                   thresholds_ptr, ts0, ts1, out_ptr, B, INCLUSIVE: tl.constexpr, BLOCK_B: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    node = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_B)
    in_b = j < B
    conf = tl.load(conf_ptr + node * cs0 + j * cs1, mask=in_b, other=0)
    eligible = in_b & (tl.load(masked_ptr + node * ms0 + j * ms1, mask=in_b, other=0) != 0) & (conf == conf)
    n = tl.sum(eligible.to(tl.int32), axis=0)

    rank = tl.zeros([BLOCK_B], tl.int32)
    for k0 in range(0, B, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        in_k = k < B
        other = tl.load(conf_ptr + node * cs0 + k * cs1, mask=in_k, other=0)
        ok = in_k & (tl.load(masked_ptr + node * ms0 + k * ms1, mask=in_k, other=0) != 0) & (other == other)
        before = ok[None, :] & ((other[None, :] > conf[:, None])
                                | ((other[None, :] == conf[:, None]) & (k[None, :] < j[:, None])))
        rank += tl.sum(before.to(tl.int32), axis=1)

    tau = tl.load(thresholds_ptr + n.to(tl.int64) * ts0 + rank.to(tl.int64) * ts1, mask=eligible, other=0)
    tau = tau.to(conf.dtype)
    if INCLUSIVE:
        passes = conf >= tau
    else:
        passes = conf > tau
    passing = tl.min(tl.where(eligible & ~passes, rank, n), axis=0)
    step = tl.minimum(tl.maximum(tl.load(steps_ptr + node * ss0), 0), S - 1)
    quota = tl.load(quota_ptr + step * qs0 + n.to(tl.int64) * qs1)
    commits = tl.minimum(tl.maximum(quota, passing.to(tl.int64)), n.to(tl.int64))
    tl.store(out_ptr + node * B + j, (eligible & (rank.to(tl.int64) < commits)).to(tl.int8), mask=in_b)


def commit_rule(confidence, masked, steps, quota, thresholds, inclusive):
    width = confidence.shape[-1]
    out = torch.empty(masked.shape, dtype=torch.bool, device=masked.device)
    nodes = out.numel() // width if width else 0
    if nodes == 0:
        return out
    # [nodes, B] rows: views where the leading dimensions merge (the usual case), else copies
    conf = confidence.reshape(nodes, width)
    mask = masked.reshape(nodes, width).view(torch.uint8)
    step = steps.reshape(nodes)
    block_b = max(2, next_pow2(width))
    block_k = max(1, min(block_b, 4096 // block_b))
    with on_device(confidence):
        _commit_kernel[(nodes,)](
            conf, *conf.stride(), mask, *mask.stride(), step, step.stride(0), quota, quota.shape[0], *quota.stride(),
            thresholds, *thresholds.stride(), out.view(torch.uint8), width, INCLUSIVE=bool(inclusive),
            BLOCK_B=block_b, BLOCK_K=block_k, num_warps=1 if block_b <= 64 else 4,
        )
    return out


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {"commit_rule": commit_rule}
