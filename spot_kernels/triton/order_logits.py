"""Triton kernel for spot::order_logits (docs/ops.md, "Order drafter forward").

One program per draft node: the node's activations x [B, d_model] (B padded to a power of two >= 16) stay in
registers through the whole forward. The program gathers its row's stale features, builds the node columns, projects
them, adds the position / relative-position / depth (/ token) embeddings, then per layer: LayerNorm, per head the
q, k, v products from slices of the packed qkv weight, the bidirectional softmax over the block and the head's share
of the output projection; LayerNorm, the GELU MLP chunked over d_ff; then the final LayerNorm and the head. Every
product is a float32 tl.dot with input_precision="ieee" (no TF32), so the logits differ from the reference's only by
the order of float32 sums (tolerance in tests/ops/test_order_logits.py).

Not yet timed on a GPU. Compiled for sm_90 at the shipped drafter's sizes (bench/triton_compile_check.py), 8 warps
use 255 registers and spill about 3 KB per thread (4 warps: 32 registers and 39 KB of spills; 16 warps: 128
registers, 2 KB); the launch uses 8.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..ops.order_logits import NODE_COLUMNS, RESAMPLED_COLUMNS, weight_offsets
from ._common import NEG_INF, next_pow2, on_device

_EPS = 1e-5  # nn.LayerNorm's default


@triton.jit
def _layer_norm(x, w_ptr, c, c_ok, D, eps):
    """LayerNorm over the valid columns of x [BB, BD] (padded columns come out 0)."""
    mean = tl.sum(x, axis=1) / D
    xc = tl.where(c_ok[None, :], x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / D
    w = tl.load(w_ptr + c, mask=c_ok, other=0.0)
    b = tl.load(w_ptr + D + c, mask=c_ok, other=0.0)  # the bias follows the weight in the packed layout
    return xc * (1.0 / tl.sqrt(var + eps))[:, None] * w[None, :] + b[None, :]


@triton.jit
def _order_logits_kernel(
    feat_ptr, sm_ptr, tok_ptr, row_ptr, nm_ptr, depth_ptr, res_ptr, w_ptr, out_ptr,
    B, S, D, HD, D_FF, T, N_HEADS, N_LAYERS, MAX_BLOCK, MAX_DEPTH,
    OFF_POS, OFF_REL, OFF_DEPTH, OFF_TOK, OFF_LAYERS, LAYER_SIZE, scale, eps, rs_r, rs_d, out_scale,
    HAS_TOK: tl.constexpr, HAS_RES: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_IN: tl.constexpr, BLOCK_HD: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_T: tl.constexpr,
):
    n = tl.program_id(0).to(tl.int64)
    row = tl.load(row_ptr + n)
    j = tl.arange(0, BLOCK_B)
    j_ok = j < B
    c = tl.arange(0, BLOCK_D)
    c_ok = c < D
    n_in = S + 3
    if HAS_RES:
        n_in += 2

    # the input columns: the row's stale features, then the node's own (reference.node_columns)
    i = tl.arange(0, BLOCK_IN)
    feats = tl.load(feat_ptr + row * B * S + j[:, None] * S + i[None, :], mask=j_ok[:, None] & (i[None, :] < S),
                    other=0.0)
    node_m = tl.load(nm_ptr + n * B + j, mask=j_ok, other=0) != 0
    stale_m = tl.load(sm_ptr + row * B + j, mask=j_ok, other=0) != 0
    masked_f = node_m.to(tl.float32)
    frac = tl.sum(masked_f, axis=0) / B
    feats = tl.where(i[None, :] == S, masked_f[:, None], feats)
    feats = tl.where(i[None, :] == S + 1, (stale_m & ~node_m).to(tl.float32)[:, None], feats)
    feats = tl.where(i[None, :] == S + 2, frac, feats)
    if HAS_RES:
        # per row (rs_d 0) or per row and depth: the node's row of the per-pass tensor
        r = tl.load(res_ptr + row * rs_r + tl.load(depth_ptr + n) * rs_d + j, mask=j_ok, other=0.0)
        r = tl.minimum(tl.maximum(tl.where(r != r, 0.0, r), 0.0), 1.0)  # nan_to_num(0).clamp(0, 1)
        feats = tl.where(i[None, :] == S + 3, r[:, None], feats)
        feats = tl.where(i[None, :] == S + 4, (tl.log(tl.maximum(r, 1e-6)) / 14.0)[:, None], feats)
    feats = tl.where(j_ok[:, None], feats, 0.0)
    w_in = tl.load(w_ptr + c[None, :] * n_in + i[:, None], mask=c_ok[None, :] & (i[:, None] < n_in), other=0.0)
    x = tl.dot(feats, w_in, input_precision="ieee")
    x += tl.load(w_ptr + D * n_in + c, mask=c_ok, other=0.0)[None, :]

    # position, relative position (to the node's leftmost masked position) and depth embeddings
    first = tl.min(tl.where(node_m & j_ok, j, B), axis=0)
    rel = tl.minimum(tl.maximum(j - first, -MAX_BLOCK), MAX_BLOCK - 1) + MAX_BLOCK
    depth = tl.minimum(tl.maximum(tl.load(depth_ptr + n), 0), MAX_DEPTH - 1)
    jc_ok = j_ok[:, None] & c_ok[None, :]
    x += tl.load(w_ptr + OFF_POS + j[:, None] * D + c[None, :], mask=jc_ok, other=0.0)
    x += tl.load(w_ptr + OFF_REL + rel[:, None] * D + c[None, :], mask=jc_ok, other=0.0)
    x += tl.load(w_ptr + OFF_DEPTH + depth * D + c, mask=c_ok, other=0.0)[None, :]
    if HAS_TOK:
        t = tl.arange(0, BLOCK_T)
        tok = tl.load(tok_ptr + row * B * T + j[:, None] * T + t[None, :], mask=j_ok[:, None] & (t[None, :] < T),
                      other=0.0)
        w_tok = tl.load(w_ptr + OFF_TOK + c[None, :] * T + t[:, None], mask=c_ok[None, :] & (t[:, None] < T),
                        other=0.0)
        x += tl.dot(tok, w_tok, input_precision="ieee")

    e = tl.arange(0, BLOCK_HD)
    e_ok = e < HD
    f = tl.arange(0, BLOCK_F)
    for layer in range(N_LAYERS):
        base = w_ptr + OFF_LAYERS + layer * LAYER_SIZE
        qkv_w = base + 2 * D
        qkv_b = qkv_w + 3 * D * D
        out_w = qkv_b + 3 * D
        out_b = out_w + D * D
        ff1_w = out_b + 3 * D  # after out.bias and norm2's weight and bias
        ff1_b = ff1_w + D_FF * D
        ff2_w = ff1_b + D_FF
        ff2_b = ff2_w + D * D_FF
        h = _layer_norm(x, base, c, c_ok, D, eps)
        attn = tl.zeros([BLOCK_B, BLOCK_D], dtype=tl.float32)
        wt_ok = c_ok[:, None] & e_ok[None, :]
        for head in range(N_HEADS):
            col = head * HD + e  # this head's rows of q (then + D: k, + 2D: v)
            wq = tl.load(qkv_w + col[None, :] * D + c[:, None], mask=wt_ok, other=0.0)
            wk = tl.load(qkv_w + (D + col[None, :]) * D + c[:, None], mask=wt_ok, other=0.0)
            wv = tl.load(qkv_w + (2 * D + col[None, :]) * D + c[:, None], mask=wt_ok, other=0.0)
            q = tl.dot(h, wq, input_precision="ieee") + tl.load(qkv_b + col, mask=e_ok, other=0.0)[None, :]
            k = tl.dot(h, wk, input_precision="ieee") + tl.load(qkv_b + D + col, mask=e_ok, other=0.0)[None, :]
            v = tl.dot(h, wv, input_precision="ieee") + tl.load(qkv_b + 2 * D + col, mask=e_ok, other=0.0)[None, :]
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            s = tl.where(j_ok[None, :], s, NEG_INF)  # bidirectional over the block's B positions
            p = tl.exp(s - tl.max(s, axis=1)[:, None])
            p = p / tl.sum(p, axis=1)[:, None]
            a = tl.dot(p, v, input_precision="ieee")
            wo = tl.load(out_w + c[None, :] * D + col[:, None], mask=e_ok[:, None] & c_ok[None, :], other=0.0)
            attn += tl.dot(a, wo, input_precision="ieee")
        x += attn + tl.load(out_b + c, mask=c_ok, other=0.0)[None, :]
        h = _layer_norm(x, out_b + D, c, c_ok, D, eps)
        ff = tl.zeros([BLOCK_B, BLOCK_D], dtype=tl.float32)
        for f0 in range(0, D_FF, BLOCK_F):
            fi = f0 + f
            f_ok = fi < D_FF
            w1 = tl.load(ff1_w + fi[None, :] * D + c[:, None], mask=c_ok[:, None] & f_ok[None, :], other=0.0)
            u = tl.dot(h, w1, input_precision="ieee") + tl.load(ff1_b + fi, mask=f_ok, other=0.0)[None, :]
            u = 0.5 * u * (1.0 + tl.math.erf(u * 0.7071067811865476))  # exact GELU
            w2 = tl.load(ff2_w + c[None, :] * D_FF + fi[:, None], mask=f_ok[:, None] & c_ok[None, :], other=0.0)
            ff += tl.dot(u, w2, input_precision="ieee")
        x += ff + tl.load(ff2_b + c, mask=c_ok, other=0.0)[None, :]

    final = w_ptr + OFF_LAYERS + N_LAYERS * LAYER_SIZE
    h = _layer_norm(x, final, c, c_ok, D, eps)
    head_w = tl.load(final + 2 * D + c, mask=c_ok, other=0.0)
    logit = tl.sum(h * head_w[None, :], axis=1) + tl.load(final + 3 * D)
    tl.store(out_ptr + n * B + j, tl.where(node_m, logit, NEG_INF) * out_scale, mask=j_ok)


def order_logits(features, stale_masked, tokens, node_row, node_masked, depth, resampled, weights, d_model: int,
                 n_layers: int, n_heads: int, d_ff: int, max_block: int, max_depth: int,
                 scale: float = 1.0) -> torch.Tensor:
    n, block = node_masked.shape
    out = torch.empty((n, block), dtype=torch.float32, device=node_masked.device)
    if n == 0 or block == 0:
        return out
    n_stale = features.shape[2]
    n_inputs = n_stale + NODE_COLUMNS + (RESAMPLED_COLUMNS if resampled is not None else 0)
    token_dim = tokens.shape[2] if tokens is not None else 0
    at = weight_offsets(n_inputs, d_model, n_layers, d_ff, max_block, max_depth, token_dim)
    layer_size = (at["layers.1.norm1.weight"] if n_layers > 1 else at["norm.weight"]) - at["layers.0.norm1.weight"]
    head_dim = d_model // n_heads
    placeholder = features  # an unread pointer for an absent optional input
    if resampled is not None:
        resampled = resampled.contiguous()
        res_strides = (resampled.stride(0), resampled.stride(1) if resampled.dim() == 3 else 0)
    else:
        res_strides = (0, 0)
    with on_device(features):
        _order_logits_kernel[(n,)](
            features.contiguous(), stale_masked.contiguous(),
            tokens.contiguous() if tokens is not None else placeholder, node_row.contiguous(),
            node_masked.contiguous(), depth.contiguous(),
            resampled if resampled is not None else placeholder, weights, out,
            block, n_stale, d_model, head_dim, d_ff, max(token_dim, 1), n_heads, n_layers, max_block, max_depth,
            at["pos.weight"], at["rel.weight"], at["depth.weight"], at.get("tok_proj.weight", 0),
            at["layers.0.norm1.weight"], layer_size, 1.0 / math.sqrt(head_dim), _EPS, *res_strides, float(scale),
            HAS_TOK=tokens is not None, HAS_RES=resampled is not None, BLOCK_B=max(16, next_pow2(block)),
            BLOCK_D=max(16, next_pow2(d_model)), BLOCK_IN=max(16, next_pow2(n_inputs)),
            BLOCK_HD=max(16, next_pow2(head_dim)), BLOCK_F=min(64, max(16, next_pow2(d_ff))),
            BLOCK_T=max(16, next_pow2(token_dim)), num_warps=8,
        )
    return out


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {"order_logits": order_logits}
