"""Tree attention masks, position ids and the shared-prefix tree attention (docs/ops.md, "Tree attention masks").

The contract against brute force on the reference (the oracle), then every other backend against the reference."""

import math
import time

import pytest
import torch
from torch.library import opcheck

import spot_kernels

from helpers import CUDA_KERNELS, I64, attention_inputs, gpu_only, ragged_key_start, random_tree_configs
OPS = ("tree_mask", "tree_mask_additive", "tree_mask_packed", "tree_position_ids")


def brute_visible(ks, q, k, prefix_len, num_new, block_size):
    """The rule of docs/ops.md, one (query, key) pair at a time."""
    if k < ks:
        # Only a padding new token may see a padding key: itself.
        return q < num_new and prefix_len - num_new + q == k
    if q < num_new:
        kq = prefix_len - num_new + q
        return k == kq if kq < ks else k <= kq
    node = (q - num_new) // block_size
    return k < prefix_len or (k - prefix_len) // block_size == node


def brute_mask(key_start, prefix_len, num_new, num_nodes, block_size):
    n_q, n_k = num_new + num_nodes * block_size, prefix_len + num_nodes * block_size
    return [[[brute_visible(ks, q, k, prefix_len, num_new, block_size) for k in range(n_k)] for q in range(n_q)]
            for ks in key_start]


def brute_positions(key_start, prefix_len, num_new, num_nodes, block_size):
    out = []
    for ks in key_start:
        row = [max(prefix_len - num_new + q - ks, 0) for q in range(num_new)]
        row += [prefix_len - ks + j for _ in range(num_nodes) for j in range(block_size)]
        out.append(row)
    return out


def test_masks_and_positions_against_brute_force():
    for key_start, *shape in random_tree_configs(40):
        ks = torch.tensor(key_start, dtype=I64)
        want = brute_mask(key_start, *shape)
        mask = spot_kernels.tree_mask(ks, *shape)
        n_q, n_k = shape[1] + shape[2] * shape[3], shape[0] + shape[2] * shape[3]
        assert mask.dtype == torch.bool and mask.shape == (len(key_start), 1, n_q, n_k)
        assert mask[:, 0].tolist() == want
        if n_q and n_k:
            assert mask.any(-1).all()  # no empty row
        pos = spot_kernels.tree_position_ids(ks, *shape)
        assert pos.dtype == I64 and pos.tolist() == brute_positions(key_start, *shape)


def test_hand_built_case():
    # Row 0: no padding; row 1: two padding keys. Prefix of 4 keys, the last 2 new; 2 nodes of 2 tokens.
    mask = spot_kernels.tree_mask(torch.tensor([0, 2]), 4, 2, 2, 2)[:, 0].int()
    assert mask[1].tolist() == [
        [0, 0, 1, 0, 0, 0, 0, 0],  # new token at key 2 (the first valid key)
        [0, 0, 1, 1, 0, 0, 0, 0],
        [0, 0, 1, 1, 1, 1, 0, 0],  # node 0 sees the valid prefix and itself
        [0, 0, 1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 0, 0, 1, 1],  # node 1: not node 0
        [0, 0, 1, 1, 0, 0, 1, 1],
    ]
    assert mask[0, :2].tolist() == [[1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0]]
    # A padding new token sees only itself.
    pad = spot_kernels.tree_mask(torch.tensor([3]), 4, 2, 1, 1)[0, 0].int()
    assert pad[0].tolist() == [0, 0, 1, 0, 0]
    pos = spot_kernels.tree_position_ids(torch.tensor([0, 2]), 4, 2, 2, 2)
    assert pos.tolist() == [[2, 3, 4, 5, 4, 5], [0, 1, 2, 3, 2, 3]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_additive(dtype):
    for key_start, *shape in random_tree_configs(10, seed=1):
        ks = torch.tensor(key_start, dtype=I64)
        add = spot_kernels.tree_mask_additive(ks, *shape, dtype)
        mask = spot_kernels.tree_mask(ks, *shape)
        assert add.dtype == dtype and add.shape == mask.shape
        assert torch.equal(add == 0, mask) and bool((add[~mask] == -math.inf).all())


def test_packed():
    configs = list(random_tree_configs(20, seed=2)) + [([0, 5, 31], 31, 3, 1, 1), ([7], 64, 0, 2, 16),
                                                       ([0], 33, 1, 0, 1)]
    for key_start, *shape in configs:
        ks = torch.tensor(key_start, dtype=I64)
        packed = spot_kernels.tree_mask_packed(ks, *shape)
        mask = spot_kernels.tree_mask(ks, *shape)[:, 0]
        b, n_q, n_k = mask.shape
        assert packed.dtype == torch.int32 and packed.shape == (b, n_q, (n_k + 31) // 32)
        bits = [[[bool(((row[k // 32] & 0xFFFFFFFF) >> (k % 32)) & 1) for k in range(n_k)] for row in q]
                for q in packed.tolist()]
        assert bits == mask.tolist()
        # Padding bits beyond K are zero.
        if n_k % 32 and packed.numel():
            assert ((packed[..., -1].to(I64) & 0xFFFFFFFF) >> (n_k % 32) == 0).all()
    # Bit 31 set makes the int32 word negative (two's complement).
    full = spot_kernels.tree_mask_packed(torch.tensor([0]), 32, 32, 1, 1)
    assert full[0, 31, 0].item() == -1


def test_mask_mod_matches_tree_mask():
    for key_start, prefix_len, num_new, num_nodes, block_size in random_tree_configs(15, seed=3):
        ks = torch.tensor(key_start, dtype=I64)
        mod = spot_kernels.tree_mask_mod(ks, prefix_len, num_new, block_size)
        n_q, n_k = num_new + num_nodes * block_size, prefix_len + num_nodes * block_size
        b = torch.arange(len(key_start))[:, None, None]
        got = mod(b, 0, torch.arange(n_q)[None, :, None], torch.arange(n_k)[None, None, :])
        assert torch.equal(got.expand(len(key_start), n_q, n_k),
                           spot_kernels.tree_mask(ks, prefix_len, num_new, num_nodes, block_size)[:, 0])


def test_mask_mod_with_flex_attention_create_mask():
    """FlexAttention evaluates mask_mod under vmap; the result must equal the dense mask."""
    from torch.nn.attention import flex_attention as flex  # present since torch 2.5, the minimum supported

    ks = torch.tensor([0, 3, 6])
    prefix_len, num_new, num_nodes, block_size = 6, 2, 3, 4
    mod = spot_kernels.tree_mask_mod(ks, prefix_len, num_new, block_size)
    n_q, n_k = num_new + num_nodes * block_size, prefix_len + num_nodes * block_size
    dense = flex.create_mask(mod, 3, 1, n_q, n_k, device="cpu")
    assert torch.equal(dense, spot_kernels.tree_mask(ks, prefix_len, num_new, num_nodes, block_size))


def test_sdpa_with_the_mask_equals_separate_passes():
    """One pass of N nodes under the tree mask = N independent passes of [prefix + that node's block]."""
    g = torch.Generator().manual_seed(4)
    b, heads, dim = 2, 2, 8
    prefix_len, num_new, num_nodes, block_size = 5, 2, 3, 4
    ks = torch.tensor([0, 2])
    n_q, n_k = num_new + num_nodes * block_size, prefix_len + num_nodes * block_size
    q = torch.randn(b, heads, n_q, dim, generator=g, dtype=torch.float64)
    k = torch.randn(b, heads, n_k, dim, generator=g, dtype=torch.float64)
    v = torch.randn(b, heads, n_k, dim, generator=g, dtype=torch.float64)
    mask = spot_kernels.tree_mask(ks, prefix_len, num_new, num_nodes, block_size)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    additive = spot_kernels.tree_mask_additive(ks, prefix_len, num_new, num_nodes, block_size, torch.float64)
    torch.testing.assert_close(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=additive), out)
    for row in range(b):
        for n in range(num_nodes):
            qs = slice(num_new + n * block_size, num_new + (n + 1) * block_size)
            keys = list(range(ks[row].item(), prefix_len)) + list(range(prefix_len + n * block_size,
                                                                        prefix_len + (n + 1) * block_size))
            ref = torch.nn.functional.scaled_dot_product_attention(q[row:row + 1, :, qs], k[row:row + 1, :, keys],
                                                                   v[row:row + 1, :, keys])
            torch.testing.assert_close(out[row:row + 1, :, qs], ref)


@pytest.mark.parametrize("op", OPS)
def test_opcheck(op):
    args = (torch.tensor([0, 3]), 7, 3, 2, 4)
    if op == "tree_mask_additive":
        args = args + (torch.float16,)
    opcheck(getattr(torch.ops.spot, op).default, args, {"backend": "reference"})
    opcheck(getattr(torch.ops.spot, op).default, (torch.zeros(0, dtype=I64),) + args[1:])


def call(op, key_start=None, prefix_len=6, num_new=2, num_nodes=2, block_size=3, dtype=torch.float32):
    key_start = torch.tensor([0, 1]) if key_start is None else key_start
    fn = getattr(spot_kernels, op)
    if op == "tree_mask_additive":
        return fn(key_start, prefix_len, num_new, num_nodes, block_size, dtype)
    return fn(key_start, prefix_len, num_new, num_nodes, block_size)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"key_start": torch.tensor([0, 1], dtype=torch.int32)}, TypeError, "key_start.*int64"),
        ({"key_start": torch.zeros(2, 1, dtype=I64)}, ValueError, "key_start.*1 dimensions"),
        ({"key_start": [0, 1]}, TypeError, "key_start.*Tensor"),
        ({"key_start": torch.tensor([0, 7])}, ValueError, "key_start"),
        ({"key_start": torch.tensor([-1, 0])}, ValueError, "key_start"),
        ({"prefix_len": -1}, ValueError, "prefix_len"),
        ({"num_new": 7}, ValueError, "num_new"),
        ({"num_new": -1}, ValueError, "num_new"),
        ({"num_nodes": -1}, ValueError, "num_nodes"),
        ({"block_size": 0}, ValueError, "block_size"),
        ({"block_size": 2.5}, TypeError, "block_size"),
    ],
)
def test_bad_input(op, kwargs, error, match):
    with pytest.raises(error, match=match):
        call(op, **kwargs)


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, "float32"])
def test_additive_needs_a_floating_dtype(dtype):
    with pytest.raises(TypeError, match="dtype"):
        call("tree_mask_additive", dtype=dtype)


def test_mask_mod_bad_input():
    with pytest.raises(ValueError, match="key_start"):
        spot_kernels.tree_mask_mod(torch.tensor([9]), 4, 1, 2)
    with pytest.raises(ValueError, match="block_size"):
        spot_kernels.tree_mask_mod(torch.tensor([0]), 4, 1, 0)


@pytest.mark.parametrize("op", ["tree_mask", "tree_mask_packed", "tree_position_ids"])
def test_item6_mask_ops_are_size_checked(op, monkeypatch):
    key_start = torch.zeros(1, dtype=torch.long)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=f"spot.{op}: .*num_nodes=3000000.*SPOT_MEMORY_LIMIT_GB"):
        monkeypatch.setenv("SPOT_MEMORY_LIMIT_GB", "0.01" if op == "tree_position_ids" else "16")
        getattr(spot_kernels, op)(key_start, 10, 0, 3_000_000, 32)
    assert time.perf_counter() - t0 < 1
    monkeypatch.setenv("SPOT_MEMORY_LIMIT_GB", "16")
    assert getattr(spot_kernels, op)(key_start, 10, 0, 4, 8).shape[0] == 1  # a normal size still works


def test_item6_additive_mask_counts_its_dtype(monkeypatch):
    monkeypatch.setenv("SPOT_MEMORY_LIMIT_GB", "0.000003")  # 3 KB: a 16 x 26 float64 mask is 3.3 KB
    with pytest.raises(ValueError, match="tree_mask_additive.*SPOT_MEMORY_LIMIT_GB"):
        spot_kernels.tree_mask_additive(torch.zeros(1, dtype=torch.long), 10, 0, 2, 8, torch.float64)
    assert spot_kernels.tree_mask(torch.zeros(1, dtype=torch.long), 10, 0, 2, 8).shape == (1, 1, 16, 26)


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        spot_kernels.tree_mask(torch.tensor([0]), 4, 1, 1, 2, backend="gpu")
    # "cpu" is a backend name (csrc/cpu/), but it has no tree_mask kernel
    with pytest.raises(spot_kernels.BackendUnavailable, match="cpu backend"):
        spot_kernels.tree_mask(torch.tensor([0]), 4, 1, 1, 2, backend="cpu")


# ------------------------------------------------------------------------------------ shared-prefix tree attention

def brute_tree_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale=None):
    """Each (row, head, node) separately: plain softmax attention over [valid prefix keys + own node keys]."""
    b, hq, n, block, dim = q.shape
    group = hq // k_prefix.shape[1]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    out = torch.empty(q.shape, dtype=torch.float64)
    for row in range(b):
        ks = int(key_start[row])
        for h in range(hq):
            kv = h // group
            for node in range(n):
                keys = torch.cat([k_prefix[row, kv, ks:], k_nodes[row, kv, node]]).double()
                vals = torch.cat([v_prefix[row, kv, ks:], v_nodes[row, kv, node]]).double()
                w = torch.softmax(q[row, h, node].double() @ keys.T * scale, dim=-1)
                out[row, h, node] = w @ vals
    return out


@pytest.mark.parametrize("shape", [(2, 4, 2, 3, 5, 7, 8), (1, 2, 2, 1, 1, 0, 3), (3, 6, 1, 2, 4, 9, 16),
                                   (0, 2, 1, 2, 3, 4, 8), (2, 2, 1, 0, 3, 4, 8)],
                         ids=lambda s: "b{}-hq{}-hkv{}-N{}-B{}-P{}-D{}".format(*s))
def test_tree_attention_against_brute_force(shape):
    b, hq, hkv, n, block, prefix, dim = shape
    args = attention_inputs(*shape)
    key_start = torch.tensor([(3 * r) % (prefix + 1) for r in range(b)], dtype=I64)
    if b:
        key_start[-1] = prefix  # a row whose prefix is all padding: nodes see only themselves
    out = spot_kernels.tree_attention(*args, key_start)
    assert out.dtype == torch.float64 and out.shape == (b, hq, n, block, dim) and out.is_contiguous()
    torch.testing.assert_close(out, brute_tree_attention(*args, key_start), rtol=1e-10, atol=1e-12)
    scaled = spot_kernels.tree_attention(*args, key_start, scale=0.3)
    torch.testing.assert_close(scaled, brute_tree_attention(*args, key_start, scale=0.3), rtol=1e-10, atol=1e-12)


def test_tree_attention_equals_sdpa_with_the_tree_mask():
    """The op computes what the model computes with tree_mask + SDPA over [prefix; node tokens] (num_new = 0)."""
    b, hq, hkv, n, block, prefix, dim = 2, 4, 2, 3, 4, 6, 8
    q, kp, vp, kn, vn = attention_inputs(b, hq, hkv, n, block, prefix, dim, seed=5)
    key_start = torch.tensor([0, 4])
    out = spot_kernels.tree_attention(q, kp, vp, kn, vn, key_start)
    keys = torch.cat([kp, kn.reshape(b, hkv, n * block, dim)], dim=2).repeat_interleave(hq // hkv, dim=1)
    vals = torch.cat([vp, vn.reshape(b, hkv, n * block, dim)], dim=2).repeat_interleave(hq // hkv, dim=1)
    mask = spot_kernels.tree_mask(key_start, prefix, 0, n, block)
    want = torch.nn.functional.scaled_dot_product_attention(q.reshape(b, hq, n * block, dim), keys, vals,
                                                            attn_mask=mask)
    torch.testing.assert_close(out.reshape(b, hq, n * block, dim), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tree_attention_low_precision(dtype):
    args = attention_inputs(2, 4, 1, 2, 3, 5, 8, dtype=dtype, seed=2)
    key_start = torch.tensor([1, 0])
    out = spot_kernels.tree_attention(*args, key_start)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), brute_tree_attention(*args, key_start), rtol=2e-2, atol=2e-2)


def test_tree_attention_opcheck():
    args = attention_inputs(2, 4, 2, 2, 3, 5, 4, dtype=torch.float32)
    opcheck(torch.ops.spot.tree_attention.default, args + (torch.tensor([0, 2]),), {"backend": "reference"})
    opcheck(torch.ops.spot.tree_attention.default, args + (torch.tensor([1, 5]), 0.5))
    empty = attention_inputs(2, 2, 1, 0, 3, 0, 4, dtype=torch.float32)
    opcheck(torch.ops.spot.tree_attention.default, empty + (torch.tensor([0, 0]),))


def _attention_call(**override):
    q, kp, vp, kn, vn = attention_inputs(2, 4, 2, 3, 2, 5, 4, dtype=torch.float32)
    kw = dict(q=q, k_prefix=kp, v_prefix=vp, k_nodes=kn, v_nodes=vn, key_start=torch.tensor([0, 2]))
    kw.update(override)
    return spot_kernels.tree_attention(**kw)


@pytest.mark.parametrize(
    "override,error,match",
    [
        (dict(q=torch.zeros(2, 4, 3, 2)), ValueError, "q must have 5 dimensions"),
        (dict(q=torch.zeros(2, 4, 3, 2, 4, dtype=torch.int64)), TypeError, "q must have dtype"),
        (dict(q=torch.zeros(2, 4, 3, 2, 0)), ValueError, "D >= 1"),
        (dict(k_prefix=torch.zeros(2, 2, 5, 4, dtype=torch.float64)), TypeError, "k_prefix must have dtype float32"),
        (dict(k_prefix=torch.zeros(2, 2, 5, 3)), ValueError, "k_prefix must have shape"),
        (dict(k_prefix=torch.zeros(1, 2, 5, 4)), ValueError, "k_prefix must have shape"),
        (dict(k_prefix=torch.zeros(2, 3, 5, 4)), ValueError, "multiple of the key/value heads"),
        (dict(v_prefix=torch.zeros(2, 2, 4, 4)), ValueError, "v_prefix must have shape"),
        (dict(k_nodes=torch.zeros(2, 2, 2, 2, 4)), ValueError, "k_nodes must have shape"),
        (dict(v_nodes=torch.zeros(2, 2, 3, 2, 4, dtype=torch.float16)), TypeError, "v_nodes must have dtype"),
        (dict(key_start=torch.tensor([0, 6])), ValueError, "key_start"),
        (dict(key_start=torch.tensor([-1, 0])), ValueError, "key_start"),
        (dict(key_start=torch.tensor([0, 1, 2])), ValueError, "key_start must have shape"),
        (dict(key_start=torch.tensor([0, 1], dtype=torch.int32)), TypeError, "key_start must have dtype int64"),
        (dict(key_start=[0, 1]), TypeError, "key_start must be a torch.Tensor"),
        (dict(scale=0.0), ValueError, "scale must be finite and > 0"),
        (dict(scale=math.nan), ValueError, "scale must be finite"),
        (dict(scale="x"), TypeError, "scale must be a float"),
        (dict(k_prefix=torch.zeros(2, 2, 5, 4, device="meta")), ValueError, "on one device|is on meta"),
    ],
)
def test_tree_attention_bad_input(override, error, match):
    with pytest.raises(error, match=match):
        _attention_call(**override)


# ------------------------------------------------------------------------------- backends against the reference

@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_tree_masks_match_reference(backend):
    for key_start, *shape in list(random_tree_configs(12, seed=5)) + [([0, 5, 31], 31, 3, 1, 1), ([7], 64, 0, 2, 16)]:
        ks = torch.tensor(key_start, dtype=I64, device=backend.device)
        for op in ("tree_mask", "tree_mask_packed", "tree_position_ids"):
            a, r = backend.both(op, ks, *shape)
            assert a.dtype == r.dtype and torch.equal(a, r), op
        for dtype in (torch.float32, torch.float16):
            a, r = backend.both("tree_mask_additive", ks, *shape, dtype)
            assert a.dtype == dtype and torch.equal(a, r)


def attention_args(t, b, hq, hkv, n, block, prefix, dim, dtype, seed=0, pad_last_row=True):
    """Every tensor argument of tree_attention on the backend's device; ragged left padding, and with
    pad_last_row a last row whose prefix is all padding."""
    key_start = ragged_key_start(b, prefix)
    if pad_last_row and b > 1:
        key_start[-1] = prefix
    return t.to(*attention_inputs(b, hq, hkv, n, block, prefix, dim, dtype, seed), key_start)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_tree_attention_matches_reference(backend, dtype):
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-3, atol=2e-3)
    shapes = [(2, 4, 2, 3, 5, 21, 8),  # GQA, ragged prefixes, a query tile spanning nodes and heads
              (1, 2, 2, 1, 1, 0, 3),  # no prefix, D not a power of two
              (2, 2, 1, 0, 3, 4, 8),  # no nodes
              (1, 3, 1, 2, 4, 33, 20)]
    for shape in shapes:
        args = attention_args(backend, *shape, dtype, pad_last_row=False)
        a, r = backend.both("tree_attention", *args)
        assert a.dtype == dtype and a.shape == r.shape
        torch.testing.assert_close(a, r, **tol)
    q, kp, vp, kn, vn, ks = attention_args(backend, 2, 4, 2, 3, 4, 9, 8, dtype, seed=1, pad_last_row=False)
    # non-contiguous views and an explicit scale
    a, r = backend.both("tree_attention", q.transpose(2, 3).contiguous().transpose(2, 3), kp, vp.transpose(2, 3)
                .contiguous().transpose(2, 3), kn, vn, ks, 0.2)
    torch.testing.assert_close(a, r, **tol)


TREE_CASES = [(torch.tensor([0, 2, 5]), 5, 2, 3, 4), (torch.tensor([0]), 0, 0, 2, 3),
              (torch.tensor([1, 0]), 7, 7, 0, 1), (torch.tensor([3, 0, 11, 2]), 11, 3, 5, 7),
              (torch.zeros(0, dtype=I64), 4, 1, 2, 2), (torch.tensor([0, 100]), 300, 16, 9, 32)]


@pytest.mark.parametrize("backend", CUDA_KERNELS, indirect=True)
@pytest.mark.parametrize("case", range(len(TREE_CASES)))
def test_tree_masks_parity(backend, case):
    key_start, *sizes = TREE_CASES[case]
    (key_start,) = backend.to(key_start)
    for op in ("tree_mask", "tree_mask_packed", "tree_position_ids"):
        got, want = backend.run(op, key_start, *sizes), backend.ref(op, key_start, *sizes)
        assert got.dtype == want.dtype and torch.equal(got, want), op
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        got = backend.run("tree_mask_additive", key_start, *sizes, dtype)
        want = backend.ref("tree_mask_additive", key_start, *sizes, dtype)
        assert got.dtype == dtype and torch.equal(got, want), dtype


@pytest.mark.parametrize("backend", CUDA_KERNELS, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 4, 2, 3, 5, 37, 8), (1, 4, 2, 2, 32, 70, 64), (2, 4, 4, 2, 16, 17, 40),
                                   (1, 2, 1, 3, 4, 0, 128), (1, 2, 1, 2, 8, 20, 256), (0, 2, 1, 2, 3, 4, 8),
                                   (2, 2, 1, 0, 3, 4, 8)],
                         ids=lambda s: "b{}-hq{}-hkv{}-N{}-B{}-P{}-D{}".format(*s))
def test_tree_attention_parity(backend, shape, dtype):
    args = attention_args(backend, *shape, dtype, seed=sum(shape))
    for scale in (None, 0.3):
        got = backend.run("tree_attention", *args, scale)
        want = backend.ref("tree_attention", *args, scale)
        assert got.dtype == dtype and got.shape == want.shape and got.is_contiguous()
        tol = {torch.float64: 1e-10, torch.float32: 2e-5}.get(dtype, 2e-2)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@gpu_only
@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_masks_at_scale(backend):
    key_start = torch.tensor([0, 5, 700], device=backend.device)
    shape = (2048, 32, 16, 32)
    for op in ("tree_mask", "tree_mask_packed", "tree_position_ids"):
        a, r = backend.both(op, key_start, *shape)
        assert torch.equal(a, r), op
    a, r = backend.both("tree_mask_additive", key_start, *shape, torch.bfloat16)
    assert torch.equal(a, r)


@gpu_only
@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tree_attention_bench_shape(backend, dtype):
    b, hq, hkv, n, block, prefix, dim = 2, 32, 8, 16, 32, 2048, 128
    args = backend.to(*attention_inputs(b, hq, hkv, n, block, prefix, dim, dtype, seed=1),
                      torch.tensor([0, 1000]))
    a, r = backend.both("tree_attention", *args)
    torch.testing.assert_close(a.float(), r.float(), rtol=2e-2, atol=2e-2)
