"""Microbenchmarks of the torch.ops.spot.* ops, one per (op, shape, backend).

    python -m pytest bench --benchmark-only --benchmark-json=bench-ops.json     # CPU: the reference
    SPOT_BENCH_FULL=1 python -m pytest bench ...                   # GPU: real-model shapes (docs/design.md §6)

(bench/conftest.py makes pytest collect bench_*.py.)

Backends without a kernel for an op on this device are skipped (and reported as skipped, not as results); so is
Triton on CPU tensors (the interpreter's timings mean nothing). Each result records the bytes the op must touch at
least (inputs read once + outputs written once) in extra_info, so a GPU run can be compared with the
memory-bandwidth limit. bench/gpu_bench.py measures the issue's goals (fractions of the copy bandwidth, SDPA and
FlexAttention baselines) in one run.
"""

import os

import pytest
import torch

from common import (DEVICE, I64, attention_inputs, backends_for, children_inputs, commit_rule_inputs, nbytes,
                    random_trees, score_inputs, step_trees, steps_inputs)

FULL = os.environ.get("SPOT_BENCH_FULL") == "1"

# (vocab, block, nodes, batch): CPU keeps one representative shape; FULL sweeps real-model sizes.
SCORE_SHAPES = [(32000, 32, 8, 1)] + ([(32000, 32, 64, 1), (126464, 32, 16, 8), (151936, 16, 32, 8)] if FULL else [])
# (frontier, block, top_k, k)
DRAFT_SHAPES = [(64, 32, 32, 4)] + ([(2048, 32, 32, 4)] if FULL else [])
# (batch, prefix_len, num_nodes, block)
TREE_SHAPES = [(1, 256, 8, 32)] + ([(8, 2048, 32, 32), (1, 8192, 64, 16)] if FULL else [])
# expand_steps: (rows, frontier nodes per row, block, top_k, branch, width)
STEPS_SHAPES = [(16, 4, 32, 32, 8, 4)] + ([(512, 4, 32, 32, 8, 4)] if FULL else [])
# (batch, q heads, kv heads, nodes, block, prefix, head dim)
ATTN_SHAPES = [(1, 4, 2, 4, 16, 256, 64)] + ([(1, 32, 8, 16, 32, 2048, 128), (8, 32, 8, 8, 32, 2048, 128),
                                              (1, 32, 8, 64, 16, 8192, 128)] if FULL else [])
# (batch, nodes, block)
VERIFY_SHAPES = [(32, 8, 32)] + ([(32, 64, 32), (8, 128, 32)] if FULL else [])
# (batch, nodes, block): a commit rule's step and its verification (issue 37)
RULE_SHAPES = [(32, 16, 32)] + ([(1, 16, 32), (32, 64, 32), (8, 16, 256)] if FULL else [])
BACKENDS = ["reference", "triton", "cuda"]


def _run(benchmark, op, backend, args, shape):
    if backend not in backends_for(op):
        pytest.skip(f"{backend} has no kernel for spot::{op} on {DEVICE.type}")
    if backend == "triton" and DEVICE.type != "cuda":
        pytest.skip("Triton on CPU tensors is the interpreter: not a benchmark")
    fn = getattr(torch.ops.spot, op)

    def call():
        out = fn(*args, backend=backend)
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        return out

    out = call()  # warm-up (and Triton/CUDA compilation) outside the timing
    outs = out if isinstance(out, tuple) else (out,)
    benchmark.extra_info.update(op=op, backend=backend, device=DEVICE.type, shape=list(shape),
                                bytes=nbytes(*args, *outs))
    benchmark(call)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SCORE_SHAPES, ids=lambda s: "V{}-B{}-n{}-b{}".format(*s))
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_score(benchmark, backend, shape, temperature):
    vocab, block, nodes, batch = shape
    dtype = torch.bfloat16 if DEVICE.type == "cuda" else torch.float32
    logits, masked, rows, block_start, steps = score_inputs((batch, nodes), block, vocab, dtype, scale=1.0,
                                                            mask_p=0.5, device=DEVICE)
    args = (logits, masked, 0, rows, block_start, steps, temperature, "prob", 32)
    _run(benchmark, "score", backend, args, shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", DRAFT_SHAPES, ids=lambda s: "F{}-B{}-K{}-k{}".format(*s))
def test_select_children(benchmark, backend, shape):
    frontier, block, top, k = shape
    args = children_inputs(frontier, block, top, k, device=DEVICE)
    _run(benchmark, "select_children", backend, args, shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", STEPS_SHAPES, ids=lambda s: "b{}-w{}-B{}-K{}-k{}-W{}".format(*s))
def test_expand_steps(benchmark, backend, shape):
    _run(benchmark, "expand_steps", backend, steps_inputs(*shape, device=DEVICE), shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", TREE_SHAPES, ids=lambda s: "b{}-P{}-n{}-B{}".format(*s))
@pytest.mark.parametrize("op", ["tree_mask", "tree_mask_additive", "tree_mask_packed", "tree_position_ids"])
def test_tree(benchmark, backend, shape, op):
    batch, prefix_len, nodes, block = shape
    key_start = torch.arange(batch, dtype=I64, device=DEVICE) * 3
    extra = (torch.bfloat16 if DEVICE.type == "cuda" else torch.float32,) if op == "tree_mask_additive" else ()
    _run(benchmark, op, backend, (key_start, prefix_len, block, nodes, block, *extra), shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ATTN_SHAPES, ids=lambda s: "b{}-hq{}-hkv{}-n{}-B{}-P{}-D{}".format(*s))
def test_tree_attention(benchmark, backend, shape):
    batch, hq, hkv, nodes, block, prefix, dim = shape
    dtype = torch.bfloat16 if DEVICE.type == "cuda" else torch.float32
    args = (*attention_inputs(batch, hq, hkv, nodes, block, prefix, dim, dtype, device=DEVICE),
            torch.zeros(batch, dtype=I64, device=DEVICE), None)
    _run(benchmark, "tree_attention", backend, args, shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", VERIFY_SHAPES, ids=lambda s: "b{}-N{}-B{}".format(*s))
def test_verify_tree(benchmark, backend, shape):
    batch, nodes, block = shape
    # A random tree whose drafts equal the parent's target half of the time.
    args = random_trees(batch, nodes, block, hit=0.5, vocab=32000, device=DEVICE)
    _run(benchmark, "verify_tree", backend, args, shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", RULE_SHAPES, ids=lambda s: "b{}-n{}-B{}".format(*s))
def test_commit_rule(benchmark, backend, shape):
    batch, nodes, block = shape
    # LLaDA2's threshold with a per-step quota: the rule with both tables in play
    args = commit_rule_inputs((batch, nodes), block, "threshold:0.9,steps:8", device=DEVICE)
    _run(benchmark, "commit_rule", backend, args, shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", RULE_SHAPES, ids=lambda s: "b{}-N{}-B{}".format(*s))
def test_verify_steps(benchmark, backend, shape):
    batch, nodes, block = shape
    args = step_trees(batch, nodes, block, hit=0.7, vocab=32000, device=DEVICE)
    _run(benchmark, "verify_steps", backend, args, shape)


@pytest.mark.parametrize("backend", BACKENDS)
def test_noise_uniform(benchmark, backend):
    vocab = 32000
    rows = torch.arange(256, dtype=I64, device=DEVICE)[:, None]
    args = (0, rows, rows, rows, torch.arange(vocab, dtype=I64, device=DEVICE)[None, :])
    _run(benchmark, "noise_uniform", backend, args, (256, vocab))
