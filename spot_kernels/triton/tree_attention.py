"""Triton kernels for the tree-attention family (docs/ops.md, "Tree attention masks" and "Shared-prefix tree
attention").

Mask builders: one program per (row, query tile, key tile) evaluates the mask rule on index arithmetic and writes
the dense bool / additive mask, the bit-packed words (32 keys per int32), or the position ids. Nothing is read but
key_start.

tree_attention: flash-attention over the queries of all N nodes of a block. A program owns one (batch row, kv head)
and a tile of BLOCK_M query rows, ordered (node position nb = n * B + i, head-in-group g), so one tile spans
several grouped heads and, when BLOCK_M > G * B, several nodes. It streams the shared prefix keys/values tile by
tile (from the first tile holding a valid key: ragged key_start), each tile loaded once and used by every query row
of the program (BLOCK_M rows: with 32/8 heads and B = 32, one node's 4 heads x 32 positions); the programs of one
kv head read the same prefix, so it comes from HBM about once and from L2 after. Then the node-local keys of the
nodes its rows belong to (a block-diagonal mask keeps a node from seeing another). One running (max, sum,
accumulator) carries across both loops: the log-sum-exp merge of the prefix and node-local parts. Scores and the
softmax are float32 (float32 inputs multiply in "tf32x3": about float32 accuracy on the tensor cores); float64
inputs fall back to the reference.
Tile sizes: SPOT_TRITON_ATTN_BLOCK_M / _BLOCK_N / _WARPS / _STAGES override the defaults (for tuning on a GPU).
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from ..reference import tree_attention as reference
from ._common import NEG_INF, next_pow2, on_device

_LOG2E = 1.4426950408889634


# -------------------------------------------------------------------------------------------------- masks

@triton.jit
def _visible(ks, q, k, P, NUM_NEW, BS):
    """The mask rule (spot_kernels.reference.tree_attention._visible) on broadcastable int64 index tensors."""
    kq = P - NUM_NEW + q
    new_row = tl.where(kq < ks, k == kq, (k >= ks) & (k <= kq))
    node = (q - NUM_NEW) // BS  # only used where q >= NUM_NEW
    key_node = (k - P) // BS  # only used where k >= P
    node_row = (k >= ks) & ((k < P) | (key_node == node))
    return tl.where(q < NUM_NEW, new_row, node_row)


@triton.jit
def _dense_mask_kernel(ks_ptr, out_ptr, P, NUM_NEW, BS, NQ, NK, ADDITIVE: tl.constexpr,
                       BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    q = tl.program_id(1).to(tl.int64) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    k = tl.program_id(2).to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    ks = tl.load(ks_ptr + row)
    vis = _visible(ks, q[:, None], k[None, :], P, NUM_NEW, BS)
    ptrs = out_ptr + row * NQ * NK + q[:, None] * NK + k[None, :]
    live = (q[:, None] < NQ) & (k[None, :] < NK)
    if ADDITIVE:
        tl.store(ptrs, tl.where(vis, 0.0, NEG_INF).to(out_ptr.dtype.element_ty), mask=live)
    else:
        tl.store(ptrs, vis.to(tl.uint8), mask=live)


@triton.jit
def _packed_mask_kernel(ks_ptr, out_ptr, P, NUM_NEW, BS, NQ, NK, NW,
                        BLOCK_Q: tl.constexpr, BLOCK_W: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    q = tl.program_id(1).to(tl.int64) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    w = tl.program_id(2).to(tl.int64) * BLOCK_W + tl.arange(0, BLOCK_W)
    bit = tl.arange(0, 32).to(tl.int64)
    k = w[None, :, None] * 32 + bit[None, None, :]
    ks = tl.load(ks_ptr + row)
    vis = _visible(ks, q[:, None, None], k, P, NUM_NEW, BS) & (k < NK)
    words = tl.sum(vis.to(tl.int64) << bit[None, None, :], axis=2)  # in [0, 2^32)
    ptrs = out_ptr + row * NQ * NW + q[:, None] * NW + w[None, :]
    tl.store(ptrs, words.to(tl.int32), mask=(q[:, None] < NQ) & (w[None, :] < NW))


@triton.jit
def _position_ids_kernel(ks_ptr, out_ptr, P, NUM_NEW, BS, NQ, BLOCK_Q: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    q = tl.program_id(1).to(tl.int64) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    ks = tl.load(ks_ptr + row)
    new = tl.maximum(P - NUM_NEW + q - ks, 0)
    node = P - ks + (q - NUM_NEW) % BS
    tl.store(out_ptr + row * NQ + q, tl.where(q < NUM_NEW, new, node), mask=q < NQ)


def _sizes(prefix_len, num_new, num_nodes, block_size):
    return num_new + num_nodes * block_size, prefix_len + num_nodes * block_size


def _dense(key_start, prefix_len, num_new, num_nodes, block_size, dtype):
    n_q, n_k = _sizes(prefix_len, num_new, num_nodes, block_size)
    b = key_start.shape[0]
    additive = dtype != torch.bool
    out = torch.empty((b, 1, n_q, n_k), dtype=dtype, device=key_start.device)
    if out.numel() == 0:
        return out
    block_q, block_k = 32, 128
    grid = (b, triton.cdiv(n_q, block_q), triton.cdiv(n_k, block_k))
    with on_device(key_start):
        _dense_mask_kernel[grid](key_start.contiguous(), out if additive else out.view(torch.uint8), prefix_len,
                                 num_new, block_size, n_q, n_k, ADDITIVE=additive, BLOCK_Q=block_q,
                                 BLOCK_K=block_k, num_warps=4)
    return out


def tree_mask(key_start, prefix_len, num_new, num_nodes, block_size):
    return _dense(key_start, prefix_len, num_new, num_nodes, block_size, torch.bool)


def tree_mask_additive(key_start, prefix_len, num_new, num_nodes, block_size, dtype):
    return _dense(key_start, prefix_len, num_new, num_nodes, block_size, dtype)


def tree_mask_packed(key_start, prefix_len, num_new, num_nodes, block_size):
    n_q, n_k = _sizes(prefix_len, num_new, num_nodes, block_size)
    n_w = (n_k + 31) // 32
    b = key_start.shape[0]
    out = torch.empty((b, n_q, n_w), dtype=torch.int32, device=key_start.device)
    if out.numel() == 0:
        return out
    block_q, block_w = 16, 8
    grid = (b, triton.cdiv(n_q, block_q), triton.cdiv(n_w, block_w))
    with on_device(key_start):
        _packed_mask_kernel[grid](key_start.contiguous(), out, prefix_len, num_new, block_size, n_q, n_k, n_w,
                                  BLOCK_Q=block_q, BLOCK_W=block_w, num_warps=4)
    return out


def tree_position_ids(key_start, prefix_len, num_new, num_nodes, block_size):
    n_q, _ = _sizes(prefix_len, num_new, num_nodes, block_size)
    b = key_start.shape[0]
    out = torch.empty((b, n_q), dtype=torch.int64, device=key_start.device)
    if out.numel() == 0:
        return out
    block_q = 256
    with on_device(key_start):
        _position_ids_kernel[(b, triton.cdiv(n_q, block_q))](key_start.contiguous(), out, prefix_len, num_new,
                                                            block_size, n_q, BLOCK_Q=block_q, num_warps=4)
    return out


# ------------------------------------------------------------------------------------------- tree attention

@triton.jit
def _attend(q, kt_ptrs, v_ptrs, k_ok, d_ok, row_sel, m_i, l_i, acc, qk_scale, FP32: tl.constexpr):
    """One online-softmax step over a key tile: kt [D, N] (transposed keys), v [N, D]; row_sel [M, N] masks."""
    kt = tl.load(kt_ptrs, mask=d_ok[:, None] & k_ok[None, :], other=0.0)
    if FP32:  # three TF32 products on the tensor cores: about float32 accuracy without an FMA-sized tile
        s = tl.dot(q, kt, input_precision="tf32x3")
    else:
        s = tl.dot(q, kt)
    s = tl.where(row_sel, s * qk_scale, NEG_INF)
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    shift = tl.where(m_new == NEG_INF, 0.0, m_new)
    alpha = tl.exp2(m_i - shift)
    p = tl.exp2(s - shift[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_ptrs, mask=k_ok[:, None] & d_ok[None, :], other=0.0)
    if FP32:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="tf32x3")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _tree_attention_kernel(
    q_ptr, kp_ptr, vp_ptr, kn_ptr, vn_ptr, ks_ptr, o_ptr, qk_scale,
    HKV, G, N, B, P, D,
    sq_b, sq_h, sq_n, sq_i, sq_d,
    skp_b, skp_h, skp_k, skp_d,
    svp_b, svp_h, svp_k, svp_d,
    skn_b, skn_h, skn_n, skn_i, skn_d,
    svn_b, svn_h, svn_n, svn_i, svn_d,
    FP32: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    row = (bh // HKV).to(tl.int64)
    kvh = (bh % HKV).to(tl.int64)
    num_rows = N * B * G
    r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query row r = (n * B + i) * G + g
    r_ok = r < num_rows
    nb = r // G
    g = r - nb * G
    n = nb // B
    i = nb - n * B
    h = kvh * G + g
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q_off = row * sq_b + h * sq_h + n.to(tl.int64) * sq_n + i * sq_i
    q = tl.load(q_ptr + q_off[:, None] + d[None, :] * sq_d, mask=r_ok[:, None] & d_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], NEG_INF, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # shared prefix: every tile is loaded once for all the rows (nodes and grouped heads) of this program
    ks = tl.load(ks_ptr + row).to(tl.int32)
    kp_base = kp_ptr + row * skp_b + kvh * skp_h
    vp_base = vp_ptr + row * svp_b + kvh * svp_h
    for k0 in range((ks // BLOCK_N) * BLOCK_N, P, BLOCK_N):
        kk = k0 + tl.arange(0, BLOCK_N)
        k_ok = (kk >= ks) & (kk < P)
        kt_ptrs = kp_base + kk[None, :] * skp_k + d[:, None] * skp_d
        v_ptrs = vp_base + kk[:, None] * svp_k + d[None, :] * svp_d
        m_i, l_i, acc = _attend(q, kt_ptrs, v_ptrs, k_ok, d_ok, k_ok[None, :], m_i, l_i, acc, qk_scale, FP32)

    # node-local keys of the nodes this tile's rows belong to, block-diagonal
    last_row = tl.minimum(pid_m * BLOCK_M + BLOCK_M, num_rows) - 1
    first_key = ((pid_m * BLOCK_M) // G // B) * B
    end_key = ((last_row // G) // B + 1) * B
    kn_base = kn_ptr + row * skn_b + kvh * skn_h
    vn_base = vn_ptr + row * svn_b + kvh * svn_h
    for k0 in range(first_key, end_key, BLOCK_N):
        kk = k0 + tl.arange(0, BLOCK_N)
        k_ok = kk < end_key
        kn_node = kk // B
        ki = kk - kn_node * B
        kt_ptrs = kn_base + kn_node[None, :].to(tl.int64) * skn_n + ki[None, :] * skn_i + d[:, None] * skn_d
        v_ptrs = vn_base + kn_node[:, None].to(tl.int64) * svn_n + ki[:, None] * svn_i + d[None, :] * svn_d
        same = k_ok[None, :] & (kn_node[None, :] == n[:, None])
        m_i, l_i, acc = _attend(q, kt_ptrs, v_ptrs, k_ok, d_ok, same, m_i, l_i, acc, qk_scale, FP32)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_off = (((row * (HKV * G) + h) * N + n) * B + i) * D
    tl.store(o_ptr + o_off[:, None] + d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=r_ok[:, None] & d_ok[None, :])


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def tree_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale):
    if q.dtype == torch.float64:
        return reference.tree_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale)
    b, hq, n, block, dim = q.shape
    hkv, prefix = k_prefix.shape[1], k_prefix.shape[2]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    rows = n * block * (hq // hkv) if hkv else 0
    if out.numel() == 0 or rows == 0:
        return out
    if scale is None:
        scale = 1.0 / math.sqrt(dim)
    block_d = max(16, next_pow2(dim))
    block_m = _env_int("SPOT_TRITON_ATTN_BLOCK_M", 128 if q.is_cuda and block_d <= 128 else 64)
    block_n = _env_int("SPOT_TRITON_ATTN_BLOCK_N", 32 if q.dtype == torch.float32 else 64)  # fp32: registers
    if not q.is_cuda:  # the interpreter: small tiles keep the tests fast
        block_m, block_n = 16, 16
    grid = (triton.cdiv(rows, block_m), b * hkv)
    with on_device(q):
        _tree_attention_kernel[grid](
            q, k_prefix, v_prefix, k_nodes, v_nodes, key_start.contiguous(), out, scale * _LOG2E,
            hkv, hq // hkv, n, block, prefix, dim,
            *q.stride(), *k_prefix.stride(), *v_prefix.stride(), *k_nodes.stride(), *v_nodes.stride(),
            FP32=q.dtype == torch.float32, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
            num_warps=_env_int("SPOT_TRITON_ATTN_WARPS", 8 if block_m >= 128 else 4),
            num_stages=_env_int("SPOT_TRITON_ATTN_STAGES", 2),
        )
    return out


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {
    "tree_mask": tree_mask,
    "tree_mask_additive": tree_mask_additive,
    "tree_mask_packed": tree_mask_packed,
    "tree_position_ids": tree_position_ids,
    "tree_attention": tree_attention,
}
