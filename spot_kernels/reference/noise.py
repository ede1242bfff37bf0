"""Coupled noise (docs/noise.md), the oracle every backend must match bit for bit.

u32 words are held in int64 tensors with values in [0, 2^32); products are formed with a 16-bit split of the
constant so that nothing overflows int64 (PyTorch has no unsigned 32-bit arithmetic).
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
_M1 = 0x7FEB352D
_M2 = 0x846CA68B


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for int64 x in [0, 2^32): ((x * c_hi mod 2^16) << 16) + x * c_lo, all below 2^49."""
    return ((((x * (c >> 16)) & 0xFFFF) << 16) + x * (c & 0xFFFF)) & MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (C. Wellons), a bijection on u32. x: int64 in [0, 2^32) -> int64 in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _M1)
    x = x ^ (x >> 15)
    x = _mul32(x, _M2)
    return x ^ (x >> 16)


def mix32_int(x: int) -> int:
    """mix32 on a Python int (used for the seed words, which are scalars)."""
    x &= MASK32
    x ^= x >> 16
    x = (x * _M1) & MASK32
    x ^= x >> 15
    x = (x * _M2) & MASK32
    return x ^ (x >> 16)


def seed_key(seed: int) -> int:
    """mix(mix(seed_lo ^ 0x9E3779B9) ^ seed_hi): the seed's part of row_key, a u32 Python int."""
    return mix32_int(mix32_int((seed & MASK32) ^ _GOLDEN) ^ ((seed >> 32) & MASK32))


def row_key(seed: int, rows: torch.Tensor, positions: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Per-row hash key. rows, positions, steps: int64, broadcastable -> int64 u32 words of the broadcast shape."""
    h = mix32((rows & MASK32) ^ seed_key(seed))
    h = mix32(h ^ (positions & MASK32))
    return mix32(h ^ (steps & MASK32))


def words(key: torch.Tensor, vocab_ids: torch.Tensor) -> torch.Tensor:
    """word = mix(row_key ^ v). key, vocab_ids: int64, broadcastable -> int64 u32 words."""
    return mix32(key ^ (vocab_ids & MASK32))


def uniform_from_words(w: torch.Tensor) -> torch.Tensor:
    """(float32(w >> 9) + 0.5) * 2^-23: float32 in [2^-24, 1 - 2^-24], exact on every backend."""
    return ((w >> 9).to(torch.float32) + 0.5) * (2.0**-23)


def gumbel_from_words(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """-log(-log(u)) in `dtype` (float32, or float64 for float64 logits); always finite."""
    u = uniform_from_words(w).to(dtype)
    return -torch.log(-torch.log(u))


def noise_uniform(
    seed: int, rows: torch.Tensor, positions: torch.Tensor, steps: torch.Tensor, vocab_ids: torch.Tensor
) -> torch.Tensor:
    """Reference for spot::noise_uniform: float32 uniforms of the broadcast shape of the four int64 tensors."""
    key = row_key(seed, rows, positions, steps)
    return uniform_from_words(words(key, vocab_ids)).contiguous()


# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {"noise_uniform": noise_uniform}
