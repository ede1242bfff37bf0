"""The Triton backend on a GPU: CUDA tensors, bf16, real-model shapes (DESIGN §6), CUDA graphs, end-to-end decoding.

Skipped without CUDA (a skip is not a pass). tests/test_triton.py also runs on the GPU with its small shapes.
"""

import math

import pytest
import torch

import spot_kernels
from spot_kernels import backends

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or not backends.triton_importable(),
                                reason="needs a CUDA GPU and triton")

I64 = torch.int64
DEV = torch.device("cuda")


def both(op, *args, **kw):
    fn = getattr(torch.ops.spot, op)
    return fn(*args, **kw, backend="triton"), fn(*args, **kw, backend="reference")


def lm_like_logits(shape, dtype, seed):
    """Peaked rows like a language model's: a few strong candidates over a broad tail."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    logits = torch.randn(shape, generator=g, device=DEV) * 2.5
    top = torch.randint(0, shape[-1], (*shape[:-1], 4), generator=g, device=DEV)
    logits.scatter_add_(-1, top, 8 + 4 * torch.rand(top.shape, generator=g, device=DEV))
    return logits.to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("vocab", [151936, 32003])
def test_score_real_vocab(dtype, temperature, vocab):
    nodes, block = 4, 16
    logits = lm_like_logits((nodes, block, vocab), dtype, seed=vocab % 97)
    logits[0, 3, 17] = math.nan
    logits[1, 2] = -math.inf
    masked = torch.rand(nodes, block, device=DEV) < 0.6
    rows = torch.arange(nodes, device=DEV)
    bstart = torch.full((nodes,), 40, device=DEV)
    steps = torch.arange(nodes, device=DEV) + 1
    for kind in ("prob", "margin", "neg_entropy"):
        a, r = both("score", logits, masked, 9, rows, bstart, steps, temperature, kind, 32)
        assert torch.equal(a[0], r[0]), "tokens"
        assert torch.equal(a[3], r[3]), "top-K ids"
        assert torch.equal(a[4], r[4]), "commit positions"
        torch.testing.assert_close(a[2], r[2], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(a[1], r[1], rtol=1e-4, atol=1e-5, equal_nan=True)


def test_score_random_logits_all_kinds_and_k():
    logits = torch.randn(3, 8, 50000, device=DEV, dtype=torch.bfloat16)
    z = torch.zeros(3, dtype=I64, device=DEV)
    masked = torch.ones(3, 8, dtype=torch.bool, device=DEV)
    for kind, k, t in (("raw_prob", 32, 0.8), ("prob", 1, 1.0), ("margin", 100, 0.5), ("prob", 7, 0.0)):
        a, r = both("score", logits, masked, 3, z, z, z, t, kind, k)
        assert torch.equal(a[0], r[0]) and torch.equal(a[3], r[3]) and torch.equal(a[4], r[4])
        torch.testing.assert_close(a[2], r[2], rtol=1e-4, atol=1e-7)


def test_select_children_and_verify_at_scale():
    g = torch.Generator(device=DEV).manual_seed(0)
    frontier, block, top = 2048, 32, 32
    probs = torch.softmax(torch.randn(frontier, block, top, generator=g, device=DEV), -1)
    args = (torch.randn(frontier, block, generator=g, device=DEV),
            torch.rand(frontier, block, generator=g, device=DEV) < 0.5, torch.zeros(frontier, device=DEV), probs,
            torch.randint(0, 151936, (frontier, block, top), generator=g, device=DEV), 5,
            torch.arange(frontier, device=DEV) % 8, torch.full((frontier,), 64, device=DEV),
            torch.randint(0, 10, (frontier,), generator=g, device=DEV))
    for temperature in (0.0, 1.0):
        a, r = both("select_children", *args, temperature, 4)
        assert torch.equal(a[0], r[0]) and torch.equal(a[2], r[2])
        torch.testing.assert_close(a[1], r[1])
    for batch, nodes, width in ((32, 64, 32), (8, 128, 32), (1, 1, 16)):
        node = torch.arange(nodes, device=DEV)
        parents = (torch.rand(batch, nodes, generator=g, device=DEV) * node).long().where(node > 0, -1)
        tpos = torch.randint(0, width, (batch, nodes), generator=g, device=DEV)
        ttok = torch.randint(0, 9, (batch, nodes), generator=g, device=DEV)
        par = parents.clamp(min=0)
        hit = torch.rand(batch, nodes, generator=g, device=DEV) < 0.8
        dpos = torch.where(hit, tpos.gather(1, par), (tpos.gather(1, par) + 1) % width)
        a, r = both("verify_tree", parents, dpos, ttok.gather(1, par), tpos, ttok,
                    torch.zeros(batch, width, dtype=I64, device=DEV))
        for x, y in zip(a, r):
            assert torch.equal(x, y)


def test_masks_at_scale():
    key_start = torch.tensor([0, 5, 700], device=DEV)
    shape = (2048, 32, 16, 32)
    for op in ("tree_mask", "tree_mask_packed", "tree_position_ids"):
        a, r = both(op, key_start, *shape)
        assert torch.equal(a, r), op
    a, r = both("tree_mask_additive", key_start, *shape, torch.bfloat16)
    assert torch.equal(a, r)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tree_attention_bench_shape(dtype):
    b, hq, hkv, n, block, prefix, dim = 2, 32, 8, 16, 32, 2048, 128
    g = torch.Generator(device=DEV).manual_seed(1)

    def rnd(*s):
        return torch.randn(*s, generator=g, device=DEV).to(dtype)

    args = (rnd(b, hq, n, block, dim), rnd(b, hkv, prefix, dim), rnd(b, hkv, prefix, dim),
            rnd(b, hkv, n, block, dim), rnd(b, hkv, n, block, dim), torch.tensor([0, 1000], device=DEV))
    a, r = both("tree_attention", *args)
    torch.testing.assert_close(a.float(), r.float(), rtol=2e-2, atol=2e-2)


def test_cuda_graph_capture_of_score_and_verify():
    """No host synchronisation: the ops can be captured in a CUDA graph and replayed."""
    logits = lm_like_logits((8, 32, 32000), torch.bfloat16, seed=3)
    masked = torch.ones(8, 32, dtype=torch.bool, device=DEV)
    z = torch.zeros(8, dtype=I64, device=DEV)
    parents = torch.tensor([[-1, 0, 1, 1, 2, 3, 0, 6]], device=DEV)

    def step():
        out = spot_kernels.score(logits, masked, 1, z, z, z, 0.7, backend="triton")
        tok = out.tokens.gather(1, out.commit_pos.clamp(min=0)[:, None])[:, 0]
        draft = out.commit_pos[None].gather(1, parents.clamp(min=0))
        return spot_kernels.verify_tree(parents, draft, tok[None].gather(1, parents.clamp(min=0)),
                                        out.commit_pos[None], tok[None], torch.zeros(1, 32, dtype=I64, device=DEV),
                                        backend="triton")

    want = step()  # also compiles the kernels outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = step()
    graph.replay()
    torch.cuda.synchronize()
    for x, y in zip(got, want):
        assert torch.equal(x, y)


def test_auto_uses_a_gpu_kernel():
    args = (torch.tensor([0, 2], device=DEV), 5, 2, 2, 3)
    fn = backends.resolve("tree_mask", DEV, "auto")
    assert fn is not backends._registry[("tree_mask", "reference")]
    assert torch.equal(spot_kernels.tree_mask(*args), spot_kernels.tree_mask(*args, backend="reference"))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_on_gpu_with_triton_equals_reference(temperature, monkeypatch):
    from spot.decode import generate
    from test_decode import PROMPTS, sharp_target

    target = sharp_target(dtype=torch.float32)
    target.model.to(DEV)
    kw = dict(max_new_tokens=24, block_size=16, temperature=temperature, seed=2, budget=8, eos_id=None)
    monkeypatch.setenv("SPOT_BACKEND", "reference")
    want = generate(target, PROMPTS, "confidence", **kw)
    monkeypatch.setenv("SPOT_BACKEND", "triton")
    got = generate(target, PROMPTS, "confidence", **kw)
    assert got.tokens == want.tokens
    assert got.stats.target_passes == want.stats.target_passes
