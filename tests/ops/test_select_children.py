"""spot::select_children: drafted children of frontier nodes (docs/ops.md, "Drafter child selection").

The contract against brute force on the reference (the oracle), then every other backend against the reference."""

import math

import pytest
import torch
from torch.library import opcheck

import spot_kernels

import brute
from helpers import CPP_KERNELS, I64, assert_probs_close, children_inputs, gpu_only


def brute_children(pos_logits, masked, path_logprob, probs, ids, seed, rows, block_start, steps, temperature, k):
    """Per frontier node, by sorting Python lists: [(pos, logprob, token)] * k."""
    out = []
    for f in range(len(pos_logits)):
        logit = [-math.inf if math.isnan(v) else v for v in pos_logits[f]]
        elig = [j for j in range(len(logit)) if masked[f][j] and logit[j] > -math.inf]
        elig.sort(key=lambda j: (-logit[j], j))
        lse = math.log(sum(math.exp(logit[j] - max(logit[e] for e in elig)) for j in elig)) + max(
            logit[e] for e in elig) if elig else -math.inf
        children = []
        for p in elig[:k]:
            if temperature == 0:
                tok = ids[f][p][0] if ids[f][p] else -1
            else:
                cands = [(math.log(probs[f][p][i]) + brute.gumbel(seed, rows[f], block_start[f] + p, steps[f],
                                                                   ids[f][p][i]), i)
                         for i in range(len(ids[f][p])) if ids[f][p][i] >= 0 and probs[f][p][i] > 0]
                tok = -1
                if cands:
                    best = max(v for v, _ in cands)
                    tok = ids[f][p][min(i for v, i in cands if v == best)]
            children.append((p, path_logprob[f] + logit[p] - lse, tok))
        children += [(-1, -math.inf, -1)] * (k - len(children))
        out.append(children)
    return out


def call(pos_logits, masked, path_logprob, probs, ids, seed, rows, block_start, steps, temperature, k):
    return spot_kernels.select_children(pos_logits, masked, path_logprob, probs, ids, seed, rows, block_start, steps,
                                        temperature, k)


def check(args):
    out = call(*args)
    plain = [a.tolist() if isinstance(a, torch.Tensor) else a for a in args]
    want = brute_children(*plain)
    for f, children in enumerate(want):
        assert out.child_pos[f].tolist() == [c[0] for c in children], f
        assert out.child_tokens[f].tolist() == [c[2] for c in children], f
        rel = 1e-9 if out.child_logprob.dtype == torch.float64 else 1e-5
        assert out.child_logprob[f].tolist() == pytest.approx([c[1] for c in children], rel=rel, abs=rel * 1e-3)
    return out


def random_args(seed, frontier=4, block=7, top=5, vocab=30, k=3, temperature=0.8, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    pos_logits = torch.randn(frontier, block, generator=g, dtype=dtype)
    masked = torch.rand(frontier, block, generator=g) < 0.7
    path = -torch.rand(frontier, generator=g, dtype=dtype)
    probs = torch.softmax(torch.randn(frontier, block, top, generator=g, dtype=torch.float64), -1)
    probs = probs.sort(-1, descending=True).values
    ids = torch.stack([torch.randperm(vocab, generator=g)[:top] for _ in range(frontier * block)]).view(frontier,
                                                                                                        block, top)
    rows = torch.randint(0, 3, (frontier,), generator=g)
    block_start = torch.randint(0, 5, (frontier,), generator=g) * block
    steps = torch.randint(0, block, (frontier,), generator=g)
    return [pos_logits, masked, path, probs, ids, 99, rows, block_start, steps, temperature, k]


@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("k", [1, 3, 9])
def test_random_against_brute_force(temperature, k):
    for s in range(3):
        args = random_args(s * 10 + k, temperature=temperature, k=k)
        args[3][0, 1, 2] = 0.0  # probability-0 and padded stale entries are never drawn
        args[4][1, 2, 3] = -1
        check(args)


def test_ties_nan_inf_and_unmasked():
    pos_logits = torch.tensor([[1.0, 2.0, 2.0, math.nan, -math.inf, 2.0, 5.0]], dtype=torch.float64)
    masked = torch.tensor([[True, True, True, True, True, True, False]])
    args = random_args(1, frontier=1, block=7, k=5)
    args[0], args[1] = pos_logits, masked
    out = check(args)
    assert out.child_pos.tolist() == [[1, 2, 5, 0, -1]]  # ties: lowest position; NaN/-inf/unmasked not eligible
    assert out.child_logprob[0, 4].item() == -math.inf and out.child_tokens[0, 4].item() == -1
    total = torch.logsumexp(out.child_logprob[0, :4] - args[2][0], 0)
    assert total.item() == pytest.approx(0.0, abs=1e-12)  # the eligible positions carry all the mass


def test_nothing_eligible():
    args = random_args(2, frontier=2, block=4, k=3)
    args[1] = torch.zeros(2, 4, dtype=torch.bool)
    out = check(args)
    assert out.child_pos.tolist() == [[-1] * 3] * 2
    assert (out.child_logprob == -math.inf).all() and (out.child_tokens == -1).all()


def test_positive_infinity_logit_takes_the_mass():
    args = random_args(3, frontier=1, block=4, k=4)
    args[0] = torch.tensor([[0.0, math.inf, 1.0, math.inf]], dtype=torch.float64)
    args[1] = torch.ones(1, 4, dtype=torch.bool)
    out = call(*args)
    assert out.child_pos.tolist() == [[1, 3, 2, 0]]
    lp = out.child_logprob[0] - args[2][0]
    assert lp.tolist() == pytest.approx([-math.log(2)] * 2 + [-math.inf] * 2)  # the limit of log_softmax


def test_stale_entries_all_ineligible_and_zero_width():
    args = random_args(4, frontier=2, block=3, top=4, k=3)
    args[1] = torch.ones(2, 3, dtype=torch.bool)
    args[3][0] = 0.0  # node 0: every stale probability is 0
    args[4][1] = -1  # node 1: every stale id is padding
    out = check(args)
    assert (out.child_tokens == -1).all() and (out.child_pos >= 0).all()
    zero_k = random_args(5, frontier=2, block=3, top=1, k=2)
    zero_k[3], zero_k[4] = zero_k[3][..., :0], zero_k[4][..., :0]
    assert (call(*zero_k).child_tokens == -1).all()


def test_greedy_token_is_the_stale_top1():
    args = random_args(6, temperature=0.0, k=7)
    out = check(args)
    ok = out.child_pos >= 0
    top1 = args[4][torch.arange(4)[:, None].expand(4, 7), out.child_pos.clamp(min=0), 0]
    assert torch.equal(out.child_tokens[ok], top1[ok])


def test_full_vocabulary_child_token_equals_the_target_token():
    """With the whole vocabulary as the stale top-K and unchanged logits, the drafted token is the token standard
    decoding samples at that step (coupled noise): the property that makes tree verification exact."""
    vocab, block, frontier = 17, 5, 3
    logits = torch.randn(frontier, block, vocab, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    rows, block_start, steps = torch.tensor([0, 1, 2]), torch.tensor([10, 20, 30]), torch.tensor([0, 2, 4])
    masked = torch.ones(frontier, block, dtype=torch.bool)
    for temperature in (0.0, 0.7, 1.3):
        target = spot_kernels.score(logits, masked, 5, rows, block_start, steps, temperature, top_k=vocab)
        out = spot_kernels.select_children(torch.zeros(frontier, block, dtype=torch.float64), masked,
                                           torch.zeros(frontier, dtype=torch.float64), target.topk_probs,
                                           target.topk_ids, 5, rows, block_start, steps, temperature, block)
        assert torch.equal(out.child_tokens, target.tokens.gather(1, out.child_pos))


def test_expanded_views_and_float32():
    args = random_args(8, dtype=torch.float32)
    args[3] = args[3][:, :1].expand(4, 7, 5).float()  # stale features shared by every position
    args[4] = args[4][:, :1].expand(4, 7, 5)
    out = check(args)
    assert out.child_logprob.dtype == torch.float32


def test_opcheck():
    args = random_args(9, k=4)
    opcheck(torch.ops.spot.select_children.default, tuple(args), {"backend": "reference"})
    args = random_args(10, k=9, temperature=0.0, dtype=torch.float32)
    opcheck(torch.ops.spot.select_children.default, tuple(args))


@pytest.mark.parametrize(
    "index,value,error,match",
    [
        (0, torch.zeros(4, 7, dtype=torch.float16), TypeError, "position_logits"),
        (0, torch.zeros(28, dtype=torch.float64), ValueError, "position_logits.*2 dimensions"),
        (1, torch.ones(4, 7), TypeError, "masked.*bool"),
        (1, torch.ones(4, 6, dtype=torch.bool), ValueError, "masked.*shape"),
        (2, torch.zeros(4, dtype=torch.float32), TypeError, "path_logprob.*float64"),
        (2, torch.zeros(5, dtype=torch.float64), ValueError, "path_logprob.*shape"),
        (3, torch.zeros(4, 6, 5, dtype=torch.float64), ValueError, "stale_topk_probs.*shape"),
        (3, torch.zeros(4, 7, 5, dtype=I64), TypeError, "stale_topk_probs"),
        (4, torch.zeros(4, 7, 4, dtype=I64), ValueError, "stale_topk_ids.*shape"),
        (4, torch.full((4, 7, 5), -2, dtype=I64), ValueError, "stale_topk_ids.*>= -1"),
        (5, -1, ValueError, "seed"),
        (6, torch.zeros(4, dtype=torch.int32), TypeError, "rows"),
        (7, torch.full((4,), -1, dtype=I64), ValueError, "block_start"),
        (8, torch.full((4,), -1, dtype=I64), ValueError, "steps"),
        (8, torch.zeros(3, dtype=I64), ValueError, "steps.*shape"),
        (9, -1.0, ValueError, "temperature"),
        (10, 0, ValueError, "k must lie"),
        (10, -3, ValueError, "k must lie"),
        (6, torch.zeros(4, dtype=I64, device="meta"), ValueError, "on one device"),
        (1, [[True]], TypeError, "masked.*Tensor"),
    ],
)
def test_bad_input(index, value, error, match):
    args = random_args(11)
    args[index] = value
    with pytest.raises(error, match=match):
        call(*args)


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        spot_kernels.select_children(*random_args(12), backend="tpu")


# ------------------------------------------------------------------------------- backends against the reference

@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_select_children_matches_reference(backend, dtype, temperature):
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
        args = backend.to(logits, masked, path, *stale, 5, rows, block_start, steps, temperature, k)
        a, r = backend.both("select_children", *args)
        assert torch.equal(a[0], r[0]) and torch.equal(a[2], r[2])
        assert a[1].dtype == r[1].dtype
        torch.testing.assert_close(a[1], r[1])
    empty = backend.to(logits[:0], masked[:0], path[:0], probs[:0], ids[:0], 5, rows[:0], block_start[:0],
                      steps[:0], temperature, 2)
    a, r = backend.both("select_children", *empty)
    assert all(x.shape == (0, 2) for x in a)


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
@pytest.mark.parametrize("pdt,qdt", [(torch.float32, torch.float32), (torch.float64, torch.float64),
                                     (torch.float32, torch.float64), (torch.float64, torch.float32)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("frontier,block,top,k", [(5, 16, 32, 4), (3, 32, 8, 40), (2, 40, 0, 3), (0, 8, 4, 2),
                                                  (7, 70, 5, 6)])
def test_select_children_parity(backend, frontier, block, top, k, pdt, qdt, temperature):
    for expand in (False, True):
        args = children_inputs(frontier, block, top, k, pdt, qdt, temperature, seed=block, expand=expand,
                               device=backend.device)
        got, want = backend.run("select_children", *args), backend.ref("select_children", *args)
        assert torch.equal(got[0], want[0]) and torch.equal(got[2], want[2])
        assert got[1].dtype == want[1].dtype
        if backend.name == "cpu":
            assert_probs_close(got[1], want[1], pdt)
        else:
            tol = 2e-6 if pdt == torch.float32 else 1e-12
            torch.testing.assert_close(got[1], want[1], rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
def test_select_children_infinite_logits(backend):
    logits = torch.tensor([[math.inf, 0.0, math.inf, 1.0], [-math.inf, -math.inf, math.nan, -math.inf]])
    z = torch.zeros(2, dtype=I64)
    args = backend.to(logits, torch.ones(2, 4, dtype=torch.bool), torch.zeros(2), torch.full((2, 4, 2), 0.5),
                      torch.ones(2, 4, 2, dtype=I64), 0, z, z, z, 1.0, 5)
    got, want = backend.run("select_children", *args), backend.ref("select_children", *args)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@gpu_only
@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_select_children_at_scale(backend):
    for temperature in (0.0, 1.0):
        args = children_inputs(2048, 32, 32, 4, temperature=temperature, vocab=151936, device=backend.device)
        a, r = backend.both("select_children", *args)
        assert torch.equal(a[0], r[0]) and torch.equal(a[2], r[2])
        torch.testing.assert_close(a[1], r[1])


# ---------------------------------------------------------------------- the cpu backend (csrc/cpu/) in particular

def _cpu_children_args(seed, frontier, block, top, pdt, qdt):
    """helpers.children_inputs without temperature and k, plus two +inf logits and a row with nothing eligible."""
    logits, *rest = children_inputs(frontier, block, top, 1, pdt, qdt, seed=seed, vocab=1000)[:-2]
    if frontier >= 4 and block >= 6:
        logits[2, 4] = math.inf
        logits[2, 5] = math.inf
        logits[3] = -math.inf  # nothing eligible
    return (logits, *rest)


def check_children(backend, args, temperature, k):
    """The backend against the reference: positions and tokens equal, log-probabilities within helpers.PROB_TOL."""
    out, ref = backend.both("select_children", *args, temperature, k)
    out, ref = spot_kernels.ChildSelection(*out), spot_kernels.ChildSelection(*ref)
    assert torch.equal(out.child_pos, ref.child_pos)
    assert torch.equal(out.child_tokens, ref.child_tokens)
    assert_probs_close(out.child_logprob, ref.child_logprob, args[0].dtype)
    for a, r in zip(out, ref):
        assert a.dtype == r.dtype and a.shape == r.shape and a.is_contiguous()
    return out


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float64, torch.float64),
                                    (torch.float32, torch.float64), (torch.float64, torch.float32)], ids=str)
def test_select_children_random(backend, dtypes, temperature):
    seed = int(temperature * 10) + 7 * dtypes[0].itemsize + dtypes[1].itemsize
    for frontier, block, top in [(6, 10, 5), (3, 32, 32), (5, 7, 1)]:
        args = _cpu_children_args(seed + block, frontier, block, top, *dtypes)
        for k in (1, 3, block, block + 4):
            check_children(backend, args, temperature, k)


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_select_children_edge_shapes(backend):
    for frontier, block, top in [(0, 4, 3), (4, 6, 0), (2, 1, 2)]:
        args = _cpu_children_args(12, frontier, block, top, torch.float32, torch.float32)
        for temperature in (0.0, 1.0):
            check_children(backend, args, temperature, 3)
    # expanded stale features (a broadcast view, as the decoder passes) and a non-contiguous logits view
    logits, masked, path, probs, ids, seed, rows, block_start, steps = _cpu_children_args(
        13, 4, 8, 4, torch.float64, torch.float64)
    args = (logits.t().contiguous().t(), masked, path, probs[:1].expand(4, 8, 4), ids[:1].expand(4, 8, 4), seed,
            rows, block_start, steps)
    for temperature in (0.0, 0.5):
        check_children(backend, args, temperature, 5)
