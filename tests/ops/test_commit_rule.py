"""spot::commit_rule: the positions one step of a commit rule commits (docs/ops.md, "Commit rules").

The contract against a brute-force Python transcription (sorted lists, loops) on the reference, the rule tables of
spot.rules against each rule's definition, then every other backend against the reference."""

import math
import random
from dataclasses import replace

import pytest
import torch
from torch.library import opcheck

import spot_kernels
from spot.rules import parse_rule

from helpers import I64
from samples import sample_args


def brute_commit(conf, masked, step, quota, thresholds, inclusive, dtype):
    """One node in plain Python: rank the eligible positions (NaN is not eligible) by confidence, descending, ties to
    the lower position; count leading ranks passing their threshold (cast to the confidence's dtype); commit the first
    min(max(quota, passing), n)."""
    eligible = [j for j in range(len(conf)) if masked[j] and not math.isnan(conf[j])]
    ranked = sorted(eligible, key=lambda j: (-conf[j], j))
    n = len(ranked)
    passing = 0
    for r, j in enumerate(ranked):
        tau = torch.tensor(thresholds[n][r], dtype=torch.float64).to(dtype).item()
        if not (conf[j] >= tau if inclusive else conf[j] > tau):
            break
        passing += 1
    q = quota[min(step, len(quota) - 1)][n]
    return sorted(ranked[:min(max(q, passing), n)])


def check_against_brute(conf, masked, steps, tables):
    out = spot_kernels.commit_rule(conf, masked, steps, tables.quota, tables.thresholds, tables.inclusive)
    assert out.dtype == torch.bool and out.shape == masked.shape
    flat_c, flat_m, flat_s = conf.reshape(-1, conf.shape[-1]), masked.reshape(-1, conf.shape[-1]), steps.reshape(-1)
    quota, thresholds = tables.quota.tolist(), tables.thresholds.tolist()
    for i, got in enumerate(out.reshape(-1, conf.shape[-1])):
        want = brute_commit(flat_c[i].tolist(), flat_m[i].tolist(), int(flat_s[i]), quota, thresholds,
                            tables.inclusive, conf.dtype)
        assert torch.nonzero(got).flatten().tolist() == want, (i, flat_c[i], flat_m[i])
    return out


RULES = ["one", "steps:4", "steps:3", "threshold:0.3", "threshold:0.3,cmp:ge", "threshold:0.2,steps:4",
         "factor:1.0", "factor:0.3", "dream:4", "dream:8,alg:entropy"]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_nodes_against_brute_force(rule, dtype):
    g = torch.Generator().manual_seed(len(rule))
    B = 8
    tables = parse_rule(rule).tables(B, "cpu")
    conf = torch.rand(3, 5, B, generator=g, dtype=torch.float64).to(dtype) ** 2
    conf[0, 0, 3] = math.nan  # a position without a valid token
    masked = torch.rand(3, 5, B, generator=g) < 0.6
    masked[1, 1] = True  # every position masked
    masked[1, 2] = False  # none
    steps = torch.randint(0, 10, (3, 5), generator=g)
    check_against_brute(conf, masked, steps, tables)


@pytest.mark.parametrize("inclusive", [False, True])
def test_a_confidence_equal_to_the_threshold_passes_only_with_ge(inclusive):
    """The comparison is the rule's: `>` (LLaDA2, SDAR, SGLang) or `>=` (Fast-dLLM, dInfer)."""
    tables = parse_rule("threshold:0.5" + (",cmp:ge" if inclusive else "")).tables(4, "cpu")
    conf = torch.tensor([[0.9, 0.5, 0.5, 0.1]], dtype=torch.float64)
    out = check_against_brute(conf, torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, dtype=I64), tables)
    assert out[0].tolist() == ([True, True, True, False] if inclusive else [True, False, False, False])


def test_the_threshold_is_compared_in_the_confidence_dtype():
    """float32 confidences meet the float32 rounding of 0.9 (0.899999976...), as PyTorch compares a float32 tensor
    with a Python float: 0.9 in float32 is not above it, the next float32 is."""
    tables = parse_rule("threshold:0.9").tables(3, "cpu")
    at = torch.tensor(0.9, dtype=torch.float32)
    above = torch.nextafter(at, torch.tensor(1.0))
    conf = torch.stack([torch.tensor(0.95), at, above])[None]
    out = check_against_brute(conf, torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, dtype=I64), tables)
    assert out[0].tolist() == [True, False, True]


def test_ties_go_to_the_lower_position():
    tables = parse_rule("steps:2").tables(4, "cpu")  # 2 per step
    conf = torch.tensor([[0.25, 0.5, 0.25, 0.5]])
    out = check_against_brute(conf, torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, dtype=I64), tables)
    assert out[0].tolist() == [False, True, False, True]
    out = check_against_brute(conf, torch.tensor([[True, False, True, True]]), torch.zeros(1, dtype=I64), tables)
    assert out[0].tolist() == [True, False, False, True]


def test_a_quota_beyond_the_eligible_positions_commits_them_all():
    tables = parse_rule("steps:1").tables(6, "cpu")  # the whole block in one step
    conf = torch.tensor([[0.1, math.nan, 0.3, 0.2, 0.9, 0.4]])
    masked = torch.tensor([[True, True, False, True, True, False]])
    out = check_against_brute(conf, masked, torch.zeros(1, dtype=I64), tables)
    assert out[0].tolist() == [True, False, False, True, True, False]


def test_dreams_first_step_can_commit_nothing():
    """dream:N at N = block size: int(n (1 - s / t)) is 0 at the first step (docs/rules.md)."""
    tables = parse_rule("dream:8").tables(8, "cpu")
    conf = torch.rand(1, 8, dtype=torch.float64)
    out = check_against_brute(conf, torch.ones(1, 8, dtype=torch.bool), torch.zeros(1, dtype=I64), tables)
    assert not out.any()
    last = check_against_brute(conf, torch.ones(1, 8, dtype=torch.bool), torch.tensor([7]), tables)
    assert last.all()  # the last step commits all that is left


def test_empty_inputs():
    tables = parse_rule("threshold:0.5").tables(0, "cpu")
    out = spot_kernels.commit_rule(torch.zeros(2, 0), torch.zeros(2, 0, dtype=torch.bool), torch.zeros(2, dtype=I64),
                                   tables.quota, tables.thresholds, False)
    assert out.shape == (2, 0)
    tables = parse_rule("one").tables(4, "cpu")
    out = spot_kernels.commit_rule(torch.zeros(0, 3, 4), torch.zeros(0, 3, 4, dtype=torch.bool),
                                   torch.zeros(0, 3, dtype=I64), tables.quota, tables.thresholds, False)
    assert out.shape == (0, 3, 4)


def test_one_commits_what_score_commits():
    """rule one is score's commit_pos: the most confident masked valid position, ties to the lowest."""
    rng = random.Random(3)
    g = torch.Generator().manual_seed(3)
    tables = parse_rule("one").tables(16, "cpu")
    logits = torch.randn(4, 6, 16, 50, generator=g, dtype=torch.float64)
    masked = torch.rand(4, 6, 16, generator=g) < 0.5
    z = torch.zeros(4, 6, dtype=I64)
    out = spot_kernels.score(logits, masked, rng.randrange(100), z, z, z, 0.7)
    commit = spot_kernels.commit_rule(out.confidence, masked, z, tables.quota, tables.thresholds, False)
    want = torch.zeros_like(masked).scatter(-1, out.commit_pos.clamp_min(0)[..., None], True) & \
        (out.commit_pos >= 0)[..., None]
    assert torch.equal(commit, want)


@pytest.mark.parametrize("inclusive", [1, 0.0, None])
def test_inclusive_must_be_a_bool(inclusive):
    """The dispatcher would take 1, 0.0 or None for the bool (torch.ops.spot.commit_rule does): the entry point
    refuses them by name."""
    args = list(sample_args("commit_rule"))
    args[5] = inclusive
    with pytest.raises(TypeError, match=f"inclusive must be a bool, got {type(inclusive).__name__}"):
        spot_kernels.commit_rule(*args)


def test_opcheck():
    g = torch.Generator().manual_seed(0)
    tables = parse_rule("threshold:0.4,steps:3").tables(6, "cpu")
    args = (torch.rand(2, 3, 6, generator=g), torch.rand(2, 3, 6, generator=g) < 0.7,
            torch.randint(0, 4, (2, 3), generator=g), tables.quota, tables.thresholds, False)
    opcheck(torch.ops.spot.commit_rule.default, args)


@pytest.mark.parametrize("backend", ["triton", "cuda-emulation", "cuda", "cpu"], indirect=True)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backends_equal_the_reference(backend, rule, dtype):
    """Integer and boolean outputs: bit for bit."""
    g = torch.Generator().manual_seed(7)
    for B in (1, 5, 32, 70):
        if (parse_rule(rule).steps or 0) > B:
            continue  # a rule of more steps than the block has positions is refused (spot.rules)
        tables = parse_rule(rule).tables(B, "cpu")
        conf = torch.rand(3, 4, B, generator=g, dtype=torch.float64).to(dtype)
        conf[0, 1, :B // 2] = math.nan
        conf[1, 0] = conf[1, 0, :1].expand(B)  # ties
        masked = torch.rand(3, 4, B, generator=g) < 0.7
        masked[2, 3] = False
        steps = torch.randint(0, 12, (3, 4), generator=g)
        args = backend.to(conf, masked, steps, tables.quota, tables.thresholds, tables.inclusive)
        got, want = backend.both("commit_rule", *args)
        assert torch.equal(got.cpu(), want.cpu()), (rule, B)


def test_an_eligible_minus_inf_ranks_before_the_ineligible_positions():
    """-inf is a confidence like any other: the only eligible position commits even when lower positions are
    ineligible with the same sort key."""
    tables = parse_rule("one").tables(4, "cpu")
    conf = torch.tensor([[-math.inf, -math.inf, math.nan, -math.inf]])
    masked = torch.tensor([[False, True, True, True]])
    for backend in ("reference", "auto"):
        out = spot_kernels.commit_rule(conf, masked, torch.zeros(1, dtype=I64), tables.quota, tables.thresholds,
                                       False, backend=backend)
        assert out[0].tolist() == [False, True, False, False], backend


def edge_cases(dtype):
    """(name, confidence, masked, steps, tables) where the kernels' indexing and comparisons are easiest to get
    wrong: empty shapes, B 256 (several lanes per warp, several K chunks), non-contiguous views of every input,
    confidences at and next to the float32 rounding of a threshold, signed zeros and infinities."""
    g = torch.Generator().manual_seed(11)
    cases = []
    tables = parse_rule("threshold:0.5").tables(0, "cpu")
    cases.append(("B0", torch.zeros(2, 3, 0, dtype=dtype), torch.zeros(2, 3, 0, dtype=torch.bool),
                  torch.zeros(2, 3, dtype=I64), tables))
    tables = parse_rule("steps:2").tables(4, "cpu")
    cases.append(("no nodes", torch.zeros(0, 4, dtype=dtype), torch.zeros(0, 4, dtype=torch.bool),
                  torch.zeros(0, dtype=I64), tables))
    cases.append(("one node", torch.rand(4, generator=g, dtype=torch.float64).to(dtype),
                  torch.ones(4, dtype=torch.bool), torch.tensor(1), tables))
    for rule in ("threshold:0.9,steps:8", "factor:0.5", "dream:16", "steps:256"):
        tables = parse_rule(rule).tables(256, "cpu")
        conf = (1 - torch.rand(2, 3, 256, generator=g, dtype=torch.float64) ** 4).to(dtype)
        conf[0, 1, 100:200] = conf[0, 1, 7]  # ties
        conf[1, 2, ::3] = math.nan
        cases.append((f"B256 {rule}", conf, torch.rand(2, 3, 256, generator=g) < 0.8,
                      torch.randint(0, 20, (2, 3), generator=g), tables))
    # non-contiguous: every other position of a wider row, nodes transposed, every other step, column-major tables
    tables = parse_rule("threshold:0.4,steps:3").tables(6, "cpu")
    conf = torch.rand(4, 3, 12, generator=g, dtype=torch.float64).to(dtype).transpose(0, 1)[..., ::2]
    masked = (torch.rand(4, 3, 12, generator=g) < 0.7).transpose(0, 1)[..., ::2]
    steps = torch.randint(0, 4, (3, 8), generator=g)[:, ::2]
    quota, thresholds = (t.t().contiguous().t() for t in (tables.quota, tables.thresholds))
    assert not any(t.is_contiguous() for t in (conf, masked, steps, quota, thresholds))
    cases.append(("non-contiguous", conf, masked, steps, replace(tables, quota=quota, thresholds=thresholds)))
    expanded = torch.rand(1, 6, generator=g, dtype=torch.float64).to(dtype).expand(5, 6)  # stride 0
    cases.append(("expanded", expanded, torch.ones(5, 6, dtype=torch.bool), torch.arange(5), tables))
    # thresholds rounded to the confidence dtype: confidences at, just above and just below two of them
    for rule in ("threshold:0.9", "threshold:0.3,cmp:ge", "factor:0.7"):
        tables = parse_rule(rule).tables(6, "cpu")
        tau = tables.thresholds[6].to(dtype)  # n = 6: every position masked
        values = torch.cat([torch.stack([t, torch.nextafter(t, t + 1), torch.nextafter(t, t - 1)])
                            for t in tau[tau.isfinite()][:2]])
        cases.append((f"rounding {rule}", torch.stack([values, values.flip(0), values.roll(2)]),
                      torch.ones(3, 6, dtype=torch.bool), torch.zeros(3, dtype=I64), tables))
    # signed zeros tie; infinities rank first and last; -inf thresholds (factor) always pass
    inf = math.inf
    conf = torch.tensor([[0.0, -0.0, inf, -inf, 0.0, -inf], [-0.0, 0.0, -inf, -inf, inf, inf]], dtype=dtype)
    masked = torch.tensor([[True, True, True, True, False, True], [True, True, True, False, True, True]])
    for rule in ("steps:3", "factor:0.5", "threshold:0.5,cmp:ge", "one"):
        cases.append((f"zeros and infinities {rule}", conf, masked, torch.tensor([0, 1]),
                      parse_rule(rule).tables(6, "cpu")))
    return cases


@pytest.mark.parametrize("backend", ["triton", "cuda-emulation", "cuda", "cpu"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backends_equal_the_reference_on_edge_cases(backend, dtype):
    """Bit for bit on the cases of edge_cases; the reference itself against the brute force on the small ones."""
    for name, conf, masked, steps, tables in edge_cases(dtype):
        args = (conf, masked, steps, tables.quota, tables.thresholds, tables.inclusive)
        got, want = backend.both("commit_rule", *backend.to(*args))
        assert got.shape == masked.shape and got.dtype == torch.bool, name
        assert torch.equal(got.cpu(), want.cpu()), name
        if conf.shape[-1] <= 12 and conf.numel():
            flat_c, flat_m = conf.reshape(-1, conf.shape[-1]), masked.reshape(-1, conf.shape[-1])
            for i, row in enumerate(want.reshape(-1, conf.shape[-1])):
                brute = brute_commit(flat_c[i].tolist(), flat_m[i].tolist(), int(steps.reshape(-1)[i]),
                                     tables.quota.tolist(), tables.thresholds.tolist(), tables.inclusive, dtype)
                assert torch.nonzero(row).flatten().tolist() == brute, (name, i)
