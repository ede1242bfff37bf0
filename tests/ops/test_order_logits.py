"""spot::order_logits, the order drafter's fused forward: every backend against the reference, the reference against
OrderModel.forward_nodes, the packed weight layout, its argument errors. (LearnedDrafter's trees through it:
tests/runtime/test_fused_drafter.py.)

Tolerance (Triton): every product is a float32 dot with IEEE inputs (no TF32), so the kernel differs from the
reference only in the order of its float32 sums (per-head output projection summed head by head, the MLP summed
chunk by chunk, its own LayerNorm and softmax reductions). Such differences scale with the size of the values
summed, so the bound is relative to each call's logit scale s = max(1, max |logit|): |triton - reference| <=
LOGIT_TOL * s. Measured on these inputs (Triton interpreter): 5.0e-6 at s = 6.5 for the test models (weights twice
PyTorch's init), 3.6e-7 at s = 1.9 at the init's scale, 1.7e-5 at s = 13.5 for the shipped drafter, i.e. at most
1.3e-6 * s; LOGIT_TOL = 1e-5 leaves 8x room, far below the gaps a tree's ranking reads. The C++ CPU kernel runs
its linears through oneDNN from 48 rows on (GELU and residual adds fused; MKL's at::linear below, as the reference's
F.linear), and finishes the last layer on the masked positions' rows alone: float32 dots summed in another
library's order, so it is held to the same bound (measured here: at most 1.3e-6 * s, the shipped drafter and the
test models, blocks 1 to 64, 1 to 40 nodes). So is the CUDA C++ kernel, float32 products summed in its own tiles'
order (measured in the CPU emulation, which does not fuse multiply-adds as the GPU does: at most 1.1e-6 * s on the
test models at these shapes, 1.2e-6 * s for the shipped drafter at B = 16, 32 and 64).
"""

import math

import pytest
import torch

import spot
import spot_kernels
from spot.order_model import OrderModel, OrderModelConfig, pack_order_weights
from spot_kernels.ops.order_logits import weight_count, weight_layout, weight_offsets

from helpers import CUDA_KERNELS, KERNEL_BACKENDS

LOGIT_TOL = 1e-5

SMALL = OrderModelConfig(d_model=32, n_layers=2, n_heads=2, d_ff=48, top_k=8, max_block=64, max_depth=4)


def assert_logits_close(out, ref):
    """Equal -inf, and the finite logits within LOGIT_TOL of the call's logit scale (the module docstring)."""
    assert torch.equal(torch.isinf(out), torch.isinf(ref))
    finite = torch.isfinite(ref)
    scale = max(1.0, float(ref[finite].abs().max())) if bool(finite.any()) else 1.0
    torch.testing.assert_close(out[finite], ref[finite], rtol=0, atol=LOGIT_TOL * scale)


def model(tokens: bool, resampled: bool, seed: int = 0) -> OrderModel:
    """A small order model, with token inputs and / or resampled inputs."""
    torch.manual_seed(seed)
    cfg = OrderModelConfig(**{**SMALL.__dict__, "resampled": resampled, "token_buckets": 16 if tokens else 0,
                              "token_dim": 8})
    m = OrderModel(cfg).eval()
    with torch.no_grad():  # twice the init's weights, so that the logits spread out and differ per node
        for p in m.parameters():
            p.mul_(2.0)
    return m


def inputs(m: OrderModel, n: int, block: int, seed: int, rows: int = 3):
    """The op's arguments for `n` nodes over `rows` stale rows, with rows with no masked position and nodes that
    read the same row."""
    g = torch.Generator().manual_seed(seed)
    cfg = m.cfg
    probs = torch.softmax(3 * torch.randn(rows, block, cfg.top_k, generator=g), -1)
    conf = torch.rand(rows, block, generator=g)
    stale_m = torch.rand(rows, block, generator=g) < 0.7
    top_ids = torch.randint(-1, 40, (rows, block), generator=g)
    with torch.no_grad():
        st = m.stale_inputs(probs, conf, stale_m, top_ids if cfg.token_buckets else None)
    node_row = torch.randint(0, rows, (n,), generator=g)
    node_masked = stale_m[node_row] & (torch.rand(n, block, generator=g) < 0.8)
    node_masked[n // 2] = False  # a node with no masked position: all -inf
    depth = torch.randint(0, 2 * cfg.max_depth, (n,), generator=g)  # past max_depth: the last embedding
    # per row and depth, as a drafter computes them once per pass: node i reads [node_row[i], depth[i]]
    resampled = torch.rand(rows, 2 * cfg.max_depth, block, generator=g) if cfg.resampled else None
    if resampled is not None:
        resampled[node_row[0], depth[0], 0] = float("nan")  # NaN reads as 0
    return (st.features, st.masked, st.tokens, node_row, node_masked, depth, resampled, pack_order_weights(m),
            cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff, cfg.max_block, cfg.max_depth), st


@pytest.mark.parametrize("tokens,resampled", [(False, False), (True, True), (True, False)])
@pytest.mark.parametrize("n", [1, 5, 16])
def test_the_reference_is_the_model_bit_for_bit(tokens, resampled, n):
    m = model(tokens, resampled)
    args, st = inputs(m, n, 32, seed=n)
    with torch.no_grad():
        per_node = args[6][args[3], args[5]] if resampled else None
        expected = m.forward_nodes(st, args[4], args[5], per_node, args[3])
    assert torch.equal(spot_kernels.order_logits(*args, backend="reference"), expected)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS, indirect=True)
@pytest.mark.parametrize("tokens,resampled", [(False, False), (True, True)])
@pytest.mark.parametrize("block", [1, 7, 32, 64])
@pytest.mark.parametrize("n", [1, 5, 16])
def test_order_logits_matches_reference(backend, tokens, resampled, block, n):
    m = model(tokens, resampled, seed=block)
    args, _ = inputs(m, n, block, seed=block * 100 + n)
    out, ref = backend.both("order_logits", *backend.to(*args))
    out = out.cpu()
    assert out.dtype == torch.float32 and out.shape == (n, block)
    assert torch.equal(torch.isinf(out), ~args[4]) and torch.equal(torch.isinf(ref.cpu()), ~args[4])
    assert bool(torch.isfinite(ref.cpu()[args[4]]).all())
    assert_logits_close(out, ref.cpu())


@pytest.mark.parametrize("backend", KERNEL_BACKENDS, indirect=True)
def test_order_logits_of_the_shipped_drafter(backend):
    """The shipped drafter's sizes (d_model 128, 8 heads, d_ff 512, tokens and resampled inputs) at B 32."""
    m = spot.load_drafter().model
    args, _ = inputs(m, 4, 32, seed=7)
    out, ref = backend.both("order_logits", *backend.to(*args))
    assert_logits_close(out.cpu(), ref.cpu())


@pytest.mark.parametrize("backend", ["reference", *KERNEL_BACKENDS], indirect=True)
def test_scale_and_per_row_resampled(backend):
    """scale multiplies the logits (a drafter's sharpness); resampled [R, B] is read by row at every depth, the same
    as [R, D, B] holding that row at each depth."""
    m = model(True, True)
    args, _ = inputs(m, 6, 16, seed=3)
    args = list(backend.to(*args))
    base = backend.run("order_logits", *args)
    scaled = backend.run("order_logits", *args, 1.75)
    assert torch.equal(scaled, base * 1.75)
    per_row = args[6][:, 0]
    args[6] = per_row
    by_row = backend.run("order_logits", *args)
    args[6] = per_row[:, None].expand(-1, 2 * m.cfg.max_depth, -1)
    assert torch.equal(by_row, backend.run("order_logits", *args))
    assert not torch.equal(by_row, base)  # the depth is read: another depth's values give other logits


@pytest.mark.parametrize("backend", CUDA_KERNELS, indirect=True)
def test_cuda_kernel_at_the_shipped_sizes_and_beyond_shared_memory(backend):
    """The CUDA kernel keeps a node's activations in shared memory where they fit the device's opt-in limit (the
    emulation reports an H100's 227 KB), else in a global workspace: the shipped drafter at B = 64 (183 KB: shared),
    and a wide model (d_model 384, B 64: 511 KB: global), each against the reference. The wide model also has a d_ff
    that is not a multiple of the kernel's 128-column MLP chunks (200) and 3 heads of 128."""
    m = spot.load_drafter().model
    args, _ = inputs(m, 3, 64, seed=11)
    out, ref = backend.both("order_logits", *backend.to(*args))
    assert_logits_close(out.cpu(), ref.cpu())
    torch.manual_seed(4)
    cfg = OrderModelConfig(d_model=384, n_layers=1, n_heads=3, d_ff=200, top_k=4, max_block=64, max_depth=2,
                           resampled=True, token_buckets=16, token_dim=8)
    wide = OrderModel(cfg).eval()
    args, _ = inputs(wide, 2, 64, seed=12)
    out, ref = backend.both("order_logits", *backend.to(*args))
    assert_logits_close(out.cpu(), ref.cpu())


@pytest.mark.parametrize("backend", CUDA_KERNELS, indirect=True)
def test_opcheck_of_the_cuda_kernel(backend):
    args, _ = inputs(model(True, True), 4, 8, seed=3)
    backend.opcheck("order_logits", *backend.to(*args))


def test_no_nodes():
    m = model(True, True)
    args, _ = inputs(m, 3, 8, seed=1)
    none = (args[0], args[1], args[2], args[3][:0], args[4][:0], args[5][:0], *args[6:])
    assert spot_kernels.order_logits(*none).shape == (0, 8)


@pytest.mark.parametrize("backend", ["reference", *KERNEL_BACKENDS], indirect=True)
def test_nodes_with_nothing_masked_get_minus_infinity(backend):
    """Every node fully committed: no position to draft, all -inf (the CPU kernel skips its last layer's rows)."""
    m = model(True, True)
    args, _ = inputs(m, 3, 16, seed=5)
    args = list(backend.to(*args))
    args[4] = torch.zeros_like(args[4])
    out = backend.run("order_logits", *args).cpu()
    assert out.shape == (3, 16) and bool((out == float("-inf")).all())


def test_the_weight_layout_is_the_models_parameters():
    for tokens, resampled in ((False, False), (True, True)):
        m = model(tokens, resampled)
        cfg = m.cfg
        layout = weight_layout(cfg.n_features, cfg.d_model, cfg.n_layers, cfg.d_ff, cfg.max_block, cfg.max_depth,
                               cfg.token_dim if tokens else 0)
        params = dict(m.named_parameters())
        params.pop("tok.weight", None)  # the token embedding is looked up once per pass, outside the op
        assert {name: tuple(p.shape) for name, p in params.items()} == dict(layout)
        assert pack_order_weights(m).shape == (weight_count(layout),)
        # weight_offsets (cached, read by the check and the Triton kernel) is the running total of the layout
        offsets = weight_offsets(cfg.n_features, cfg.d_model, cfg.n_layers, cfg.d_ff, cfg.max_block, cfg.max_depth,
                                 cfg.token_dim if tokens else 0)
        sizes = [math.prod(shape) for _, shape in layout]
        assert [offsets[name] for name, _ in layout] == [sum(sizes[:i]) for i in range(len(sizes))]
        assert offsets["end"] == weight_count(layout)


@pytest.mark.parametrize("change, error, match", [
    (lambda a: a.__setitem__(7, a[7][:-1]), ValueError, "weights must hold"),
    (lambda a: a.__setitem__(0, a[0].double()), TypeError, "features must have dtype float32"),
    (lambda a: a.__setitem__(3, a[3] + 5), ValueError, "node_row must lie in"),
    (lambda a: a.__setitem__(4, a[4][:, :3]), ValueError, "node_masked must have shape"),
    (lambda a: a.__setitem__(5, a[5] - 100), ValueError, "depth must lie in"),
    (lambda a: a.__setitem__(6, a[6][:1]), ValueError, "resampled must have shape"),
    (lambda a: a.__setitem__(6, a[6][:, :, :3]), ValueError, "resampled must have shape"),
    (lambda a: a.__setitem__(6, a[6][:, :1]), ValueError, "depth must lie in .*a depth of resampled"),
    (lambda a: a.append(0.0), ValueError, "scale must be a finite float > 0"),
    (lambda a: a.append(float("inf")), ValueError, "scale must be a finite float > 0"),
    (lambda a: a.__setitem__(10, 3), ValueError, "n_heads"),
    (lambda a: a.__setitem__(12, 4), ValueError, "exceeds max_block"),
])
def test_errors_name_the_argument(change, error, match):
    args, _ = inputs(model(True, True), 4, 8, seed=2)
    args = list(args)
    change(args)
    with pytest.raises(error, match=match):
        spot_kernels.order_logits(*args)


def test_opcheck():
    args, _ = inputs(model(True, True), 4, 8, seed=3)
    torch.library.opcheck(torch.ops.spot.order_logits.default, args)
