"""Property-based fuzzing (hypothesis) of the ops: every op's kernels against the reference on random shapes, dtypes,
strides, NaN / inf rows and ties (`generate` and the command line: tests/runtime/test_fuzz_*.py).

Each op family has one test per group of backends: the C++ kernels ("cpu" where the op has one, the CUDA kernels,
emulated on CPU or on the GPU) and Triton (in its interpreter without a GPU: slow, so fewer and smaller examples).
The comparisons are the family tests' own: integer outputs equal, probabilities within the tolerances the family
file holds that backend to (tests/helpers.py PROB_TOL for "cpu"). Examples are derandomized, so every run (and CI)
draws the same cases (tests/fuzzing.py); the budgets below keep the file near half a minute on two cores (pytest
--hypothesis-show-statistics prints each test's example count).

One comparison is stated more precisely than "equal": score's commit position may differ from the reference's
only at a rounding-level tie (_rounding_ties)."""

import math
import random

import pytest
import torch

from spot_kernels import CONFIDENCE_KINDS

from fuzzing import fuzz, given, st
from helpers import CPP_KERNELS, I64, ON_GPU_DEVICE, PROB_TOL, assert_probs_close, assert_score_equal, children_inputs

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TEMPERATURES = (0.0, 0.05, 0.7, 1.0)  # greedy, small, below and at 1
CPP_ONLY = list(CPP_KERNELS)  # "cuda-emulation", "cuda", "cpu": a backend that cannot run here is skipped
NO_CPU = [b for b in CPP_KERNELS if b != "cpu"]  # the tree_attention family has no "cpu" kernel
# Triton's interpreter stores bfloat16 as its uint16 bit pattern and its tl.dot multiplies those patterns (values
# near 1e9; triton-lang/triton#11584, "we just don't support it yet"), so tree_attention in bfloat16 is fuzzed on
# the GPU only (tests/ops/test_tree_attention.py likewise runs Triton's bfloat16 attention on a GPU alone).
INTERPRETER_FLOATS = (torch.float16, torch.float32, torch.float64)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _layout(x, how, dim_a, dim_b):
    """The same values as x in another memory layout: "contiguous", "transposed" (dims a, b swapped in memory) or
    "strided" (every other element of a twice-as-wide last dimension)."""
    if how == "transposed" and x.dim() >= 2:
        out = x.transpose(dim_a, dim_b).contiguous().transpose(dim_a, dim_b)
    elif how == "strided":
        out = torch.stack([x, torch.zeros_like(x)], -1)[..., 0]
    else:
        return x
    assert torch.equal(out, x) or (x.is_floating_point() and torch.equal(out.isnan(), x.isnan()))
    return out


LAYOUTS = st.sampled_from(["contiguous", "transposed", "strided"])


def sizes(low, high):
    """An integer in [low, high], but 0 (an empty dimension) about one time in eight."""
    return st.integers(0, 7).flatmap(lambda r: st.just(0) if r == 0 else st.integers(low, high))


# --------------------------------------------------------------------------------------------------------- noise

@st.composite
def noise_case(draw, max_dim=5):
    """seed and four broadcastable int64 tensors of any values (only the low 32 bits count), some strided."""
    ndim = draw(st.integers(0, 3))
    shape = [draw(sizes(1, max_dim)) for _ in range(ndim)]
    g = _gen(draw(st.integers(0, 2**31)))
    tensors = []
    for _ in range(4):
        keep = draw(st.integers(0, ndim))  # trailing dims this tensor has, each full or 1
        own = [s if draw(st.booleans()) else 1 for s in shape[ndim - keep:]]
        span = draw(st.sampled_from([2**8, 2**32, 2**62]))
        t = torch.randint(-span, span, own, generator=g, dtype=I64)
        tensors.append(_layout(t, draw(LAYOUTS), 0, -1))
    seed = draw(st.sampled_from([0, 1, 2**32 - 1, 2**32, 2**63 - 1]) | st.integers(0, 2**63 - 1))
    return seed, tensors


def _check_noise(backend, case):
    seed, tensors = case
    got, want = backend.both("noise_uniform", seed, *backend.to(*tensors))
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.equal(got.cpu(), want.cpu())


@pytest.mark.parametrize("backend", CPP_ONLY, indirect=True)
@fuzz(100)
@given(case=noise_case())
def test_fuzz_noise_uniform(backend, case):
    _check_noise(backend, case)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@fuzz(20)
@given(case=noise_case(max_dim=3))
def test_fuzz_noise_uniform_triton(backend, case):
    _check_noise(backend, case)


# --------------------------------------------------------------------------------------------------------- score

@st.composite
def score_case(draw, max_vocab=1100, max_rows=6):
    """Every argument of score: leading dims (empty ones too), B >= 0, V >= 1 not a multiple of any tile, every
    logits dtype, a layout, invalid rows (NaN, +inf, all -inf), partial -inf, deliberate ties, all confidence kinds."""
    lead = [draw(sizes(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    while math.prod(lead) > max_rows:
        lead[lead.index(max(lead))] -= 1
    block = draw(sizes(1, 6))
    vocab = draw(st.integers(0, 3).flatmap(lambda r: st.integers(1, 3) if r == 0 else st.integers(1, max_vocab)))
    dtype = draw(st.sampled_from(FLOATS))
    temperature = draw(st.sampled_from(TEMPERATURES))
    kind = draw(st.sampled_from(CONFIDENCE_KINDS))
    top_k = draw(st.integers(1, vocab + 3))
    scale = draw(st.sampled_from([0.5, 3.0, 30.0]))
    g = _gen(draw(st.integers(0, 2**31)))
    logits = torch.randn(*lead, block, vocab, generator=g, dtype=torch.float64) * scale
    rows_flat = logits.view(-1, vocab)
    if draw(st.booleans()):
        rows_flat.round_()  # many exact ties
    # per (node, position) row: 0 ordinary, 1 NaN entry, 2 +inf entry, 3 all -inf, 4 partial -inf, 5 constant (tie)
    special_p = draw(st.sampled_from([0.0, 0.3, 0.8]))
    for r in range(rows_flat.shape[0]):
        if torch.rand((), generator=g).item() >= special_p:
            continue
        which = int(torch.randint(1, 6, (), generator=g))
        v = int(torch.randint(0, vocab, (), generator=g))
        if which == 1:
            rows_flat[r, v] = math.nan
        elif which == 2:
            rows_flat[r, v] = math.inf
        elif which == 3:
            rows_flat[r] = -math.inf
        elif which == 4:
            rows_flat[r, torch.rand(vocab, generator=g) < 0.5] = -math.inf
        else:
            rows_flat[r] = rows_flat[r, v]
    if block >= 2 and draw(st.booleans()):
        logits[..., 1, :] = logits[..., 0, :]  # identical positions: equal confidences, the lowest position commits
    logits = _layout(logits.to(dtype), draw(LAYOUTS), -1, -2)
    masked = torch.rand(*lead, block, generator=g) < draw(st.sampled_from([0.0, 0.5, 1.0]))
    rows = torch.randint(0, 2**40, lead, generator=g) if lead else torch.randint(0, 2**40, (), generator=g)
    if lead and math.prod(lead) and draw(st.booleans()):
        rows = rows.flatten()[:1].reshape([1] * len(lead)).expand(lead)  # one row id, a stride-0 view
    block_start = torch.randint(0, 4096, lead, generator=g)
    steps = torch.randint(0, block + 1, lead, generator=g)
    seed = draw(st.integers(0, 2**63 - 1))
    return logits, masked, seed, rows, block_start, steps, temperature, kind, top_k


def _rounding_ties(got, want, confidence, masked, tol):
    """got's commit positions, except where they differ from want's at a rounding-level tie: two eligible positions
    whose reference confidences agree within tol (rtol, atol), as rows that are permutations of each other give
    (their softmax sums the same terms in another order). There want's position is taken; elsewhere got's stands."""
    commit = got.clone()
    for node in (got != want).nonzero().tolist():
        g, w = got[tuple(node)].item(), want[tuple(node)].item()
        if g < 0 or w < 0 or not masked[(*node, g)]:
            continue
        cg, cw = confidence[(*node, g)], confidence[(*node, w)]
        if torch.isclose(cg, cw, rtol=tol[0], atol=tol[1]):
            commit[tuple(node)] = w
    return commit


def _check_score(backend, args):
    """The family file's comparison (tests/ops/test_score.py): tokens and top-K ids equal, commit positions equal but
    at rounding-level ties (_rounding_ties); for "cpu" probabilities within helpers.PROB_TOL (neg_entropy's atol
    scaled by log(V) + 1), for the CUDA kernels to (2e-5, 2e-6) / (1e-12, 1e-14), Triton's to atol 1e-7."""
    args = backend.to(*args)
    got, want = backend.run("score", *args), backend.ref("score", *args)
    kind, vocab, masked = args[7], args[0].shape[-1], args[1]
    cdtype = want[1].dtype
    if backend.name == "cpu":
        scale = math.log(vocab) + 1 if kind == "neg_entropy" else 1.0
        tol = (PROB_TOL[cdtype][0], PROB_TOL[cdtype][1] * scale)
        options = dict(cpu_scale=scale)
    else:
        tol = (1e-12, 1e-14) if cdtype == torch.float64 else (2e-5, 2e-6)
        options = dict(probs_atol=1e-7) if backend.name == "triton" else {}
    got = (*got[:4], _rounding_ties(got[4].cpu(), want[4].cpu(), want[1].cpu(), masked.cpu(), tol).to(got[4].device))
    assert_score_equal(got, want, **options)


@pytest.mark.parametrize("backend", CPP_ONLY + ["triton"], indirect=True)
def test_score_rounding_level_tie(backend):
    """The case fuzzing found: positions 0 and 2 hold rows that are shifts and permutations of each other, so their
    probabilities are mathematically equal (e^5 / (1 + e^5 + e^2) both) and only rounding picks the commit; the CUDA
    kernels (emulated) committed position 2 where the reference commits 0."""
    logits = torch.tensor([[[0.0, 5.0, 2.0], [0.0, 5.0, 2.0], [3.0, 0.0, -2.0]]], dtype=torch.float64)
    z = torch.zeros(1, dtype=I64)
    for dtype in (torch.float64, torch.float32):
        for temperature in (0.0, 1.0):
            _check_score(backend, (logits.to(dtype), torch.ones(1, 3, dtype=torch.bool), 0, z, z, z, temperature,
                                   "prob", 1))


@pytest.mark.parametrize("backend", CPP_ONLY, indirect=True)
@fuzz(150)
@given(args=score_case())
def test_fuzz_score(backend, args):
    _check_score(backend, args)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@fuzz(30)
@given(args=score_case(max_vocab=40, max_rows=2))
def test_fuzz_score_triton(backend, args, monkeypatch):
    monkeypatch.setenv("SPOT_TRITON_SCORE_BLOCK", "16")  # several vocabulary tiles even at small V
    _check_score(backend, args)


# ------------------------------------------------------------------------------------------------ select_children

@st.composite
def children_case(draw, max_frontier=6, max_block=12):
    """helpers.children_inputs (NaN / -inf / tied logits, zero-probability and -1 stale entries, expanded views) at
    random sizes and dtypes, plus +inf logits, rows with nothing eligible and a transposed logits layout."""
    frontier = draw(sizes(1, max_frontier))
    block = draw(st.integers(1, max_block))
    top = draw(sizes(1, 6))
    k = draw(st.integers(1, block + 3))
    pdt, qdt = draw(st.sampled_from([torch.float32, torch.float64])), draw(st.sampled_from([torch.float32,
                                                                                              torch.float64]))
    temperature = draw(st.sampled_from(TEMPERATURES))
    seed = draw(st.integers(0, 2**31))
    args = list(children_inputs(frontier, block, top, k, pdt, qdt, temperature, seed=seed,
                                expand=draw(st.booleans()), vocab=draw(st.sampled_from([3, 50, 32000]))))
    logits, masked = args[0], args[1]
    g = _gen(seed + 1)
    if frontier and draw(st.booleans()):
        f = int(torch.randint(0, frontier, (), generator=g))
        logits[f, torch.rand(block, generator=g) < 0.4] = math.inf  # +inf positions share the mass
    if frontier and draw(st.booleans()):
        f = int(torch.randint(0, frontier, (), generator=g))
        logits[f] = -math.inf if draw(st.booleans()) else logits[f]
        masked[f] = masked[f] & draw(st.booleans())  # maybe nothing eligible at all
    if draw(st.booleans()):
        logits = logits.round()  # ties everywhere
    args[0] = _layout(logits, draw(LAYOUTS), 0, 1)
    args[1] = _layout(masked, draw(LAYOUTS), 0, 1)
    return tuple(args)


def _check_children(backend, args):
    """tests/ops/test_select_children.py's comparison: positions and tokens equal, log-probabilities within
    helpers.PROB_TOL for "cpu", 2e-6 (float32) / 1e-12 (float64) for the CUDA kernels, assert_close for Triton."""
    args = backend.to(*args)
    got, want = backend.run("select_children", *args), backend.ref("select_children", *args)
    assert torch.equal(got[0], want[0]) and torch.equal(got[2], want[2])
    assert got[1].dtype == want[1].dtype and got[1].shape == want[1].shape
    pdt = args[0].dtype
    if backend.name == "cpu":
        assert_probs_close(got[1], want[1], pdt)
    elif backend.name == "triton":
        torch.testing.assert_close(got[1], want[1])
    else:
        tol = 2e-6 if pdt == torch.float32 else 1e-12
        torch.testing.assert_close(got[1], want[1], rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", CPP_ONLY, indirect=True)
@fuzz(100)
@given(args=children_case())
def test_fuzz_select_children(backend, args):
    _check_children(backend, args)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@fuzz(25)
@given(args=children_case(max_frontier=3, max_block=6))
def test_fuzz_select_children_triton(backend, args):
    _check_children(backend, args)


# ---------------------------------------------------------------------------------------------------- verify_tree

def valid_tree(rng, n, block, hit, p_inactive, vocab):
    """One row of verify_tree's trees in which no root-to-node path commits a position twice: a node's draft is a
    position its parent's state has not committed, its target commit one its own state has not (or -1). Drafts equal
    the parent's target commit with probability `hit`, so deep chains get accepted."""
    parents, draft_pos, draft_tok, target_pos, target_tok, used = [-1], [0], [0], [], [], [frozenset()]

    def target_commit(free):
        if not free or rng.random() < 0.1:
            return -1, rng.choice([-1, rng.randrange(vocab)])
        return rng.choice(sorted(free)), rng.randrange(vocab)

    pos, tok = target_commit(set(range(block)))
    target_pos.append(pos)
    target_tok.append(tok)
    for i in range(1, n):
        open_parents = [p for p in range(i) if len(used[p]) < block]
        par = rng.choice(open_parents) if open_parents else 0
        free = set(range(block)) - used[par]
        if not free:  # every position committed on the path: this node can only be padding
            parents.append(-1)
            draft_pos.append(rng.randrange(block))
            draft_tok.append(rng.randrange(vocab))
            used.append(used[par])
            target_pos.append(-1)
            target_tok.append(-1)
            continue
        if target_pos[par] >= 0 and rng.random() < hit:
            dp, dt = target_pos[par], target_tok[par]
        else:
            dp, dt = rng.choice(sorted(free)), rng.randrange(vocab)
        parents.append(-1 if rng.random() < p_inactive else par)
        draft_pos.append(dp)
        draft_tok.append(dt)
        used.append(used[par] | {dp})
        pos, tok = target_commit(set(range(block)) - used[-1])
        target_pos.append(pos)
        target_tok.append(tok)
    return parents, draft_pos, draft_tok, target_pos, target_tok


@st.composite
def tree_case(draw, max_batch=5, max_nodes=40):
    batch = draw(sizes(1, max_batch))
    nodes = draw(st.integers(1, max_nodes))
    block = draw(st.integers(1, 12))
    hit = draw(st.sampled_from([0.0, 0.6, 0.95, 1.0]))
    p_inactive = draw(st.sampled_from([0.0, 0.1, 0.4]))
    vocab = draw(st.sampled_from([1, 3, 50]))
    rng = random.Random(draw(st.integers(0, 2**31)))
    trees = [valid_tree(rng, nodes, block, hit, p_inactive, vocab) for _ in range(batch)]
    args = [torch.tensor([t[i] for t in trees], dtype=I64).reshape(batch, nodes) for i in range(5)]
    state = torch.tensor([[rng.randrange(-1, vocab) for _ in range(block)] for _ in range(batch)],
                         dtype=I64).reshape(batch, block)
    layout = draw(LAYOUTS)
    return tuple(_layout(a, layout, 0, 1) for a in args + [state])


def _check_verify(backend, args):
    args = backend.to(*args)
    got, want = backend.run("verify_tree", *args), backend.ref("verify_tree", *args)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.is_contiguous()
        assert torch.equal(a.cpu(), b.cpu())


@pytest.mark.parametrize("backend", CPP_ONLY, indirect=True)
@fuzz(100)
@given(args=tree_case())
def test_fuzz_verify_tree(backend, args):
    _check_verify(backend, args)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@fuzz(25)
@given(args=tree_case(max_batch=2, max_nodes=12))
def test_fuzz_verify_tree_triton(backend, args):
    _check_verify(backend, args)


# --------------------------------------------------------------------------- tree masks, positions and attention

@st.composite
def mask_case(draw):
    prefix_len = draw(st.integers(0, 40))
    num_new = draw(st.integers(0, prefix_len))
    num_nodes = draw(sizes(1, 4))
    block_size = draw(st.integers(1, 6))
    key_start = torch.tensor([draw(st.integers(0, prefix_len)) for _ in range(draw(sizes(1, 3)))], dtype=I64)
    key_start = _layout(key_start, draw(LAYOUTS), 0, 0)
    return key_start, prefix_len, num_new, num_nodes, block_size


def _check_masks(backend, case, dtype):
    key_start, *sizes = case
    (key_start,) = backend.to(key_start)
    for op in ("tree_mask", "tree_mask_packed", "tree_position_ids"):
        got, want = backend.run(op, key_start, *sizes), backend.ref(op, key_start, *sizes)
        assert got.dtype == want.dtype and torch.equal(got, want), op
    got = backend.run("tree_mask_additive", key_start, *sizes, dtype)
    want = backend.ref("tree_mask_additive", key_start, *sizes, dtype)
    assert got.dtype == dtype and torch.equal(got, want)


@pytest.mark.parametrize("backend", NO_CPU, indirect=True)
@fuzz(60)
@given(case=mask_case(), dtype=st.sampled_from(FLOATS))
def test_fuzz_tree_masks(backend, case, dtype):
    _check_masks(backend, case, dtype)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@fuzz(20)
@given(case=mask_case(), dtype=st.sampled_from(FLOATS))
def test_fuzz_tree_masks_triton(backend, case, dtype):
    _check_masks(backend, case, dtype)


@st.composite
def attention_case(draw, max_prefix=24, max_dim=16, dtypes=FLOATS):
    b = draw(sizes(1, 2))
    hkv = draw(st.integers(1, 2))
    hq = hkv * draw(st.integers(1, 2))
    n = draw(sizes(1, 3))
    block = draw(st.integers(1, 4))
    prefix = draw(sizes(1, max_prefix))
    dim = draw(st.integers(1, max_dim))
    dtype = draw(st.sampled_from(dtypes))
    g = _gen(draw(st.integers(0, 2**31)))

    def rnd(*shape):
        return _layout(torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype), draw(LAYOUTS), -1, -2)

    tensors = (rnd(b, hq, n, block, dim), rnd(b, hkv, prefix, dim), rnd(b, hkv, prefix, dim),
               rnd(b, hkv, n, block, dim), rnd(b, hkv, n, block, dim))
    key_start = torch.tensor(draw(st.lists(st.integers(0, prefix), min_size=b, max_size=b)), dtype=I64)
    scale = draw(st.none() | st.sampled_from([0.3, 1.0]))
    return (*tensors, key_start, scale)


def _check_attention(backend, args):
    args = backend.to(*args)
    got, want = backend.run("tree_attention", *args), backend.ref("tree_attention", *args)
    dtype = args[0].dtype
    assert got.dtype == dtype and got.shape == want.shape and got.is_contiguous()
    if backend.name == "triton":  # tests/ops/test_tree_attention.py: float32 1e-5, half 2e-3 (bfloat16 2e-2)
        tol = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-3}.get(dtype, 2e-2)
    else:  # the CUDA kernels' parity test
        tol = {torch.float64: 1e-10, torch.float32: 2e-5}.get(dtype, 2e-2)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", NO_CPU, indirect=True)
@fuzz(60)
@given(args=attention_case())
def test_fuzz_tree_attention(backend, args):
    _check_attention(backend, args)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@fuzz(25)
@given(args=attention_case(max_prefix=12, max_dim=8, dtypes=FLOATS if ON_GPU_DEVICE else INTERPRETER_FLOATS))
def test_fuzz_tree_attention_triton(backend, args):
    _check_attention(backend, args)
