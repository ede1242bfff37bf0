"""Batch-invariant Triton kernels for the model's projections and norms (docs/half_precision.md, "GPUs").

Speculative decoding is exact when a node's logits are bit-identical whether the node is scored alone or beside
other nodes of a tree in one pass. cuBLAS and PyTorch's reduction kernels pick their algorithm (split-K, tile
shapes, how many threads share a row) from the whole problem's shape, so on a GPU a row's result can change in the
last bits with the number of rows in the call. The kernels here fix the summation order of every output element
whatever the call:

- `linear(x, w)`: x [..., K] @ w [N, K]^T. One program per (BLOCK_M, BLOCK_N) output tile, no split-K, the K loop
  always from 0 to K in steps of BLOCK_K, float32 accumulation (inputs are upcast to float32 in registers and
  multiplied as IEEE float32, `input_precision="ieee"`: no TF32). The tile sizes depend only on K, N and the
  device type, never on the number of rows M, so a row's result depends neither on M nor on where the row sits
  (rows past M load as zeros and are not stored).
- `rms_norm(x, weight, eps)`: one program per row on a GPU, the sum of squares over the features accumulated in
  a fixed BLOCK_D-wide float32 vector in a fixed order, then one tree reduction of that vector. (Under the
  interpreter a program takes ROWS rows, each reduced alone along its own axis, because the interpreter runs
  programs one by one in Python; `rows_per_program=1` runs the GPU's configuration there, which the tests check.)

The result is rounded to x's dtype once, at the store (nothing is rounded when x is float32, as in the model's
invariant path, where activations are float32 and the weights stay in half precision, upcast exactly on load).

These are plain Python functions, not `torch.ops.spot.*` ops: they are a model-side utility used by
`spot.model` on its batch-invariant path, with one implementation and no backend choice to dispatch (the op
families of spot_kernels.ops each have reference / cpu / cuda / triton kernels checked against each other; a
matrix multiply needs no such family, and registering one would put every projection behind the op dispatcher
for nothing). They run on CUDA tensors, and on CPU tensors under TRITON_INTERPRET=1 (set before this module is
imported), where tests/ops/test_batch_invariant.py checks them. Written for Triton 3.6 and 3.8.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import next_pow2, on_device

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _linear_kernel(x_ptr, w_ptr, o_ptr, M, N, K, sxm, sxk, swn, swk, som, son,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):  # always the same K tiles in the same order: no split-K
        kk = k0 + rk
        k_ok = kk < K
        a = tl.load(x_ptr + rm[:, None] * sxm + kk[None, :] * sxk, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptr + rn[None, :] * swn + kk[:, None] * swk, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    tl.store(o_ptr + rm[:, None] * som + rn[None, :] * son, acc.to(o_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, o_ptr, M, D, sx, so, eps, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    r_ok = (r < M)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    acc = tl.zeros((ROWS, BLOCK_D), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):  # the same feature blocks in the same order for every row
        x = tl.load(x_ptr + r[:, None] * sx + d0 + d, mask=r_ok & (d0 + d < D), other=0.0).to(tl.float32)
        acc += x * x
    inv = 1.0 / tl.sqrt_rn(tl.sum(acc, axis=1) / D + eps)  # each row reduced alone
    for d0 in range(0, D, BLOCK_D):
        ok = r_ok & (d0 + d < D)
        x = tl.load(x_ptr + r[:, None] * sx + d0 + d, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + d0 + d, mask=d0 + d < D, other=0.0).to(tl.float32)
        tl.store(o_ptr + r[:, None] * so + d0 + d, (w * (x * inv[:, None])).to(o_ptr.dtype.element_ty), mask=ok)


def linear_tiles(n: int, k: int, device_type: str) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps) for an [M, k] @ [n, k]^T product: from n, k and the device type
    only. On sm_90 (Triton 3.8's ptxas) the 64 x 64 x 16 float32 tile takes 128 registers with 8 warps and does
    not spill (64 x 64 x 32 with 4 warps spilled 556 bytes)."""
    del k  # BLOCK_K is one constant: the K loop then has the same tiles for every call of a given K
    if device_type == "cuda":
        return 64, min(64, max(16, next_pow2(n))), 16, 8
    return 16, min(32, max(16, next_pow2(n))), 32, 4  # the interpreter: small tiles keep the tests fast


def rms_block(d: int) -> int:
    """BLOCK_D of `rms_norm` over d features: from d only."""
    return min(1024, max(16, next_pow2(d)))


def _check(name: str, x: torch.Tensor, w: torch.Tensor) -> None:
    if x.dtype not in _FLOAT_DTYPES or w.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name}: expected float32/float16/bfloat16 tensors, got {x.dtype} and {w.dtype}")
    if x.device != w.device:
        raise ValueError(f"{name}: x on {x.device} and weight on {w.device}")


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., K] @ w [N, K]^T in x's dtype, accumulated in float32 in a fixed order: the result of a row does not
    depend on the other rows of x (how many, or where the row sits)."""
    _check("linear", x, w)
    if w.dim() != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"linear: x {tuple(x.shape)} and weight {tuple(w.shape)} do not match")
    n, k = w.shape
    rows = x.reshape(-1, k)
    m = rows.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m and n:
        if k == 0:
            out.zero_()
        else:
            bm, bn, bk, warps = linear_tiles(n, k, x.device.type)
            with on_device(x):
                _linear_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
                    rows, w, out, m, n, k, *rows.stride(), *w.stride(), *out.stride(),
                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
    return out.reshape(*x.shape[:-1], n)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *, rows_per_program: int | None = None
             ) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2, -1) + eps) over x's last dimension, in x's dtype (float32 inside): one program
    per row (default on a GPU; 16 rows per program under the interpreter, each reduced alone), so a row's result
    does not depend on the other rows."""
    _check("rms_norm", x, weight)
    d = x.shape[-1]
    if weight.shape != (d,):
        raise ValueError(f"rms_norm: weight {tuple(weight.shape)} does not match x {tuple(x.shape)}")
    rows = x.reshape(-1, d)
    if d and rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if rows_per_program is None:
        rows_per_program = 1 if x.device.type == "cuda" else 16
    m = rows.shape[0]
    if out.numel():
        with on_device(x):
            _rms_norm_kernel[(triton.cdiv(m, rows_per_program),)](
                rows, weight.contiguous(), out, m, d, rows.stride(0), out.stride(0), float(eps),
                ROWS=rows_per_program, BLOCK_D=rms_block(d), num_warps=4)
    return out.reshape(x.shape)
