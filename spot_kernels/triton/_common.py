"""Helpers shared by the Triton kernels: the coupled-noise hash (docs/noise.md), order-preserving int64 keys,
precise math, and launch utilities.

Keys: a float32 value and an index pack into one int64 such that a larger key means a larger value and, for equal
values, a lower index. One integer max reduction then gives "the largest value, ties lowest index", and
`tl.topk`/`tl.sort` on keys give exact, deterministic top-K sets.
"""

from __future__ import annotations

import contextlib
import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "") == "1"

NEG_INF = tl.constexpr(float("-inf"))
POS_INF = tl.constexpr(float("inf"))
MIN_KEY = tl.constexpr(-(2**63))
GUMBEL_BOUND = tl.constexpr(17.0)  # > -log(-log(1 - 2^-24)) = 16.64, the largest Gumbel value (docs/noise.md)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _speed_up_interpreter() -> None:
    """The CPU interpreter re-patches triton.language on every nested @jit call (an inspect.getmembers scan, over
    half the run time of these kernels). Skip that scan when every module the callee sees is already patched; the
    outcome is the same. Best effort: any surprise in the interpreter's internals leaves it untouched."""
    try:
        from triton.runtime import interpreter

        original = interpreter._patch_lang
        if getattr(original, "_spot_fast", False):
            return
        is_builtin = tl.core.is_builtin

        def patch_lang(fn):
            langs = [v for v in fn.__globals__.values() if v is tl or v is tl.core]
            if (langs and not is_builtin(tl.tensor.__add__) and not is_builtin(tl.math.exp)
                    and not any(is_builtin(getattr(lang, "where", None)) for lang in langs)):
                return interpreter._LangPatchScope()
            return original(fn)

        patch_lang._spot_fast = True
        interpreter._patch_lang = patch_lang

        # xor_sum (the compare-and-swap of tl.sort / tl.topk) has no numpy fast path: the interpreter would apply
        # the combine function element by element in Python.
        import numpy as np

        xor_combine = tl.standard._xor_combine
        reduce_impl = interpreter.ReduceOps.apply_impl

        def apply_impl(self, input):
            if self.combine_fn is xor_combine and self.axis is not None and len(input) == 1:
                x = input[0]
                return self.to_tensor(np.bitwise_xor.reduce(x.handle.data, axis=self.axis, keepdims=self.keep_dims),
                                      x.dtype)
            return reduce_impl(self, input)

        interpreter.ReduceOps.apply_impl = apply_impl
    except Exception:  # noqa: BLE001 - an optimisation only
        pass


if INTERPRET:
    _speed_up_interpreter()


# --------------------------------------------------------------------------------------------- precise math
# The interpreter has no libdevice; on the GPU libdevice's log/exp are the CUDA math library's logf/expf, the same
# functions PyTorch's CUDA kernels call, so Gumbel values match the CUDA reference bit for bit.
if INTERPRET:
    _math = tl
else:
    from triton.language.extra import libdevice as _math


@triton.jit
def precise_log(x):
    return _math.log(x)


@triton.jit
def precise_exp(x):
    return _math.exp(x)


# ---------------------------------------------------------------------------------------------- coupled noise

def seed_key(seed: int) -> int:
    """The seed's part of the row key (a u32 Python int), as in spot_kernels.reference.noise."""
    from ..reference.noise import seed_key as ref_seed_key

    return ref_seed_key(seed)


@triton.jit
def mix32(x):
    """lowbias32 on uint32 tensors (wrap-around multiplies, logical shifts)."""
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    x ^= x >> 16
    return x


@triton.jit
def row_key(seed_key, row, pos, step):
    """mix(mix(mix(seed_key ^ row) ^ pos) ^ step) on the low 32 bits of int64 row/pos/step; seed_key: uint32."""
    h = mix32(row.to(tl.uint32) ^ seed_key)
    h = mix32(h ^ pos.to(tl.uint32))
    return mix32(h ^ step.to(tl.uint32))


@triton.jit
def uniform_from_words(w):
    """(float32(w >> 9) + 0.5) * 2^-23: exact, in [2^-24, 1 - 2^-24]."""
    return ((w >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07


@triton.jit
def gumbel_from_words(w):
    """-log(-log(u)) in float32."""
    return -precise_log(-precise_log(uniform_from_words(w)))


# ------------------------------------------------------------------------------------------------ int64 keys

@triton.jit
def pack_key(x, idx):
    """int64 key of float32 x (no NaN; -0.0 is treated as +0.0) and int32 index 0 <= idx < 2^31 - 1: a larger key
    is a larger value, and among equal values the lower index."""
    x = tl.where(x == 0, 0.0, x)
    b = x.to(tl.int32, bitcast=True)
    o = b ^ ((b >> 31) & 0x7FFFFFFF)
    return (o.to(tl.int64) << 32) | (2147483647 - idx).to(tl.int64)  # 2^31 - 1: the largest index


@triton.jit
def key_value(key):
    """The float32 value of a key (meaningless for MIN_KEY)."""
    o = (key >> 32).to(tl.int32)
    b = o ^ ((o >> 31) & 0x7FFFFFFF)
    return b.to(tl.float32, bitcast=True)


@triton.jit
def key_index(key):
    """The int32 index of a key."""
    low = key - ((key >> 32) << 32)
    return 2147483647 - low.to(tl.int32)


# ------------------------------------------------------------------------------------------------ launching

def on_device(t: torch.Tensor):
    """Context that makes t's CUDA device current (Triton launches on the current device)."""
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()
