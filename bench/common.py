"""Helpers shared by the microbenchmarks: bench/bench_ops.py (pytest-benchmark) and bench/gpu_bench.py (standalone).

The random inputs of every op and the CUDA-graph capture harness are the tests' own (tests/helpers.py), so a
benchmark measures the inputs the parity tests check.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import spot_kernels  # noqa: E402
from helpers import (  # noqa: E402,F401  (re-exported for the benchmarks)
    attention_inputs,
    capture,
    children_inputs,
    random_trees,
    score_inputs,
)

I64 = torch.int64
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def nbytes(*tensors) -> int:
    """Bytes of the tensors among `tensors` (what an op must touch at least: inputs read once, outputs written)."""
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def backends_for(op: str, device=DEVICE) -> list[str]:
    """The backends that can run `op` on `device`, reference first."""
    return [b for b in ("reference", "triton", "cuda") if b in spot_kernels.available_backends(op, device)]
