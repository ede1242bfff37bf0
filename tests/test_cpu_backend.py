"""The C++ CPU backend (csrc/cpu/*.cpp, backend="cpu") against the reference, on the same inputs.

Every parity test takes the backend under test from BACKENDS and compares `backend=<name>` with
`backend="reference"`: identical tokens, top-K ids, commit positions, children, accepted chains and noise words;
probabilities and log-probabilities within float rounding. The reference's softmax sums V float32 terms in float32;
the kernel sums chunks in double, so most of the difference is the reference's own rounding: over float16 / bfloat16 /
float32 logits, V up to 151,936 and logit scales up to 10, the largest measured |p_cpu - p_ref| was 1.4e-5 (2.3e-5
relative, probabilities >= 1e-6; the kernel's error against a float64 softmax stayed below 7e-7 relative) and
2.6e-14 for float64 (neg_entropy: 5.9e-5 and 2.8e-14 absolute). PROB_TOL covers the smaller shapes tested here.
"""

import math

import pytest
import torch

import spot_kernels
from spot_kernels import CONFIDENCE_KINDS as KINDS
from spot_kernels import backends
from spot_kernels.ops import FAMILIES

I64 = torch.int64
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

HAS_CPU = spot_kernels.HAS_C_EXTENSION and hasattr(torch.ops.spot, "_score_cpu")
pytestmark = pytest.mark.skipif(not HAS_CPU, reason="spot_kernels._C (with csrc/cpu) is not built or not loaded")
BACKENDS = ["cpu"]

# (rtol, atol) for probabilities / confidences by compute dtype; neg_entropy, a sum over V of p log p, is compared
# with an absolute tolerance scaled by log(V).
PROB_TOL = {torch.float32: (1e-5, 2e-6), torch.float64: (1e-12, 1e-13)}


def _close(a, b, cdtype, scale=1.0):
    rtol, atol = PROB_TOL[cdtype]
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol * scale, equal_nan=True)


# ---------------------------------------------------------------------------------------------------- score

def _score(backend, logits, masked=None, seed=3, rows=None, block_start=None, steps=None, temperature=1.0,
           confidence="prob", top_k=8):
    lead = logits.shape[:-2]
    if masked is None:
        masked = torch.ones(logits.shape[:-1], dtype=torch.bool)
    rows = torch.arange(math.prod(lead), dtype=I64).reshape(lead) if rows is None else rows
    block_start = torch.full(lead, 16, dtype=I64) if block_start is None else block_start
    steps = torch.full(lead, 2, dtype=I64) if steps is None else steps
    return spot_kernels.score(logits, masked, seed, rows, block_start, steps, temperature, confidence=confidence,
                              top_k=top_k, backend=backend)


def check_score(backend, logits, **kw):
    out = _score(backend, logits, **kw)
    ref = _score("reference", logits, **kw)
    cdtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    assert torch.equal(out.tokens, ref.tokens)
    assert torch.equal(out.topk_ids, ref.topk_ids)
    assert torch.equal(out.commit_pos, ref.commit_pos)
    scale = math.log(logits.shape[-1]) + 1 if kw.get("confidence") == "neg_entropy" else 1.0
    _close(out.confidence, ref.confidence, cdtype, scale)
    _close(out.topk_probs, ref.topk_probs, cdtype)
    for a, b in zip(out, ref):
        assert a.dtype == b.dtype and a.shape == b.shape and a.is_contiguous()
    return out, ref


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("confidence", KINDS)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_score_random(backend, dtype, temperature, confidence):
    g = torch.Generator().manual_seed(DTYPES.index(dtype) * 100 + int(temperature * 10) + KINDS.index(confidence))
    logits = (torch.randn(2, 3, 5, 1003, generator=g) * 3).to(dtype)  # V not a multiple of any tile
    masked = torch.rand(2, 3, 5, generator=g) < 0.7
    check_score(backend, logits, masked=masked, temperature=temperature, confidence=confidence, top_k=8)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temperature", [0.0, 0.5])
@pytest.mark.parametrize("confidence", KINDS)
def test_score_invalid_rows_and_partial_inf(backend, temperature, confidence):
    for dtype in (torch.float32, torch.float64):
        logits = torch.zeros(1, 7, 21, dtype=dtype)
        logits[0, 0, 3] = math.nan
        logits[0, 1] = -math.inf
        logits[0, 2, 5] = math.inf
        logits[0, 3, ::2] = -math.inf  # partial -inf: ordinary
        logits[0, 4] = torch.arange(21, dtype=dtype)
        logits[0, 5, :20] = -math.inf  # only the last entry is finite
        logits[0, 6, 7] = 4.0
        out, _ = check_score(backend, logits, temperature=temperature, confidence=confidence, top_k=25)
        assert out.tokens[0, :3].tolist() == [-1, -1, -1]
        assert torch.isnan(out.confidence[0, :3]).all()
        assert (out.topk_ids[0, :3] == -1).all() and (out.topk_probs[0, :3] == 0).all()
        assert (out.topk_ids[0, 3:, 21:] == -1).all()  # top_k > V: padding


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_score_ties(backend, temperature, dtype):
    """Equal logits, equal probabilities (including probabilities that underflow to 0): lowest ids first."""
    logits = torch.zeros(1, 6, 40, dtype=dtype)
    logits[0, 1, ::3] = 2.0  # ties at the top
    logits[0, 2] = torch.arange(40, dtype=dtype) % 4  # repeated values across the K cut
    logits[0, 3, 17] = 200.0  # every other probability underflows (float32) or is tiny (float64)
    logits[0, 4, 30] = 1000.0
    logits[0, 4, 2] = 1000.0
    logits[0, 5] = -5.0
    for top_k in (1, 5, 13, 40, 45):
        for kind in KINDS:
            check_score(backend, logits, temperature=temperature, confidence=kind, top_k=top_k)
    # a commit tie: identical rows give equal confidences, the lowest position wins
    same = torch.randn(1, 1, 30, dtype=dtype).expand(2, 4, 30).contiguous()
    check_score(backend, same, temperature=temperature)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("vocab", [1, 2, 15, 16, 17, 4099])
def test_score_vocab_sizes(backend, vocab):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(3, 4, vocab, generator=g, dtype=torch.float64) * 4
    for temperature in (0.0, 0.3, 1.0):
        for kind in KINDS:
            check_score(backend, logits, temperature=temperature, confidence=kind, top_k=6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_score_wide_logits_and_small_temperatures(backend):
    """Logit spreads far beyond the Gumbel range (most entries pruned before hashing) and tiny temperatures."""
    g = torch.Generator().manual_seed(7)
    for dtype in (torch.float32, torch.float64):
        logits = (torch.randn(2, 4, 5000, generator=g) * 200).to(dtype)
        for temperature in (1e-3, 0.05, 1.0, 30.0):
            check_score(backend, logits, temperature=temperature, top_k=32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_score_empty_and_shapes(backend):
    for shape in [(0, 4, 9), (2, 0, 9), (0, 0, 9), (1, 3, 0, 9), (4, 9)]:
        check_score(backend, torch.randn(shape))
    out, _ = check_score(backend, torch.randn(2, 0, 9))
    assert out.commit_pos.tolist() == [-1, -1]
    # more leading dims, T = 0 and T > 0
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 4, 50, generator=g)
    for temperature in (0.0, 1.0):
        check_score(backend, logits, temperature=temperature, top_k=3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_score_non_contiguous_and_expanded(backend):
    g = torch.Generator().manual_seed(2)
    base = torch.randn(5, 40, 3, 2, generator=g, dtype=torch.float64)
    logits = base[..., 0].transpose(0, 2)  # [3, 40, 5] -> non-contiguous [3, 40, 5]
    logits = logits.transpose(1, 2)[:, :, ::2]  # [3, 5, 20], strided vocab
    assert not logits.is_contiguous()
    masked = (torch.rand(5, 3, generator=g) < 0.6).t()
    rows = torch.tensor(4).expand(3)
    block_start = torch.tensor([0, 5, 9])[::1]
    steps = torch.zeros(6, dtype=I64)[::2]
    for temperature in (0.0, 0.9):
        check_score(backend, logits, masked=masked, rows=rows, block_start=block_start, steps=steps,
                    temperature=temperature, confidence="margin", top_k=7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_score_seeds_and_row_ids(backend):
    """Noise words for extreme seeds and ids (only the low 32 bits are used, two's complement)."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 4, 300, generator=g, dtype=torch.float64)
    rows = torch.tensor([-1, 2**40 + 3, 0])
    block_start = torch.tensor([0, 2**33, 7])
    steps = torch.tensor([2**32 - 1, 5, 0])
    for seed in (0, 1, 2**32, 2**63 - 1):
        check_score(backend, logits, seed=seed, rows=rows, block_start=block_start, steps=steps, temperature=1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_score_large_vocabulary(backend):
    """A decoder-sized row, where the Gumbel pruning matters."""
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(1, 3, 151936, generator=g) * 2.5
    for temperature in (0.0, 1.0):
        check_score(backend, logits, temperature=temperature, top_k=32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_score_threads(backend):
    """Rows are spread over threads (at::parallel_for): results do not depend on the thread count."""
    g = torch.Generator().manual_seed(8)
    logits = torch.randn(4, 16, 3000, generator=g)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _score(backend, logits, temperature=0.8, confidence="neg_entropy")
        torch.set_num_threads(2)
        two = _score(backend, logits, temperature=0.8, confidence="neg_entropy")
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, two):
        assert torch.equal(a, b)
    check_score(backend, logits, temperature=0.8, confidence="neg_entropy")


# ---------------------------------------------------------------------------------------------------- noise

@pytest.mark.parametrize("backend", BACKENDS)
def test_noise_uniform_bit_exact(backend):
    g = torch.Generator().manual_seed(5)
    cases = [
        (torch.arange(3)[:, None], torch.tensor(7), torch.tensor(1), torch.arange(4)),
        (torch.randint(-2**62, 2**62, (2, 1, 1), generator=g), torch.randint(0, 2**40, (1, 3, 1), generator=g),
         torch.tensor([-1, 0, 2**32 + 5])[None, :, None], torch.arange(-3, 1000)),
        (torch.tensor(0), torch.tensor(0), torch.tensor(0), torch.tensor(0)),  # 0-dim
        (torch.arange(4), torch.arange(4), torch.arange(4), torch.arange(4)),
        (torch.zeros(0, 3, dtype=I64), torch.tensor(1), torch.tensor(2), torch.arange(3)),  # empty
        (torch.arange(12).reshape(3, 4).t(), torch.tensor(1), torch.arange(6)[::2], torch.tensor(9)),  # strided
    ]
    for seed in (0, 5, 2**32 + 1, 2**63 - 1):
        for args in cases:
            out = spot_kernels.noise_uniform(seed, *args, backend=backend)
            ref = spot_kernels.noise_uniform(seed, *args, backend="reference")
            assert out.dtype == torch.float32 and out.shape == ref.shape and out.is_contiguous()
            assert torch.equal(out, ref)


# ---------------------------------------------------------------------------------------------- verify_tree

def _random_tree(g, b, n, width):
    parents = torch.full((b, n), -1, dtype=I64)
    for i in range(1, n):
        parents[:, i] = torch.randint(-1, i, (b,), generator=g)
    target_pos = torch.randint(-1, width, (b, n), generator=g)
    target_tokens = torch.randint(0, 3, (b, n), generator=g)
    draft_pos = torch.randint(0, width, (b, n), generator=g)
    draft_tokens = torch.randint(0, 3, (b, n), generator=g)
    for i in range(1, n):  # make most edges hold so that chains are accepted
        p = parents[:, i].clamp(min=0)
        take = (torch.rand(b, generator=g) < 0.8) & (target_pos[torch.arange(b), p] >= 0)
        draft_pos[:, i] = torch.where(take, target_pos[torch.arange(b), p], draft_pos[:, i])
        draft_tokens[:, i] = torch.where(take, target_tokens[torch.arange(b), p], draft_tokens[:, i])
    block = torch.randint(0, 50, (b, width), generator=g)
    return parents, draft_pos, draft_tokens, target_pos, target_tokens, block


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1, 1, 4), (7, 2, 3), (64, 9, 8), (16, 40, 32), (0, 3, 4)])
def test_verify_tree_random(backend, shape):
    b, n, width = shape
    g = torch.Generator().manual_seed(b * 1000 + n)
    args = _random_tree(g, b, n, width)
    out = spot_kernels.verify_tree(*args, backend=backend)
    ref = spot_kernels.verify_tree(*args, backend="reference")
    for a, r in zip(out, ref):
        assert a.dtype == r.dtype and a.is_contiguous()
        assert torch.equal(a, r)
    if b:
        assert int(out.num_accepted.max()) >= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_verify_tree_non_contiguous(backend):
    g = torch.Generator().manual_seed(11)
    args = _random_tree(g, 6, 10, 8)
    strided = tuple(torch.stack([a, a], dim=-1)[..., 0] for a in args)  # same values, stride 2
    assert not strided[0].is_contiguous()
    out = spot_kernels.verify_tree(*strided, backend=backend)
    ref = spot_kernels.verify_tree(*args, backend="reference")
    for a, r in zip(out, ref):
        assert torch.equal(a, r)


# ------------------------------------------------------------------------------------------ select_children

def _children_args(g, frontier, block, top, dtype, probs_dtype):
    logits = torch.randn(frontier, block, generator=g, dtype=dtype)
    if frontier >= 4 and block >= 6:
        logits[0, 2] = math.nan
        logits[1, 3] = -math.inf
        logits[2, 4] = math.inf
        logits[2, 5] = math.inf
        logits[3] = -math.inf  # nothing eligible
        logits[1, 0] = logits[1, 1]  # a tie: lowest position first
    masked = torch.rand(frontier, block, generator=g) < 0.75
    path = torch.randn(frontier, generator=g, dtype=dtype)
    probs = torch.softmax(torch.randn(frontier, block, top, generator=g, dtype=torch.float64) * 2, -1)
    probs = probs.sort(-1, descending=True).values.to(probs_dtype)
    ids = torch.randint(-1, 1000, (frontier, block, top), generator=g)
    if top >= 3:
        probs[:, :, 2] = 0  # not eligible
    rows = torch.arange(frontier, dtype=I64)
    block_start = torch.full((frontier,), 5, dtype=I64)
    steps = torch.arange(frontier, dtype=I64) % 3
    return logits, masked, path, probs, ids, 9, rows, block_start, steps


def check_children(backend, args, temperature, k):
    out = spot_kernels.select_children(*args, temperature, k, backend=backend)
    ref = spot_kernels.select_children(*args, temperature, k, backend="reference")
    assert torch.equal(out.child_pos, ref.child_pos)
    assert torch.equal(out.child_tokens, ref.child_tokens)
    cdtype = args[0].dtype
    _close(out.child_logprob, ref.child_logprob, cdtype)
    for a, r in zip(out, ref):
        assert a.dtype == r.dtype and a.shape == r.shape and a.is_contiguous()
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float64, torch.float64),
                                    (torch.float32, torch.float64), (torch.float64, torch.float32)], ids=str)
def test_select_children_random(backend, dtypes, temperature):
    g = torch.Generator().manual_seed(int(temperature * 10) + 7 * dtypes[0].itemsize + dtypes[1].itemsize)
    for frontier, block, top in [(6, 10, 5), (3, 32, 32), (5, 7, 1)]:
        args = _children_args(g, frontier, block, top, *dtypes)
        for k in (1, 3, block, block + 4):
            check_children(backend, args, temperature, k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_select_children_edge_shapes(backend):
    g = torch.Generator().manual_seed(12)
    for frontier, block, top in [(0, 4, 3), (4, 6, 0), (2, 1, 2)]:
        args = _children_args(g, frontier, block, top, torch.float32, torch.float32)
        for temperature in (0.0, 1.0):
            check_children(backend, args, temperature, 3)
    # expanded stale features (a broadcast view, as the decoder passes) and a non-contiguous logits view
    logits, masked, path, probs, ids, seed, rows, block_start, steps = _children_args(
        g, 4, 8, 4, torch.float64, torch.float64)
    args = (logits.t().contiguous().t(), masked, path, probs[:1].expand(4, 8, 4), ids[:1].expand(4, 8, 4), seed,
            rows, block_start, steps)
    for temperature in (0.0, 0.5):
        check_children(backend, args, temperature, 5)


# ------------------------------------------------------------------------------------------- errors, routing

@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_input_raises_the_reference_errors(backend):
    """The router validates before any backend runs: the same exception type and message."""
    good = torch.randn(2, 3, 11)
    masked = torch.ones(2, 3, dtype=torch.bool)
    z = torch.zeros(2, dtype=I64)
    bad_calls = [
        lambda b: spot_kernels.score(good.to(torch.int32), masked, 0, z, z, z, 1.0, backend=b),
        lambda b: spot_kernels.score(good, masked[:, :2], 0, z, z, z, 1.0, backend=b),
        lambda b: spot_kernels.score(good, masked, -1, z, z, z, 1.0, backend=b),
        lambda b: spot_kernels.score(good, masked, 0, z, z, z, -1.0, backend=b),
        lambda b: spot_kernels.score(good, masked, 0, z, z, z, 1.0, confidence="entropy", backend=b),
        lambda b: spot_kernels.score(good, masked, 0, z, z, z, 1.0, top_k=0, backend=b),
        lambda b: spot_kernels.score(good, masked, 0, z[:1], z, z, 1.0, backend=b),
        lambda b: spot_kernels.noise_uniform(0, torch.arange(3), torch.arange(4), z, z, backend=b),
        lambda b: spot_kernels.noise_uniform(0, torch.arange(3.0), z, z, z, backend=b),
        lambda b: spot_kernels.verify_tree(*[torch.tensor([[0, 0]])] * 5, torch.zeros(1, 3, dtype=I64), backend=b),
        lambda b: spot_kernels.verify_tree(*[torch.zeros(1, 0, dtype=I64)] * 5, torch.zeros(1, 3, dtype=I64),
                                           backend=b),
        lambda b: spot_kernels.select_children(torch.randn(2, 4), torch.ones(2, 4, dtype=torch.bool), torch.zeros(2),
                                               torch.rand(2, 4, 3), torch.zeros(2, 4, 3, dtype=I64), 0, z, z, z, 1.0,
                                               0, backend=b),
    ]
    for call in bad_calls:
        with pytest.raises((TypeError, ValueError)) as want:
            call("reference")
        with pytest.raises(want.type) as got:
            call(backend)
        assert str(got.value) == str(want.value)


def test_auto_picks_cpu_for_cpu_tensors(monkeypatch):
    monkeypatch.delenv("SPOT_BACKEND", raising=False)
    cpu = torch.device("cpu")
    for op in ("noise_uniform", "score", "select_children", "verify_tree"):
        assert backends.resolve(op, cpu, "auto") is getattr(torch.ops.spot, f"_{op}_cpu")
        assert backends.resolve(op, cpu, "cpu") is getattr(torch.ops.spot, f"_{op}_cpu")
        assert "cpu" in spot_kernels.available_backends(op, "cpu")
    # ops without a CPU kernel keep the reference
    for op in ("tree_mask", "tree_attention"):
        assert backends.resolve(op, cpu, "auto") is backends.kernels("reference", FAMILIES[op])[op]
        with pytest.raises(spot_kernels.BackendUnavailable, match=f"cpu backend: no kernel for spot::{op} yet"):
            backends.resolve(op, cpu, "cpu")
    # SPOT_BACKEND=cpu
    monkeypatch.setenv("SPOT_BACKEND", "cpu")
    assert backends.resolve("score", cpu, "auto") is torch.ops.spot._score_cpu
    monkeypatch.setenv("SPOT_BACKEND", "reference")
    assert backends.resolve("score", cpu, "auto") is backends.kernels("reference", "score")["score"]


def test_cpu_backend_reasons(monkeypatch):
    with pytest.raises(spot_kernels.BackendUnavailable, match="cpu backend needs CPU tensors, got meta tensors"):
        backends.resolve("score", torch.device("meta"), "cpu")
    monkeypatch.setattr(spot_kernels, "HAS_C_EXTENSION", False)
    fn, reason = backends._kernel("score", "cpu", torch.device("cpu"))
    assert fn is None and "spot_kernels._C is not loaded" in reason
    # without the extension "auto" falls back to the reference, and SPOT_BACKEND=cpu cannot run
    assert backends.resolve("score", torch.device("cpu"), "auto") is backends.kernels("reference", "score")["score"]
    monkeypatch.setenv("SPOT_BACKEND", "cpu")
    for op in ("score", "tree_mask"):
        with pytest.raises(spot_kernels.BackendUnavailable, match="_C is not loaded.*requested by SPOT_BACKEND"):
            backends.resolve(op, torch.device("cpu"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_ops_trace_with_the_cpu_backend(backend):
    """The public op (router + fake impl) still compiles and matches eager with the C++ kernels underneath."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 50, generator=g)
    masked = torch.rand(2, 3, generator=g) < 0.7
    z = torch.zeros(2, dtype=I64)

    def step(logits, masked, rows):
        out = spot_kernels.score(logits, masked, 3, rows, rows, rows, 0.7, top_k=4, backend=backend)
        return out.tokens, out.commit_pos

    eager = step(logits, masked, z)
    compiled = torch.compile(step, fullgraph=True, backend="eager")(logits, masked, z)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------------------------- decoder

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_decoder_is_token_identical(backend, temperature, monkeypatch):
    """spot.generate on a tiny float64 target: the same tokens with SPOT_BACKEND=<backend> and =reference, and the
    backend's kernels are really the ones called."""
    import spot
    from spot.decode import generate

    from tiny import PROMPTS, sharp_target

    target = sharp_target()
    calls = {}
    for op in ("score", "select_children", "verify_tree"):
        kernel = getattr(torch.ops.spot, f"_{op}_{backend}")

        def counted(*args, _op=op, _kernel=kernel):
            calls[_op] = calls.get(_op, 0) + 1
            return _kernel(*args)

        monkeypatch.setitem(backends.kernels(backend, FAMILIES[op]), op, counted)
    runs = [("standard", {}), ("confidence", {}), ("spot", {"drafter": spot.ConfidenceDrafter()})]
    for method, extra in runs:
        kw = dict(max_new_tokens=12, block_size=8, temperature=temperature, seed=4, eos_id=None, budget=8, **extra)
        monkeypatch.setenv("SPOT_BACKEND", "reference")
        ref = generate(target, PROMPTS, method, **kw)
        before = dict(calls)
        monkeypatch.setenv("SPOT_BACKEND", backend)
        out = generate(target, PROMPTS, method, **kw)
        assert out.tokens == ref.tokens, (method, temperature)
        assert torch.equal(out.orders, ref.orders)
        assert calls.get("score", 0) > before.get("score", 0)
    assert calls.get("verify_tree", 0) > 0 and calls.get("select_children", 0) > 0


def test_spot_backend_cpu_covers_ops_without_a_cpu_kernel(monkeypatch):
    """SPOT_BACKEND=cpu is process wide: ops without a C++ CPU kernel run the reference instead of failing, while an
    explicit per-call backend="cpu" for them still raises."""
    from samples import sample_args

    monkeypatch.setenv("SPOT_BACKEND", "cpu")
    args = sample_args("tree_mask")
    assert torch.equal(spot_kernels.tree_mask(*args), spot_kernels.tree_mask(*args, backend="reference"))
    with pytest.raises(spot_kernels.BackendUnavailable, match="no kernel for spot::tree_mask yet.*backend argument"):
        spot_kernels.tree_mask(*args, backend="cpu")
    with pytest.raises(spot_kernels.BackendUnavailable, match="cpu backend needs CPU tensors.*SPOT_BACKEND"):
        backends.resolve("tree_mask", torch.device("meta"))
