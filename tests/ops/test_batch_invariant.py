"""The batch-invariant Triton path (spot_kernels/triton/batch_invariant.py, docs/half_precision.md "GPUs").

Without a GPU these run the Triton kernels on CPU tensors under TRITON_INTERPRET=1 (tests/conftest.py), with
float16 / float32 inputs (bfloat16 is unreliable under the interpreter). The checks on real hardware (bfloat16 on
a GPU) are marked `gpu` and skipped here: nothing of them has been run unless a GPU ran them."""

import os
import warnings

import pytest
import torch

import spot
from spot.target import ModelTarget

from tiny import PROMPTS, sharp_target

# CUDA tensors where a GPU is, else CPU tensors in the interpreter (conftest sets TRITON_INTERPRET=1 before any
# Triton kernel module is imported).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = [pytest.mark.skipif(DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="no GPU and TRITON_INTERPRET is not 1"),
              # the interpreter evaluates masked-out lanes too (inf - inf in the attention) and numpy warns
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (real bfloat16 kernels)")
ROWS = (1, 3, 16, 17, 40)


@pytest.fixture(scope="module", autouse=True)
def row_invariant_interpreter_dot():
    """Under the interpreter, tl.dot is numpy's matmul, and OpenBLAS's float32 GEMM is not row-invariant on every
    CPU: with OPENBLAS_CORETYPE=Haswell on an AMD EPYC, a row's result changes in the last bits (3.8e-6) with its
    place in the tile. That is the emulated hardware's dot, not the kernels' tiling, which is what these tests
    check; so the interpreter's dot becomes np.einsum without BLAS (the same float32 products, each output summed
    in one fixed order whatever its row). On a GPU nothing is patched: the real MMA runs."""
    if torch.cuda.is_available():
        yield
        return
    import numpy as np
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.data.dtype.itemsize == 1 or b.data.dtype.itemsize == 1:  # fp8: the interpreter's own conversion
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        out = np.einsum("...mk,...kn->...mn", a.data, b.data, dtype=d.data.dtype, optimize=False)
        return interpreter.TensorHandle(out + d.data, d.dtype.scalar)

    interpreter.InterpreterBuilder.create_dot = create_dot
    try:
        yield
    finally:
        interpreter.InterpreterBuilder.create_dot = original


@pytest.fixture(scope="module")
def bi():
    from spot_kernels.triton import batch_invariant

    return batch_invariant


def _rows_everywhere(fn, x, full):
    """fn over every call of ROWS rows at several offsets of x gives the rows of `full` bit for bit."""
    for m in ROWS:
        for offset in sorted({0, (x.shape[0] - m) // 2 + 1, x.shape[0] - m}):
            out = fn(x[offset:offset + m])
            assert out.dtype == full.dtype
            assert torch.equal(out, full[offset:offset + m]), (m, offset, (out - full[offset:offset + m]).abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("n, k", [(50, 72), (97, 32)])
def test_linear_rows_do_not_depend_on_the_call(bi, dtype, n, k):
    """A row of x @ w^T is bit-identical in calls of 1, 3, 16, 17 and 40 rows at any offset (K not a multiple of
    BLOCK_K, N not a multiple of BLOCK_N), and close to the float32 product; a float32 x with a half-precision
    weight (the model's invariant path) gives the float32 product of the upcast weight."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, k, generator=g).to(DEVICE, dtype)
    w = torch.randn(n, k, generator=g).to(DEVICE, dtype)
    full = bi.linear(x, w)
    _rows_everywhere(lambda rows: bi.linear(rows, w), x, full)
    ref = x.double() @ w.double().T
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(full.double(), ref, rtol=tol, atol=tol)
    mixed = bi.linear(x.float(), w)  # float32 activations, half weights: upcast exactly, no rounding
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed.double(), ref, rtol=1e-4, atol=1e-4)
    _rows_everywhere(lambda rows: bi.linear(rows, w), x.float(), mixed)
    assert bi.linear(x.view(4, 10, k), w).shape == (4, 10, n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("d", [8, 32, 1500])  # 1500 > BLOCK_D (1024): two feature blocks
@pytest.mark.parametrize("per_program", [None, 1], ids=["default", "row-per-program"])
def test_rms_norm_rows_do_not_depend_on_the_call(bi, dtype, d, per_program):
    """A row's norm is bit-identical in calls of 1 to 40 rows at any offset, with the default rows per program
    and with one (the GPU's configuration), and close to the float64 norm."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(40, d, generator=g) * 3).to(DEVICE, dtype)
    weight = torch.randn(d, generator=g).to(DEVICE, dtype)
    full = bi.rms_norm(x, weight, 1e-6, rows_per_program=per_program)
    _rows_everywhere(lambda rows: bi.rms_norm(rows, weight, 1e-6, rows_per_program=per_program), x, full)
    xd = x.double()
    ref = weight.double() * (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6))
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(full.double(), ref, rtol=tol, atol=tol)
    strided = x.view(40, 1, d).expand(40, 2, d)[:, 1]  # a non-contiguous view
    assert torch.equal(bi.rms_norm(strided, weight, 1e-6, rows_per_program=per_program), full)


# --------------------------------------------------------------------------------------------- the model path

def _triton_target(dtype):
    base = sharp_target(dtype=dtype)
    return ModelTarget(base.model.to(DEVICE), kernels="triton")


def _alone_and_beside(target, prompts, block_size, trees):
    """One drafted node's logits scored alone, then (in the same session, whose prefix does not change) the
    logits of the trees (n_nodes, where): the node at index `where` among n_nodes distinct nodes."""
    b = len(prompts)
    block = torch.full((b, block_size), target.mask_id)
    drafted = block.clone()
    drafted[:, :2] = torch.tensor([20, 21])
    session = target.start(prompts, 2 * block_size, block_size)
    session.score(block[:, None])  # the first pass appends the prompts
    alone = session.score(drafted[:, None])[:, 0]
    together = []
    for n_nodes, where in trees:
        nodes = drafted[:, None].repeat(1, n_nodes, 1)
        others = [j for j in range(n_nodes) if j != where]
        nodes[:, others, block_size - 1] = 30 + torch.arange(n_nodes - 1)
        together.append(session.score(nodes))
    return alone, together


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_triton_model_node_logits_do_not_depend_on_the_tree(dtype):
    """On the Triton path a node's logits are bit-identical alone and beside 1 to 7 other nodes, first, in the
    middle or last (one and two sequences, ragged prompts; block 4: with 2 grouped heads, one attention tile of
    the interpreter's BLOCK_M = 16 holds two nodes), and close to the default (torch) path's."""
    target = _triton_target(dtype)
    assert target.kernels == "triton" and target.batch_invariant and target.compute_dtype == torch.float32
    torch_path = ModelTarget(sharp_target(dtype=dtype).model.to(DEVICE), kernels="torch")
    trees = ((2, 0), (2, 1), (3, 1), (5, 4), (8, 5))
    for prompts in ([[5, 6, 7]], [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]):
        a, together = _alone_and_beside(target, prompts, 4, trees)
        assert a.dtype == torch.float32
        for (n_nodes, where), t in zip(trees, together):
            assert torch.equal(a, t[:, where]), (prompts, n_nodes, where, (a - t[:, where]).abs().max())
            assert not torch.equal(t[:, where], t[:, where - 1])  # the other nodes really are other states
        ref, _ = _alone_and_beside(torch_path, prompts, 4, ())
        torch.testing.assert_close(a, ref, rtol=1e-4, atol=1e-4)


def test_triton_model_block_size_not_a_power_of_two():
    """Block 5 (the Triton tree_attention alone would cut a node's keys into other key steps beside other nodes,
    so the model calls it once per node): a node's float32 logits are still bit-identical alone and beside
    others."""
    target = _triton_target(torch.float32)
    trees = ((2, 1), (4, 3))
    a, together = _alone_and_beside(target, [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]], 5, trees)
    for (n_nodes, where), t in zip(trees, together):
        assert torch.equal(a, t[:, where]), (n_nodes, where, (a - t[:, where]).abs().max())


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_triton_model_confidence_equals_standard(temperature):
    """`confidence` decoding on the float16 target forced onto the Triton path returns standard's tokens and
    commit orders (one block of 4, the prompts batched) in no more passes (fewer at T = 1: drafted commits were
    accepted), and warns nothing (the target declares batch_invariant)."""
    target = _triton_target(torch.float16)
    # seed 1: a case where confidence accepts a drafted commit at T = 1 (at T = 0 none is, for block 4)
    kw = dict(max_new_tokens=4, block_size=4, temperature=temperature, seed=1, eos_id=None, budget=8)
    prompts = PROMPTS if temperature else PROMPTS[:2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref = spot.generate(target, prompts, "standard", **kw)
        out = spot.generate(target, prompts, "confidence", **kw)
    assert not [w for w in caught if issubclass(w.category, UserWarning)]
    assert out.tokens == ref.tokens
    assert torch.equal(out.orders, ref.orders)
    assert out.stats.target_passes <= ref.stats.target_passes
    if temperature == 1.0:
        assert out.stats.target_passes < ref.stats.target_passes


def test_kernel_choice():
    """"auto" keeps CPU targets on the torch path (the CPU path is unchanged); "triton" on a float64 model, or
    an unknown name, is refused."""
    cpu = sharp_target(dtype=torch.float16)
    assert cpu.kernels == "torch" and cpu.compute_dtype == torch.float32 and cpu.batch_invariant
    with pytest.raises(ValueError, match="float64"):
        _ = ModelTarget(sharp_target().model, kernels="triton").kernels
    with pytest.raises(ValueError, match="kernels"):
        ModelTarget(cpu.model, kernels="cublas")
    with pytest.raises(ValueError, match="float64"):
        _ = ModelTarget(cpu.model, kernels="triton", compute_dtype=torch.float64).kernels


class _OnCuda(ModelTarget):
    """A CPU model that reports a CUDA device: how a GPU target resolves its kernels (nothing is run)."""

    device = property(lambda self: torch.device("cuda"))


@pytest.mark.parametrize("kernels", ["auto", "triton"])
def test_half_model_on_a_gpu_resolves_to_the_triton_path(kernels):
    target = _OnCuda(sharp_target(dtype=torch.bfloat16).model, kernels=kernels)
    assert target.kernels == "triton" and target.compute_dtype == torch.float32 and target.batch_invariant
    native = _OnCuda(target.model, kernels="torch")
    assert native.compute_dtype == torch.bfloat16 and not native.batch_invariant  # as before
    assert _OnCuda(sharp_target(dtype=torch.float32).model).kernels == "torch"  # auto: half models only
    assert not _OnCuda(target.model, kernels=kernels, compute_dtype=torch.bfloat16).batch_invariant


# ------------------------------------------------------------------------------- on a GPU only (never run here)

@gpu
def test_gpu_bfloat16_target_takes_the_triton_path_and_is_invariant():
    """A bfloat16 model on a GPU: "auto" takes the Triton path, declares batch_invariant, and a node's logits are
    bit-identical alone and beside up to 15 other nodes (block 4 and 16); confidence equals standard."""
    target = ModelTarget(sharp_target(dtype=torch.bfloat16).model.cuda())
    assert target.kernels == "triton" and target.batch_invariant
    trees = ((2, 1), (8, 5), (16, 15))
    for block_size in (4, 5, 16, 32):
        for prompts in ([[5, 6, 7]], [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]):
            a, together = _alone_and_beside(target, prompts, block_size, trees)
            for (n_nodes, where), t in zip(trees, together):
                assert torch.equal(a, t[:, where]), (block_size, n_nodes, where)
    for temperature in (0.0, 1.0):
        kw = dict(max_new_tokens=16, block_size=4, temperature=temperature, seed=0, eos_id=None, budget=8)
        ref = spot.generate(target, PROMPTS, "standard", **kw)
        out = spot.generate(target, PROMPTS, "confidence", **kw)
        assert out.tokens == ref.tokens and torch.equal(out.orders, ref.orders)


@gpu
def test_gpu_bfloat16_kernels_rows_do_not_depend_on_the_call(bi):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(300, 1024, generator=g).cuda()
    w = torch.randn(4096, 1024, generator=g).to("cuda", torch.bfloat16)
    full = bi.linear(x, w)
    for m in (1, 3, 16, 17, 40, 257):
        assert torch.equal(bi.linear(x[7:7 + m], w), full[7:7 + m]), m
    weight = torch.randn(1024, generator=g).to("cuda", torch.bfloat16)
    full = bi.rms_norm(x, weight, 1e-6)
    for m in (1, 3, 17, 257):
        assert torch.equal(bi.rms_norm(x[5:5 + m], weight, 1e-6), full[5:5 + m]), m
