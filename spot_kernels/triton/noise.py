"""Triton kernel for spot::noise_uniform (docs/noise.md): the coupled-noise uniforms, bit for bit.

The four int64 inputs broadcast; their expanded views are read through strides (no broadcast copy) after merging
dimensions that are contiguous for all four, up to four dimensions (more are materialised first).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import mix32, on_device, row_key, seed_key, uniform_from_words

_BLOCK = 1024
_MAX_DIMS = 4


@triton.jit(do_not_specialize=["seed_key"])
def _noise_kernel(out_ptr, r_ptr, p_ptr, s_ptr, v_ptr, seed_key, numel, d1, d2, d3,
                  r0, r1, r2, r3, p0, p1, p2, p3, s0, s1, s2, s3, v0, v1, v2, v3,
                  BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = idx < numel
    i3 = idx % d3
    t = idx // d3
    i2 = t % d2
    t = t // d2
    i1 = t % d1
    i0 = t // d1
    row = tl.load(r_ptr + (i0 * r0 + i1 * r1 + i2 * r2 + i3 * r3), mask=live, other=0)
    pos = tl.load(p_ptr + (i0 * p0 + i1 * p1 + i2 * p2 + i3 * p3), mask=live, other=0)
    step = tl.load(s_ptr + (i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3), mask=live, other=0)
    vid = tl.load(v_ptr + (i0 * v0 + i1 * v1 + i2 * v2 + i3 * v3), mask=live, other=0)
    key = row_key(seed_key.to(tl.uint32), row, pos, step)
    word = mix32(key ^ vid.to(tl.uint32))
    tl.store(out_ptr + idx, uniform_from_words(word), mask=live)


def _coalesced(shape, stride_lists):
    """Drop size-1 dims and merge neighbours that are contiguous in every tensor -> (sizes, [strides per tensor])."""
    dims = [i for i, n in enumerate(shape) if n != 1]
    sizes = [shape[i] for i in dims]
    strides = [[st[i] for i in dims] for st in stride_lists]
    i = len(sizes) - 2
    while i >= 0:
        if all(st[i] == st[i + 1] * sizes[i + 1] for st in strides):
            sizes[i] *= sizes[i + 1]
            for st in strides:
                st[i] = st[i + 1]
            del sizes[i + 1]
            for st in strides:
                del st[i + 1]
        i -= 1
    return sizes, strides


def noise_uniform(seed: int, rows: torch.Tensor, positions: torch.Tensor, steps: torch.Tensor,
                  vocab_ids: torch.Tensor) -> torch.Tensor:
    tensors = (rows, positions, steps, vocab_ids)
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    out = torch.empty(shape, dtype=torch.float32, device=rows.device)
    numel = out.numel()
    if numel == 0:
        return out
    views = [t.expand(shape) for t in tensors]
    sizes, strides = _coalesced(list(shape), [list(v.stride()) for v in views])
    if len(sizes) > _MAX_DIMS:  # rare: materialise the broadcast
        views = [v.contiguous() for v in views]
        sizes, strides = [numel], [[1] for _ in views]
    pad = _MAX_DIMS - len(sizes)
    sizes = [1] * pad + sizes
    strides = [[0] * pad + st for st in strides]
    grid = (triton.cdiv(numel, _BLOCK),)
    with on_device(out):
        _noise_kernel[grid](out, *views, seed_key(seed), numel, sizes[1], sizes[2], sizes[3],
                            *strides[0], *strides[1], *strides[2], *strides[3], BLOCK=_BLOCK)
    return out


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {"noise_uniform": noise_uniform}
