"""The Triton backend against the reference, op by op and end to end (docs/ops.md).

Without a GPU these run on CPU tensors in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before any
kernel module is imported); with a GPU the same tests run on CUDA tensors. Shapes are tiny: the interpreter runs
each program in numpy. Larger shapes and bf16 live in tests/test_triton_gpu.py.
"""

import math
import os
import random

import pytest
import torch
from torch.library import opcheck

import spot_kernels
from spot_kernels import backends
from spot_kernels.ops import ScoreOutput
from spot_kernels.schemas import SCHEMAS

from samples import sample_args
from test_tree_attention import random_configs
from test_verify_tree import random_tree

if not backends.triton_importable():
    pytest.skip("triton is not installed", allow_module_level=True)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if DEVICE.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

# The interpreter evaluates masked-out lanes too (inf - inf, log 0, ...) and numpy warns about them.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
I64 = torch.int64
KINDS = ("prob", "raw_prob", "margin", "neg_entropy")


def both(op, *args, **kw):
    """(triton output, reference output) of torch.ops.spot.<op>."""
    fn = getattr(torch.ops.spot, op)
    return fn(*args, **kw, backend="triton"), fn(*args, **kw, backend="reference")


def on_device(*tensors):
    return [t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in tensors]


def test_every_op_has_a_triton_kernel():
    for op in SCHEMAS:
        assert "triton" in spot_kernels.available_backends(op, DEVICE), op


# ----------------------------------------------------------------------------------------------------- noise

@pytest.mark.parametrize("seed", [0, 1, 2**32 + 5, 2**63 - 1])
def test_noise_uniforms_bit_for_bit(seed):
    g = torch.Generator().manual_seed(seed % 1000)
    x = torch.randint(-2**40, 2**40, (4, 3, 2), generator=g).transpose(0, 2)  # non-contiguous, negative, > 32 bits
    cases = [
        (torch.arange(3)[:, None], torch.tensor(7), torch.tensor(1), torch.arange(50)),
        (x, x[:1], x[:, :1, :1] - 40, torch.arange(2)[:, None, None, None] * x),
        (torch.tensor(-1), torch.tensor(2**33), torch.tensor(0), torch.arange(0)),
    ]
    for args in cases:
        a, r = both("noise_uniform", seed, *on_device(*args))
        assert a.dtype == torch.float32 and a.shape == r.shape
        assert torch.equal(a, r)


# --------------------------------------------------------------------------------------------------- scoring

def score_inputs(lead, block, vocab, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(*lead, block, vocab, generator=g) * 3).to(dtype)
    masked = torch.rand(*lead, block, generator=g) < 0.6
    n = math.prod(lead)
    rows = torch.randint(0, 4, lead, generator=g)
    block_start = torch.randint(0, 100, lead, generator=g)
    steps = torch.arange(n).reshape(lead)
    return logits, masked, rows, block_start, steps


def check_score(logits, masked, rows, block_start, steps, temperature, confidence, top_k, seed=11):
    args = on_device(logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k)
    a, r = both("score", *args)
    names = ("tokens", "confidence", "topk_probs", "topk_ids", "commit_pos")
    for name, x, y in zip(names, a, r):
        assert x.dtype == y.dtype and x.shape == y.shape and x.device == y.device, name
    tokens, conf, probs, ids, commit = a
    assert torch.equal(tokens, r[0])
    assert torch.equal(ids, r[3])
    assert torch.equal(commit, r[4])
    torch.testing.assert_close(probs, r[2], rtol=2e-5, atol=1e-7)
    torch.testing.assert_close(conf, r[1], rtol=2e-5, atol=2e-6, equal_nan=True)
    return ScoreOutput(*a)


@pytest.mark.parametrize("dtype,temperature,kinds", [(torch.float32, 0.0, KINDS), (torch.float32, 0.7, KINDS),
                                                     (torch.float16, 1.0, ("prob", "margin"))])
def test_score_matches_reference(dtype, temperature, kinds, monkeypatch):
    """Confidence kinds; V = 37 in tiles of 16 (not a multiple); partial -inf; invalid rows; ties."""
    monkeypatch.setenv("SPOT_TRITON_SCORE_BLOCK", "16")
    logits, masked, rows, block_start, steps = score_inputs((2, 2), 4, 37, dtype, seed=int(temperature * 10))
    logits[0, 0, 1, 5:9] = -math.inf  # partial -inf is ordinary
    logits[0, 1, 0, 3] = math.nan  # invalid rows: NaN, +inf, all -inf
    logits[0, 1, 2, 30] = math.inf
    logits[1, 0, 3] = -math.inf
    logits[1, 1, 1] = torch.tensor([float(v % 5) for v in range(37)], dtype=dtype)  # ties across tiles
    masked[1, 1] = True
    for kind in kinds:
        out = check_score(logits, masked, rows, block_start, steps, temperature, kind, top_k=4)
    assert (out.tokens[0, 1, [0, 2]] == -1).all() and (out.tokens[1, 0, 3] == -1)
    if temperature == 0:
        assert out.tokens[1, 1, 1] == 4 and out.topk_ids[1, 1, 1].tolist() == [4, 9, 14, 19]


def test_gumbel_bound_table():
    """The table the scoring kernel filters tiles with bounds every Gumbel value from above, tightly."""
    from spot_kernels.reference.noise import gumbel_from_words
    from spot_kernels.triton.score import _gumbel_bounds

    t = torch.arange(1 << 23, dtype=torch.int32)
    g = gumbel_from_words((8388607 - t).to(I64) << 9, torch.float32)
    bucket = torch.where(t == 0, 0, (t.to(torch.float32).view(torch.int32) >> 17) - 8127).long()
    bound = _gumbel_bounds(torch.device("cpu"))[bucket]
    assert bool((g <= bound).all())
    assert (bound - g)[g > 0].max().item() < 0.025  # loose only for the smallest values, which never win


def test_score_many_tiles_at_temperature(monkeypatch):
    """V = 300 in 19 tiles of 16: most tiles are filtered out by the Gumbel bounds; the tokens stay exact."""
    monkeypatch.setenv("SPOT_TRITON_SCORE_BLOCK", "16")
    logits, masked, rows, block_start, steps = score_inputs((2,), 2, 300, torch.float32, seed=8)
    for temperature in (0.3, 1.0):
        check_score(logits, masked, rows, block_start, steps, temperature, "prob", top_k=2)


@pytest.mark.parametrize("temperature", [0.0, 0.5])
def test_score_shapes_and_edge_cases(temperature):
    fp32 = torch.float32
    # no leading dims; K > V (padding); V = 1; top_k = 1
    logits, masked, rows, block_start, steps = score_inputs((), 3, 11, fp32, seed=1)
    check_score(logits, masked, rows, block_start, steps, temperature, "margin", top_k=13)
    check_score(logits[:, :1], masked, rows, block_start, steps, temperature, "margin", top_k=2)
    check_score(logits, masked, rows, block_start, steps, temperature, "prob", top_k=1)
    # all masked / none masked / several nodes
    logits, masked, rows, block_start, steps = score_inputs((3,), 3, 9, fp32, seed=2)
    masked[0] = True
    masked[1] = False
    out = check_score(logits, masked, rows, block_start, steps, temperature, "prob", top_k=3)
    assert out.commit_pos[1] == -1 and out.commit_pos[0] >= 0
    # empty batches and B = 0
    for lead, block in (((0, 3), 4), ((2,), 0)):
        logits, masked, rows, block_start, steps = score_inputs(lead, block, 5, fp32, seed=3)
        out = check_score(logits, masked, rows, block_start, steps, temperature, "prob", top_k=2)
        if block == 0:
            assert out.commit_pos.tolist() == [-1, -1]


def test_score_zero_probabilities_and_overflow():
    """Entries whose probability underflows to exactly 0 tie at 0 and are listed by lowest id, as the reference
    does; a tiny temperature that overflows x to +inf makes the row invalid."""
    logits = torch.full((1, 3, 10), -200.0)
    logits[0, 0, 7] = 0.0  # one entry carries all the mass; the others underflow to 0
    logits[0, 1, 2] = 5.0
    logits[0, 1, 6] = 5.0  # a tie for the top, then zeros
    logits[0, 2] = torch.linspace(-3, 3, 10)
    z = torch.zeros(1, dtype=I64)
    for temperature in (0.0, 0.25):
        out = check_score(logits, torch.ones(1, 3, dtype=torch.bool), z, z, z, temperature, "prob", top_k=4)
        assert out.topk_ids[0, 0].tolist() == [7, 0, 1, 2]
        assert out.topk_ids[0, 1].tolist() == [2, 6, 0, 1]
    big = torch.full((1, 1, 4), 3e38)
    out = check_score(big, torch.ones(1, 1, dtype=torch.bool), z, z, z, 1e-3, "prob", top_k=2)
    assert out.tokens.item() == -1 and out.commit_pos.item() == -1


def test_score_falls_back_to_the_reference():
    """float64 logits and top_k > 1024 run the reference inside the triton backend (documented)."""
    logits, masked, rows, block_start, steps = score_inputs((2,), 2, 7, torch.float64, seed=4)
    check_score(logits, masked, rows, block_start, steps, 0.7, "prob", top_k=3)
    check_score(logits.float(), masked, rows, block_start, steps, 0.7, "prob", top_k=1025)


# --------------------------------------------------------------------------------------------------- drafter

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_select_children_matches_reference(dtype, temperature):
    g = torch.Generator().manual_seed(int(temperature * 10) + (dtype == torch.float64))
    frontier, block, top = 5, 6, 4
    logits = torch.randn(frontier, block, generator=g, dtype=dtype)
    logits[1, 0] = math.inf  # +inf: those positions share the mass
    logits[1, 3] = math.inf
    logits[2, 2] = math.nan  # NaN counts as -inf
    logits[2, 4] = -math.inf
    logits[3, 1] = logits[3, 4]  # a tie: lowest position first
    masked = torch.rand(frontier, block, generator=g) < 0.8
    masked[4] = False  # nothing eligible
    path = torch.randn(frontier, generator=g, dtype=dtype)
    probs = torch.softmax(torch.randn(frontier, block, top, generator=g, dtype=dtype), -1)
    probs[..., -1] = 0  # prob 0: not eligible
    ids = torch.randint(-1, 40, (frontier, block, top), generator=g)
    rows, block_start, steps = torch.arange(frontier), torch.full((frontier,), 8), torch.arange(frontier) + 2
    for k, stale in ((2, (probs, ids)), (9, (probs[:1].expand(frontier, block, top), ids[:1].expand_as(ids))),
                     (3, (probs[..., :0], ids[..., :0]))):  # k > B; expanded views; K = 0
        args = on_device(logits, masked, path, *stale, 5, rows, block_start, steps, temperature, k)
        a, r = both("select_children", *args)
        assert torch.equal(a[0], r[0]) and torch.equal(a[2], r[2])
        assert a[1].dtype == r[1].dtype
        torch.testing.assert_close(a[1], r[1])
    empty = on_device(logits[:0], masked[:0], path[:0], probs[:0], ids[:0], 5, rows[:0], block_start[:0],
                      steps[:0], temperature, 2)
    a, r = both("select_children", *empty)
    assert all(x.shape == (0, 2) for x in a)


# ---------------------------------------------------------------------------------------------------- verify

def test_verify_matches_reference():
    rng = random.Random(0)
    for n, width, b in ((1, 4, 1), (9, 6, 3), (64, 32, 2), (33, 8, 0), (70, 5, 2)):
        trees = [random_tree(rng, n, width) for _ in range(b)]
        args = [torch.tensor([t[i] for t in trees], dtype=I64).reshape(b, n) for i in range(5)]
        block = torch.randint(0, 9, (b, width))
        a, r = both("verify_tree", *on_device(*args, block))
        for x, y in zip(a, r):
            assert torch.equal(x, y)


# ------------------------------------------------------------------------------------------- tree attention

def test_tree_masks_match_reference():
    for key_start, *shape in list(random_configs(12, seed=5)) + [([0, 5, 31], 31, 3, 1, 1), ([7], 64, 0, 2, 16)]:
        ks = torch.tensor(key_start, dtype=I64, device=DEVICE)
        for op in ("tree_mask", "tree_mask_packed", "tree_position_ids"):
            a, r = both(op, ks, *shape)
            assert a.dtype == r.dtype and torch.equal(a, r), op
        for dtype in (torch.float32, torch.float16):
            a, r = both("tree_mask_additive", ks, *shape, dtype)
            assert a.dtype == dtype and torch.equal(a, r)


def attention_args(b, hq, hkv, n, block, prefix, dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(*s):
        return torch.randn(*s, generator=g).to(dtype)

    key_start = torch.tensor([(5 * r) % (prefix + 1) for r in range(b)], dtype=I64)
    return on_device(rnd(b, hq, n, block, dim), rnd(b, hkv, prefix, dim), rnd(b, hkv, prefix, dim),
                     rnd(b, hkv, n, block, dim), rnd(b, hkv, n, block, dim), key_start)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_tree_attention_matches_reference(dtype):
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-3, atol=2e-3)
    shapes = [(2, 4, 2, 3, 5, 21, 8),  # GQA, ragged prefixes, a query tile spanning nodes and heads
              (1, 2, 2, 1, 1, 0, 3),  # no prefix, D not a power of two
              (2, 2, 1, 0, 3, 4, 8),  # no nodes
              (1, 3, 1, 2, 4, 33, 20)]
    for shape in shapes:
        args = attention_args(*shape, dtype)
        a, r = both("tree_attention", *args)
        assert a.dtype == dtype and a.shape == r.shape
        torch.testing.assert_close(a, r, **tol)
    q, kp, vp, kn, vn, ks = attention_args(2, 4, 2, 3, 4, 9, 8, dtype, seed=1)
    # non-contiguous views and an explicit scale
    a, r = both("tree_attention", q.transpose(2, 3).contiguous().transpose(2, 3), kp, vp.transpose(2, 3)
                .contiguous().transpose(2, 3), kn, vn, ks, 0.2)
    torch.testing.assert_close(a, r, **tol)


# ---------------------------------------------------------------------------------------------------- opcheck

@pytest.mark.parametrize("op", list(SCHEMAS))
def test_opcheck_with_the_triton_backend(op):
    args = on_device(*sample_args(op))
    opcheck(getattr(torch.ops.spot, op).default, tuple(args), {"backend": "triton"})


# ------------------------------------------------------------------------------------------------ end to end

@pytest.mark.parametrize("score_all_nodes", [True, False])
def test_generate_with_triton_equals_reference(monkeypatch, score_all_nodes):
    """spot.generate on a tiny random float32 model: SPOT_BACKEND=triton gives exactly the reference's tokens, and
    the model's mask ops run through Triton too (T = 0 is covered op by op above). Both ways of scoring a tree:
    every node in one call (as on a GPU) and the accepted chain only (the CPU default)."""
    from spot.decode import generate
    from test_decode import PROMPTS, sharp_target

    target = sharp_target(dtype=torch.float32)
    target.model.to(DEVICE)
    kw = dict(max_new_tokens=4, block_size=4, temperature=0.7, seed=3, budget=4, top_k=4, eos_id=None,
              score_all_nodes=score_all_nodes)
    prompts = PROMPTS[:2]
    monkeypatch.setenv("SPOT_BACKEND", "reference")
    want = generate(target, prompts, "confidence", **kw)

    calls = {}
    for op in ("score", "select_children", "verify_tree", "tree_mask", "tree_position_ids"):
        fn = backends.resolve(op, DEVICE, "triton")

        def counted(*args, _fn=fn, _op=op):
            calls[_op] = calls.get(_op, 0) + 1
            return _fn(*args)

        monkeypatch.setitem(backends._registry, (op, "triton"), counted)
    monkeypatch.setenv("SPOT_BACKEND", "triton")
    got = generate(target, prompts, "confidence", **kw)
    assert got.tokens == want.tokens
    assert torch.equal(got.orders, want.orders)
    assert got.stats.target_passes == want.stats.target_passes
    assert any(c > 1 and n > 0 for c, n in got.stats.commits_per_pass.items()), "no drafted commit was accepted"
    assert set(calls) == {"score", "select_children", "verify_tree", "tree_mask", "tree_position_ids"}, calls
