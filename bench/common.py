"""Helpers shared by the microbenchmarks: bench/bench_ops.py (pytest-benchmark) and bench/gpu_bench.py (standalone).

The random inputs of every op and the CUDA-graph capture harness are the tests' own (tests/helpers.py), so a
benchmark measures the inputs the parity tests check.
"""

from __future__ import annotations

import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import spot_kernels  # noqa: E402
from helpers import (  # noqa: E402,F401  (re-exported for the benchmarks)
    attention_inputs,
    capture,
    children_inputs,
    commit_rule_inputs,
    random_trees,
    score_inputs,
    step_trees,
)

I64 = torch.int64
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def nbytes(*tensors) -> int:
    """Bytes of the tensors among `tensors` (what an op must touch at least: inputs read once, outputs written)."""
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def backends_for(op: str, device=DEVICE) -> list[str]:
    """The backends that can run `op` on `device`, reference first."""
    return [b for b in ("reference", "triton", "cuda") if b in spot_kernels.available_backends(op, device)]


def frontier_inputs(rows, w, block, top, branch, width, temperature=1.0, mask_id=32000, device=DEVICE):
    """Every argument of spot::expand_frontier for `rows` rows of `w` frontier nodes: select_children's inputs
    (children_inputs, vocabulary 32000) with each node's block state (mask_id where masked) and each row's stale
    top-K (its first node's)."""
    logits, masked, path, probs, ids, seed, _, _, _, temperature, _ = children_inputs(
        rows * w, block, top, branch, temperature=temperature, device=device)
    states = torch.where(masked, mask_id, torch.zeros_like(masked, dtype=I64))
    lead = torch.arange(rows, dtype=I64, device=device)
    return (logits, states, path, probs[::w].contiguous(), ids[::w].contiguous(), seed, lead, lead * 32,
            torch.ones_like(lead), temperature, mask_id, branch, width)


def steps_inputs(rows, w, block, top, branch, width, temperature=1.0, mask_id=32000, device=DEVICE):
    """Every argument of spot::expand_steps: frontier_inputs' with a size distribution per frontier node as a
    threshold rule drafts it (spot.tree.step_sizes): 0.9 on a size of 1 to 4 positions, 0.05 on one more and on one
    fewer, within the node's masked positions."""
    args = frontier_inputs(rows, w, block, top, branch, width, temperature, mask_id, device)
    masked = (args[1] == mask_id).sum(1, keepdim=True)
    g = torch.Generator(device=device).manual_seed(1)
    size = torch.randint(1, 5, (rows * w, 1), generator=g, device=device).minimum(masked)
    m = torch.arange(block + 1, device=device)[None]
    sizes = torch.where(m == size, math.log(0.9), torch.where(((m - size).abs() == 1) & (m >= 1) & (m <= masked),
                                                              math.log(0.05), -math.inf)).to(args[0].dtype)
    return args[:3] + (sizes,) + args[3:]


def order_inputs(nodes, block=32, device=DEVICE):
    """The shipped drafter's spot::order_logits arguments for `nodes` draft nodes of one stale row (random stale
    inputs, about half the positions masked, as mid-block; depths 0 to 3; scale 1.25)."""
    from spot import load_drafter
    from spot.order_model import pack_order_weights

    model = load_drafter().model
    cfg = model.cfg
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(3 * torch.randn(1, block, cfg.top_k, generator=g), -1).sort(-1, descending=True).values
    stale_masked = torch.rand(1, block, generator=g) < 0.7
    with torch.no_grad():
        stale = model.stale_inputs(probs, torch.rand(1, block, generator=g), stale_masked,
                                   torch.randint(0, cfg.vocab_size, (1, block), generator=g))
    node_masked = stale_masked & (torch.rand(nodes, block, generator=g) < 0.8)
    args = (stale.features, stale.masked, stale.tokens, torch.zeros(nodes, dtype=I64), node_masked,
            torch.arange(nodes, dtype=I64) % 4, torch.rand(1, block, generator=g), pack_order_weights(model),
            cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff, cfg.max_block, cfg.max_depth, 1.25)
    return tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
