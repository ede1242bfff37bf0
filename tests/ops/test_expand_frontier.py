"""spot::expand_frontier: one static tree depth (docs/ops.md, "Frontier expansion").

The reference (the oracle) against select_children and the glue redone with Python lists, then every other backend
against the reference, the errors, and opcheck."""

import math

import pytest
import torch
from torch.library import opcheck

import spot_kernels

from helpers import CPP_KERNELS, CUDA_KERNELS, I64, KERNEL_BACKENDS

MASK = 99


def make_args(seed, b=3, w=2, block=8, top=4, dtype=torch.float64, temperature=1.0, branch=3, width=4):
    """Every argument, with -inf and tied logits, a -inf frontier node, a node without masked positions and
    padded / zero stale entries."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, w, block, generator=g, dtype=dtype)
    if block > 3:
        logits[0, 0, 2] = logits[0, 0, 3]  # a tie: the lower position first
    logits[0, -1, min(1, block - 1)] = -math.inf
    states = torch.randint(0, 3, (b, w, block), generator=g)
    states[states == 2] = MASK
    states[-1, -1] = 5  # no masked position: no child
    path = torch.randn(b, w, generator=g, dtype=dtype)
    path[min(1, b - 1), -1] = -math.inf  # a frontier slot without a node
    probs = torch.softmax(torch.randn(b, block, top, generator=g, dtype=dtype), -1)
    probs[..., -1:] = 0  # probability 0: never a token
    ids = torch.randint(-1, 50, (b, block, top), generator=g)
    ids[0, :, :] = -1  # row 0: no stale token anywhere, so no child has a token
    rows, block_start, steps = torch.arange(b) + 2, torch.full((b,), 16), torch.arange(b) + 1
    # the frontier flat, [b * w, ...] row by row, as the op takes it
    return [logits.view(b * w, block), states.view(b * w, block), path.view(b * w), probs, ids, 7, rows, block_start,
            steps, temperature, MASK, branch, width]


def lists_oracle(args):
    """select_children on each node, then the children's states and the next frontier with Python lists."""
    logits, states, path, probs, ids, seed, rows, block_start, steps, temperature, mask_id, branch, width = args
    b, block = len(rows), states.shape[1]
    w = len(states) // b
    logits, states, path = logits.view(b, w, block), states.view(b, w, block), path.view(b, w)
    pos, lp, tok = [], [], []
    for r in range(b):
        sel = spot_kernels.select_children(
            logits[r], states[r] == mask_id, path[r], probs[r:r + 1].expand(w, -1, -1),
            ids[r:r + 1].expand(w, -1, -1), seed, rows[r].expand(w), block_start[r].expand(w), steps[r].expand(w),
            temperature, branch, backend="reference")
        pos.append(sel.child_pos.flatten().tolist())
        tok.append(sel.child_tokens.flatten().tolist())
        lp.append([v if t >= 0 else -math.inf for v, t in zip(sel.child_logprob.flatten().tolist(), tok[-1])])
    child_states = []
    for r in range(b):
        row = []
        for c in range(w * branch):
            s = states[r, c // branch].tolist()
            if pos[r][c] >= 0:
                s[pos[r][c]] = max(tok[r][c], 0)
            row.append(s)
        child_states.append(row)
    frontier = [sorted(range(w * branch), key=lambda c: (-lp[r][c], c))[:width] for r in range(b)]
    return pos, lp, tok, child_states, frontier


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("branch,width", [(3, 4), (9, 2), (1, 1), (2, 50)])  # branch 9 > B's masked positions
def test_reference_against_lists(temperature, dtype, branch, width):
    args = make_args(int(temperature * 10) + branch, dtype=dtype, temperature=temperature, branch=branch,
                     width=width)
    out = spot_kernels.expand_frontier(*args, backend="reference")
    pos, lp, tok, child_states, frontier = lists_oracle(args)
    assert out.child_pos.tolist() == pos and out.child_tokens.tolist() == tok
    assert out.child_logprob.tolist() == lp
    assert out.child_states.tolist() == child_states
    assert out.frontier.tolist() == frontier
    b = len(frontier)
    assert out.frontier_logprob.tolist() == [lp[r][c] for r in range(b) for c in frontier[r]]  # flat
    assert out.frontier_states.tolist() == [child_states[r][c] for r in range(b) for c in frontier[r]]
    assert (out.child_logprob[0] == -math.inf).all()  # row 0 has no stale token: no child at all
    if temperature > 0:
        assert (out.child_tokens[1:] >= 0).any()  # the other rows do have children


def test_ties_go_to_the_lower_index():
    args = make_args(3, b=1, w=2, temperature=0.0, branch=2, width=3)
    args[0] = torch.zeros_like(args[0])  # every logit equal
    args[1][:] = MASK
    args[2] = torch.zeros_like(args[2])  # both frontier nodes equally probable
    args[4] = torch.randint(0, 50, args[4].shape)
    out = spot_kernels.expand_frontier(*args, backend="reference")
    assert out.frontier.tolist() == [[0, 1, 2]]
    assert out.child_pos.tolist() == [[0, 1, 0, 1]]


# ------------------------------------------------------------------------------- backends against the reference

def assert_expansion_matches(got, want, dtype):
    """A backend's outputs against the reference's: integers equal, log-probabilities within select_children's
    tolerance for the logits' dtype."""
    for name, x, y in zip(spot_kernels.Expansion._fields, got, want):
        assert x.dtype == y.dtype and x.shape == y.shape, name
        if x.is_floating_point():
            tol = 2e-6 if dtype == torch.float32 else 1e-12
            torch.testing.assert_close(x, y, rtol=tol, atol=tol, msg=name)
        else:
            assert torch.equal(x, y), name


@pytest.mark.parametrize("backend", KERNEL_BACKENDS, indirect=True)
def test_backend_ties_go_to_the_lower_index(backend):
    args = make_args(3, b=2, w=3, temperature=0.0, branch=2, width=4)
    args[0] = torch.zeros_like(args[0])  # every logit equal
    args[1][:] = MASK
    args[2] = torch.zeros_like(args[2])  # every frontier node equally probable
    args[4] = torch.randint(0, 50, args[4].shape, generator=torch.Generator().manual_seed(0))
    got, want = backend.both("expand_frontier", *backend.to(*args))
    for name, x, y in zip(spot_kernels.Expansion._fields, got, want):
        assert torch.equal(x, y), name
    assert got[4].tolist() == [[0, 1, 2, 3]] * 2 and got[0].tolist() == [[0, 1] * 3] * 2


@pytest.mark.parametrize("backend", KERNEL_BACKENDS, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_backend_matches_reference(backend, dtype, temperature):
    for seed, (b, w, block, top, branch, width) in enumerate(
            [(3, 2, 8, 4, 3, 4), (2, 4, 6, 3, 9, 2), (4, 1, 32, 8, 4, 4), (1, 3, 5, 0, 2, 1)]):
        args = backend.to(*make_args(seed, b, w, block, top, dtype, temperature, branch, width))
        assert_expansion_matches(*backend.both("expand_frontier", *args), dtype)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS, indirect=True)
def test_backend_expanded_stale_and_no_rows(backend):
    args = make_args(5)
    args[3] = args[3][:1].expand_as(args[3])  # expanded views of the stale top-K
    args[4] = args[4][1:2].expand_as(args[4])
    got, want = backend.both("expand_frontier", *backend.to(*args))
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)
    empty = [a[:0] if isinstance(a, torch.Tensor) else a for a in make_args(6)]
    got = backend.run("expand_frontier", *backend.to(*empty))
    assert got[3].shape == (0, 0, 8) and got[4].shape == (0, 0) and got[5].shape == (0, 8)  # no rows: w = 0


def test_opcheck():
    opcheck(torch.ops.spot.expand_frontier.default, tuple(make_args(8)), {"backend": "reference"})
    opcheck(torch.ops.spot.expand_frontier.default, tuple(make_args(9, dtype=torch.float32, temperature=0.0)))


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
@pytest.mark.parametrize("pdt,qdt", [(torch.float32, torch.float32), (torch.float64, torch.float64),
                                     (torch.float32, torch.float64), (torch.float64, torch.float32)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cpp_kernels_at_wider_rows(backend, pdt, qdt, temperature):
    """More frontier nodes per row than the CUDA kernel has warps, more children than threads, B above a warp, mixed
    dtypes of the logits and the stale top-K, and a width above the row's children (W = n)."""
    for seed, (b, w, block, top, branch, width) in enumerate([(2, 9, 40, 6, 20, 50), (3, 5, 33, 3, 7, 100)]):
        args = make_args(20 + seed, b, w, block, top, pdt, temperature, branch, width)
        args[3] = args[3].to(qdt)
        got, want = backend.both("expand_frontier", *backend.to(*args))
        assert_expansion_matches(got, want, pdt)
        assert (got[4] >= 0).all() and got[4].shape == (b, min(width, w * branch))


@pytest.mark.parametrize("backend", CUDA_KERNELS, indirect=True)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_opcheck_of_the_cuda_kernel(backend, temperature):
    backend.opcheck("expand_frontier", *backend.to(*make_args(12, dtype=torch.float32, temperature=temperature)))


@pytest.mark.parametrize(
    "index,value,error,match",
    [
        (0, torch.zeros(6, 8, dtype=torch.float16), TypeError, "position_logits"),
        (0, torch.zeros(3, 2, 8, dtype=torch.float64), ValueError, "position_logits.*2 dimensions"),
        (0, torch.zeros(5, 8, dtype=torch.float64), ValueError, "position_logits.*F = b \\* w"),
        (1, torch.zeros(6, 8, dtype=torch.int32), TypeError, "states"),
        (1, torch.zeros(6, 7, dtype=I64), ValueError, "states.*shape"),
        (2, torch.zeros(6, dtype=torch.float32), TypeError, "path_logprob"),
        (2, torch.zeros(3, dtype=torch.float64), ValueError, "path_logprob.*shape"),
        (3, torch.zeros(3, 7, 4, dtype=torch.float64), ValueError, "stale_topk_probs.*shape"),
        (4, torch.zeros(3, 8, 3, dtype=I64), ValueError, "stale_topk_ids.*shape"),
        (4, torch.full((3, 8, 4), -2, dtype=I64), ValueError, "stale_topk_ids.*>= -1"),
        (5, -1, ValueError, "seed"),
        (6, torch.zeros(4, dtype=I64), ValueError, "F = b \\* w"),
        (7, torch.zeros(2, dtype=I64), ValueError, "block_start.*shape"),
        (8, torch.full((3,), -1, dtype=I64), ValueError, "steps"),
        (9, -1.0, ValueError, "temperature"),
        (10, 1.5, TypeError, "mask_id"),
        (11, 0, ValueError, "branch must lie"),
        (12, 0, ValueError, "width must lie"),
    ],
)
def test_bad_input(index, value, error, match):
    args = make_args(11)
    args[index] = value
    with pytest.raises(error, match=match):
        spot_kernels.expand_frontier(*args)


# ------------------------------------------------------------------------------------------ expand_steps (rule steps)

# The variants of a step's set the op scores (docs/ops.md): (rank swapped out, rank swapped in) relative to the size
# m; (0, 0) is the first m ranks.
STEP_VARIANTS = ((0, 0), (-1, 0), (-1, 1), (-1, 2), (-1, 3), (-1, 4), (-2, 0), (-2, 1))


def make_step_args(seed, b=3, w=2, block=8, top=4, temperature=1.0, branch=6, width=4):
    """make_args' frontier with a size distribution per node: some sizes impossible, an empty step possible."""
    args = make_args(seed, b, w, block, top, torch.float64, temperature, branch, width)
    g = torch.Generator().manual_seed(seed + 1)
    sizes = torch.log_softmax(torch.randn(b * w, block + 1, generator=g, dtype=torch.float64), -1)
    sizes[torch.rand(b * w, block + 1, generator=g) < 0.5] = -math.inf
    sizes[0] = -math.inf
    sizes[0, min(2, block)] = 0.0  # node 0: exactly two positions (one if B = 1)
    return args[:3] + [sizes] + args[3:]


def brute_expand_steps(args):
    """Every frontier node's candidate sets enumerated with Python lists (tokens from select_children, which is
    tested on its own), the best `branch` kept, then the next frontier."""
    logits, states, path, sizes, probs, ids, seed, rows, block_start, steps, temperature, mask_id, branch, width = args
    b, block = len(rows), states.shape[1]
    w = len(states) // b
    big = torch.finfo(logits.dtype).max / 4
    child_lp, child_states = [[] for _ in range(b)], [[] for _ in range(b)]
    for f in range(b * w):
        r = f // w
        lg = [-math.inf if math.isnan(v) else min(v, big) for v in logits[f].tolist()]
        state = states[f].tolist()
        ranked = sorted((j for j in range(block) if state[j] == mask_id and lg[j] > -math.inf),
                        key=lambda j: (-lg[j], j))
        n = len(ranked)
        order = -torch.arange(block, dtype=logits.dtype)[None]  # select_children's child i is position i
        every = torch.ones(1, block, dtype=torch.bool)
        tok = spot_kernels.select_children(order, every, torch.zeros(1, dtype=logits.dtype), probs[r:r + 1],
                                           ids[r:r + 1], seed, rows[r:r + 1], block_start[r:r + 1], steps[r:r + 1],
                                           temperature, block, backend="reference").child_tokens[0].tolist()

        def pl(seq):
            lp, left = 0.0, list(ranked)
            for j in seq:
                lp += lg[j] - math.log(sum(math.exp(lg[k] - lg[left[0]]) for k in left)) - lg[left[0]]
                left.remove(j)
            return lp

        cands = []
        for m in range(block + 1):
            for out_off, in_off in STEP_VARIANTS:
                if sizes[f, m].item() == -math.inf or m > n:
                    cands.append((-math.inf, None))
                    continue
                if out_off == 0:
                    members, lp = ranked[:m], pl(ranked[:m])
                else:
                    ro, ri = m + out_off, m + in_off
                    if ro < 0 or ri >= n:
                        cands.append((-math.inf, None))
                        continue
                    members = [j for k, j in enumerate(ranked[:m]) if k != ro] + [ranked[ri]]
                    lp = pl(ranked[:m]) + (lg[ranked[ri]] - lg[ranked[ro]])
                if any(tok[j] < 0 for j in members):
                    cands.append((-math.inf, None))
                    continue
                cands.append((path[f].item() + sizes[f, m].item() + lp, members))
        best = sorted(range(len(cands)), key=lambda i: (-cands[i][0], i))[:branch]
        for i in best + [None] * (branch - len(best)):
            lp, members = cands[i] if i is not None else (-math.inf, None)
            if lp == -math.inf:
                members = None
            child_lp[r].append(lp)
            child_states[r].append([tok[j] if members and j in members else s for j, s in enumerate(state)])
    frontier = [sorted(range(w * branch), key=lambda c: (-child_lp[r][c], c))[:width] for r in range(b)]
    return child_lp, child_states, frontier


def check_steps_against_brute(args):
    out = spot_kernels.expand_steps(*args, backend="reference")
    child_lp, child_states, frontier = brute_expand_steps(args)
    torch.testing.assert_close(out.child_logprob, torch.tensor(child_lp, dtype=args[0].dtype), rtol=1e-12,
                               atol=1e-12)
    assert out.child_states.tolist() == child_states
    assert out.frontier.tolist() == frontier
    b = len(frontier)
    kept = out.frontier.shape[1]
    assert torch.equal(out.frontier_states, out.child_states.gather(
        1, out.frontier[..., None].expand(b, kept, args[1].shape[1])).reshape(b * kept, -1))
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_expand_steps_against_brute_force(seed, temperature):
    out = check_steps_against_brute(make_step_args(seed, temperature=temperature))
    assert (out.child_logprob > -math.inf).any()


def test_expand_steps_reproduces_expand_frontier_for_one_commit_steps():
    """Sizes fixed at 1 give single-position children, scored log_softmax of the logits like select_children's (the
    first four ranks: the variants of a one-position set)."""
    args = make_args(3, branch=4, width=3, block=8)
    args[1][:, :] = MASK  # every position masked: children by rank only
    args[4][:] = torch.randint(0, 50, args[4].shape, generator=torch.Generator().manual_seed(0))  # tokens everywhere
    frontier_out = spot_kernels.expand_frontier(*args, backend="reference")
    sizes = torch.full((args[0].shape[0], 9), -math.inf, dtype=args[0].dtype)
    sizes[:, 1] = 0.0
    step_out = spot_kernels.expand_steps(*args[:3], sizes, *args[3:], backend="reference")
    torch.testing.assert_close(step_out.child_logprob, frontier_out.child_logprob, rtol=1e-12, atol=1e-12)
    real = step_out.child_logprob > -math.inf  # (children of a -inf node differ: padding, never kept)
    assert real.any() and torch.equal(step_out.child_states[real], frontier_out.child_states[real])
    assert torch.equal(step_out.frontier, frontier_out.frontier)


def test_expand_steps_variant_table_is_the_documented_one():
    from spot_kernels.reference import expand_frontier as ref

    assert ref.STEP_VARIANTS == STEP_VARIANTS


def test_expand_steps_opcheck():
    opcheck(torch.ops.spot.expand_steps.default, tuple(make_step_args(2)))


@pytest.mark.parametrize("backend", ["triton", "cuda-emulation", "cuda", "cpu"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(3, 2, 8, 4), (2, 4, 32, 8), (1, 1, 1, 2), (2, 3, 70, 5)])
def test_expand_steps_backends_equal_the_reference(backend, dtype, shape):
    """Integer outputs bit for bit; log-probabilities within the dtype's summation order (a Plackett-Luce prefix is
    a sum of B terms)."""
    b, w, block, top = shape
    for seed, temperature in ((0, 0.0), (1, 1.0)):
        args = make_step_args(seed, b, w, block, top, temperature)
        args = [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        assert_steps_match(*backend.both("expand_steps", *backend.to(*args)), dtype)


def assert_steps_match(got, want, dtype):
    """A backend's expand_steps outputs against the reference's: integers bit for bit, log-probabilities within the
    dtype's summation order."""
    for name, x, y in zip(spot_kernels.StepExpansion._fields, got, want):
        x = x.cpu()
        assert x.dtype == y.dtype and x.shape == y.shape, name
        if x.is_floating_point():
            torch.testing.assert_close(x, y, rtol=1e-5 if dtype == torch.float32 else 1e-12,
                                       atol=1e-5 if dtype == torch.float32 else 1e-12, equal_nan=True, msg=name)
        else:
            assert torch.equal(x, y), name


def edge_step_args(case, dtype):
    """expand_steps' arguments for one edge case, and what makes the case what it is (checked on the reference)."""
    inf, nan = math.inf, math.nan
    if case == "no positions":  # B = 0: the empty step is the only candidate, where size 0 is possible
        b, w, top = 2, 2, 3
        sizes = torch.tensor([[0.0], [0.0], [-inf], [-0.5]], dtype=dtype)
        args = [torch.zeros(b * w, 0, dtype=dtype), torch.zeros(b * w, 0, dtype=I64),
                torch.tensor([-1.0, -inf, 0.5, -2.0], dtype=dtype), sizes, torch.rand(b, 0, top, dtype=dtype),
                torch.zeros(b, 0, top, dtype=I64), 7, torch.tensor([0, 1]), torch.tensor([16, 0]), torch.tensor([1, 2]),
                1.0, MASK, 3, 2]
        return args, lambda out: (out.child_logprob[:, ::3].tolist() == [[-1.0, -inf], [-inf, -2.5]]
                                  and out.child_states.shape == (2, 6, 0))
    if case == "one position":  # B = 1: masked or not, the only size possible or not
        args = make_step_args(4, b=2, w=3, block=1, top=2, temperature=1.0, branch=4, width=5)
        args[1][:] = MASK
        args[1][1] = 3  # node 1 has nothing masked
        args[5][:] = torch.tensor([[[3, 4]], [[5, 6]]])  # every position has a token
        args[3][:] = torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64))
        args[3][2] = torch.tensor([-inf, 0.0])
        args[3][4] = torch.tensor([0.0, -inf])
    elif case == "every size impossible":
        args = make_step_args(5, b=2, w=3, block=8, top=4, temperature=1.0, branch=5, width=4)
        args[3][:] = -inf
        return _to(args, dtype), lambda out: ((out.child_logprob == -inf).all()
                                              and out.frontier.tolist() == [[0, 1, 2, 3]] * 2)
    elif case == "non-finite logits":  # NaN counts as -inf, +inf as the largest value / 4, ties to the lower position
        args = make_step_args(6, b=2, w=3, block=8, top=4, temperature=1.0, branch=12, width=6)
        args[1][:] = MASK
        args[5][:] = torch.randint(0, 50, args[5].shape, generator=torch.Generator().manual_seed(1))
        args[3][:] = torch.log_softmax(torch.randn(6, 9, generator=torch.Generator().manual_seed(2),
                                                   dtype=torch.float64), -1)
        logits = args[0]
        logits[0, [1, 4]] = inf  # two +inf: tied at the top
        logits[0, [2, 6]] = nan
        logits[1] = inf  # every logit +inf
        logits[2] = nan  # every logit NaN: nothing eligible, only the empty step
        logits[3, [0, 3]] = -inf
        logits[3, 5] = inf
        logits[4, 2:] = logits[4, 1]  # seven tied logits
        logits[5, ::2] = nan
    elif case == "no token at a position":
        args = make_step_args(7, b=2, w=2, block=8, top=4, temperature=1.0, branch=10, width=4)
        args[1][:] = MASK
        args[5][:] = torch.randint(0, 50, args[5].shape, generator=torch.Generator().manual_seed(3))
        args[4][:, ::3] = 0.0  # probability 0 everywhere: no token there at T > 0
        args[5][1, 1] = -1  # no stale id at all
        args[3][:] = math.log(1 / 9)
    elif case == "no token at a position, T = 0":  # T = 0 draws the stale top-1 id, -1 where there is none
        args = make_step_args(7, b=2, w=2, block=8, top=4, temperature=0.0, branch=10, width=4)
        args[1][:] = MASK
        args[5][:] = torch.randint(0, 50, args[5].shape, generator=torch.Generator().manual_seed(3))
        args[5][:, ::3, 0] = -1
        args[3][:] = math.log(1 / 9)
    elif case == "a rule's few small sizes":  # sizes 1 to 3 only: ranks past size + 4 never in a set, tokens or not
        args = make_step_args(13, b=2, w=3, block=16, top=4, temperature=1.0, branch=8, width=5)
        args[1][:] = MASK
        args[5][:] = torch.randint(0, 50, args[5].shape, generator=torch.Generator().manual_seed(7))
        args[5][:, 1::4] = -1  # some positions without a token
        args[3][:] = -inf
        args[3][:, 1:4] = torch.log(torch.tensor([0.05, 0.9, 0.05], dtype=torch.float64))
    elif case == "no stale top-K":  # K = 0: no position has a token, only empty steps
        args = make_step_args(8, b=2, w=2, block=6, top=0, temperature=1.0, branch=3, width=3)
        args[3][:, 0] = math.log(0.5)
        return _to(args, dtype), lambda out: (out.child_states.view(2, 2, 3, 6) == args[1].view(2, 2, 1, 6)).all()
    elif case == "branch above the candidates":  # (B + 1) * 8 = 32 candidates, 40 children: padding; W = n
        args = make_step_args(9, b=2, w=2, block=3, top=4, temperature=1.0, branch=40, width=200)
        args[1][:] = MASK
        args[5][:] = torch.randint(0, 50, args[5].shape, generator=torch.Generator().manual_seed(4))
        args[3][:] = math.log(1 / 4)
        return _to(args, dtype), lambda out: ((out.child_logprob[:, 32:40] == -inf).all()
                                              and out.frontier.shape == (2, 80))
    elif case == "non-finite path log-probabilities":  # NaN and +inf nodes (NaN sorts first, as torch's sort)
        args = make_step_args(10, b=2, w=3, block=6, top=4, temperature=1.0, branch=4, width=5)
        args[1][:] = MASK
        args[5][:] = torch.randint(0, 50, args[5].shape, generator=torch.Generator().manual_seed(5))
        args[3][:] = math.log(1 / 7)
        args[2][0], args[2][2], args[2][4] = nan, inf, -inf
    else:  # expanded views of the stale top-K, tokens at every position
        args = make_step_args(11, b=3, w=2, block=8, top=4, temperature=1.0, branch=6, width=4)
        args[4] = args[4][1:2].expand_as(args[4])
        args[5] = torch.randint(0, 50, (1, 8, 4), generator=torch.Generator().manual_seed(6)).expand(3, 8, 4)
    return _to(args, dtype), lambda out: (out.child_logprob > -inf).any()


def _to(args, dtype):
    return [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


EDGE_CASES = ["no positions", "one position", "every size impossible", "non-finite logits", "no token at a position",
              "no token at a position, T = 0", "a rule's few small sizes", "no stale top-K",
              "branch above the candidates", "non-finite path log-probabilities", "expanded stale views"]


@pytest.mark.parametrize("case", EDGE_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_expand_steps_edge_cases_on_the_reference(case, dtype):
    """Each edge case is what it says (so the backends' parity below covers it); float64 ones against brute force."""
    args, holds = edge_step_args(case, dtype)
    assert holds(spot_kernels.expand_steps(*args, backend="reference")), case
    if dtype == torch.float64 and case not in ("no positions", "non-finite path log-probabilities"):
        check_steps_against_brute(args)


@pytest.mark.parametrize("backend", ["triton", "cuda-emulation", "cuda", "cpu"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", EDGE_CASES)
def test_expand_steps_backends_on_edge_cases(backend, dtype, case):
    args, _ = edge_step_args(case, dtype)
    assert_steps_match(*backend.both("expand_steps", *backend.to(*args)), dtype)


@pytest.mark.parametrize("backend", ["triton", "cuda-emulation", "cuda", "cpu"], indirect=True)
def test_expand_steps_backends_without_rows(backend):
    empty = [a[:0] if isinstance(a, torch.Tensor) else a for a in make_step_args(12)]
    got, want = backend.both("expand_steps", *backend.to(*empty))
    assert_steps_match(got, want, torch.float64)
    assert [tuple(x.shape) for x in got] == [(0, 0), (0, 0, 8), (0, 0), (0, 8), (0,)]


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
@pytest.mark.parametrize("pdt,qdt", [(torch.float32, torch.float32), (torch.float64, torch.float64),
                                     (torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_expand_steps_cpp_kernels_at_wider_rows(backend, pdt, qdt):
    """More frontier nodes per row than the CUDA kernel has warps, more children per row than threads, B above a
    warp, mixed dtypes of the logits and the stale top-K, and a width above the row's children (W = n)."""
    for seed, (b, w, block, top, branch, width, temperature) in enumerate(
            [(2, 9, 40, 6, 20, 50, 1.0), (3, 5, 33, 3, 150, 1000, 0.0)]):
        args = _to(make_step_args(20 + seed, b, w, block, top, temperature, branch, width), pdt)
        args[4] = args[4].to(qdt)
        got, want = backend.both("expand_steps", *backend.to(*args))
        assert_steps_match(got, want, pdt)
        assert got[2].shape == (b, min(width, w * branch)) and (got[0] > -math.inf).any()


@pytest.mark.parametrize("backend", CUDA_KERNELS, indirect=True)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_expand_steps_opcheck_of_the_cuda_kernel(backend, temperature):
    args = _to(make_step_args(13, temperature=temperature), torch.float32)
    backend.opcheck("expand_steps", *backend.to(*args))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend", ["cuda"], indirect=True)
def test_expand_steps_cuda_graph_capture(backend):
    """No host synchronisation or synchronous allocation: captured once, a replay follows new inputs."""
    from helpers import capture

    args = list(backend.to(*make_step_args(14, b=4, w=4, block=32, top=8, branch=8, width=4)))
    eager = [x.clone() for x in backend.run("expand_steps", *args)]
    graph, captured = capture(lambda: backend.run("expand_steps", *args))
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, eager):
        assert torch.equal(a.nan_to_num(), b.nan_to_num())
    args[0].mul_(0.5)  # new logits in the same buffer
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, backend.run("expand_steps", *args)):
        assert torch.equal(a.nan_to_num(), b.nan_to_num())
