"""spot::noise_uniform: the coupled-noise uniforms (docs/noise.md); schema, wrapper, check and fake."""

from __future__ import annotations

import math

import torch

from .. import checks
from ..opdef import OpDef, call

SCHEMA = ('noise_uniform(int seed, Tensor rows, Tensor positions, Tensor steps, Tensor vocab_ids, '
          'str backend="auto") -> Tensor')


def noise_uniform(
    seed: int,
    rows: torch.Tensor,
    positions: torch.Tensor,
    steps: torch.Tensor,
    vocab_ids: torch.Tensor,
    backend: str = "auto",
) -> torch.Tensor:
    """The coupled-noise uniforms u(seed, row, position, step, vocab id), bit for bit as in docs/noise.md.

    Args:
        seed: int in [0, 2^63).
        rows, positions, steps, vocab_ids: int64 tensors, broadcastable, on one device (only the low 32 bits of
            each value are used).
        backend: see spot_kernels.ops.
    Returns:
        float32 tensor of the broadcast shape, values in [2^-24, 1 - 2^-24]; the Gumbel noise is -log(-log(u)).
    """
    return call("noise_uniform", seed, rows, positions, steps, vocab_ids, backend)


def check(seed, rows, positions, steps, vocab_ids, *, values: bool) -> torch.device:
    op = "noise_uniform"
    checks.seed(op, seed)
    named = {"rows": rows, "positions": positions, "steps": steps, "vocab_ids": vocab_ids}
    for name, t in named.items():
        checks.tensor(op, name, t, checks.I64)
    try:
        torch.broadcast_shapes(*(t.shape for t in named.values()))
    except RuntimeError:
        shapes = ", ".join(f"{n}={list(t.shape)}" for n, t in named.items())
        raise ValueError(f"spot.{op}: rows, positions, steps and vocab_ids must broadcast; got {shapes}") from None
    device = checks.same_device(op, **named)
    checks.footprint(op, 4 * math.prod(torch.broadcast_shapes(*(t.shape for t in named.values()))), **named)
    return device


def fake(seed, rows, positions, steps, vocab_ids, backend="auto"):
    check(seed, rows, positions, steps, vocab_ids, values=False)
    shape = torch.broadcast_shapes(rows.shape, positions.shape, steps.shape, vocab_ids.shape)
    return rows.new_empty(shape, dtype=torch.float32)


OPS = [OpDef(SCHEMA, check, fake)]
