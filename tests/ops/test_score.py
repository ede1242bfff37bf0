"""spot::score: coupled Gumbel-max tokens, confidences, top-K, commit position (docs/ops.md, "Fused scoring").

The contract against brute force on the reference (the oracle), then every other backend against the reference:
Triton's tile logic on small shapes, the CUDA kernels (emulated on CPU, or on the GPU), and real-model shapes on
a GPU."""

import math

import pytest
import torch
from torch.library import opcheck

import spot_kernels
from spot_kernels import CONFIDENCE_KINDS, ScoreOutput
from spot_kernels.reference import score as ref_scoring

import brute
from helpers import CPP_KERNELS, I64, assert_probs_close, assert_score_equal, gpu_only, score_inputs


def run(logits, masked=None, seed=0, rows=None, block_start=None, steps=None, temperature=1.0, **kw):
    lead = logits.shape[:-2]
    if masked is None:
        masked = torch.ones(logits.shape[:-1], dtype=torch.bool)
    rows = torch.zeros(lead, dtype=I64) if rows is None else rows
    block_start = torch.zeros(lead, dtype=I64) if block_start is None else block_start
    steps = torch.zeros(lead, dtype=I64) if steps is None else steps
    return spot_kernels.score(logits, masked, seed, rows, block_start, steps, temperature, **kw)


def check_against_brute(logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k):
    out = spot_kernels.score(logits, masked, seed, rows, block_start, steps, temperature, confidence=confidence,
                             top_k=top_k)
    n, block, vocab = logits.shape
    for i in range(n):
        confs, eligible = [], []
        for j in range(block):
            tok, conf, top, valid = brute.score_row(logits[i, j].tolist(), seed, rows[i].item(),
                                                    block_start[i].item() + j, steps[i].item(), temperature,
                                                    confidence, top_k)
            assert out.tokens[i, j].item() == tok, (i, j)
            if valid:
                assert out.confidence[i, j].item() == pytest.approx(conf, rel=1e-9, abs=1e-12)
            else:
                assert math.isnan(out.confidence[i, j].item())
            assert out.topk_ids[i, j].tolist() == [v for _, v in top]
            assert out.topk_probs[i, j].tolist() == pytest.approx([p for p, _ in top], rel=1e-9, abs=1e-12)
            confs.append(conf)
            eligible.append(valid and bool(masked[i, j]))
        assert out.commit_pos[i].item() == brute.commit(confs, eligible), i
    return out


@pytest.mark.parametrize("confidence", CONFIDENCE_KINDS)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0, 2.5])
def test_random_against_brute_force(confidence, temperature):
    g = torch.Generator().manual_seed(CONFIDENCE_KINDS.index(confidence) * 100 + int(temperature * 10))
    n, block, vocab = 3, 5, 23
    logits = torch.randn(n, block, vocab, generator=g, dtype=torch.float64) * 3
    logits[0, 1, 4] = -math.inf  # partial -inf is ordinary
    masked = torch.rand(n, block, generator=g) < 0.7
    rows = torch.tensor([0, 1, 0])
    block_start = torch.tensor([16, 16, 48])
    steps = torch.tensor([0, 3, 7])
    check_against_brute(logits, masked, 1234, rows, block_start, steps, temperature, confidence, top_k=6)


def test_invalid_rows_and_partial_inf():
    logits = torch.zeros(1, 6, 4, dtype=torch.float64)
    logits[0, 0] = torch.tensor([0.0, math.nan, 1.0, 2.0])  # NaN
    logits[0, 1] = -math.inf  # every entry -inf
    logits[0, 2] = torch.tensor([0.0, math.inf, 1.0, 2.0])  # +inf
    logits[0, 3] = torch.tensor([-math.inf, 0.0, -math.inf, 0.0])  # partial -inf: ordinary
    logits[0, 4] = torch.tensor([5.0, 1.0, 0.0, 0.0])
    logits[0, 5] = torch.tensor([-math.inf, -math.inf, -math.inf, 3.0])
    for temperature in (0.0, 0.5):
        for kind in CONFIDENCE_KINDS:
            out = check_against_brute(logits, torch.ones(1, 6, dtype=torch.bool), 3, torch.zeros(1, dtype=I64),
                                      torch.zeros(1, dtype=I64), torch.zeros(1, dtype=I64), temperature, kind, 4)
            assert out.tokens[0, :3].tolist() == [-1, -1, -1]
            assert torch.isnan(out.confidence[0, :3]).all()
            assert (out.topk_probs[0, :3] == 0).all() and (out.topk_ids[0, :3] == -1).all()
            assert out.tokens[0, 3].item() in (1, 3) and out.tokens[0, 5].item() == 3
            # -inf entries have probability 0; ties (0.5, 0.5) and (0, 0) go to the lowest id.
            assert out.topk_ids[0, 3].tolist() == [1, 3, 0, 2]
            assert out.topk_probs[0, 3].tolist() == [0.5, 0.5, 0.0, 0.0]
            assert out.commit_pos[0].item() != -1 and out.commit_pos[0].item() >= 3
    # Nothing valid and masked: no commit.
    only_invalid = torch.ones(1, 6, dtype=torch.bool)
    only_invalid[0, 3:] = False
    assert run(logits, only_invalid, temperature=0.5).commit_pos.tolist() == [-1]


def test_ties_lowest_id_and_lowest_position():
    logits = torch.tensor([[[1.0, 3.0, 3.0, 0.0, 3.0], [1.0, 3.0, 3.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.0, 9.0]]])
    masked = torch.tensor([[True, True, False]])
    out = run(logits, masked, temperature=0.0, confidence="prob", top_k=5)
    assert out.tokens[0].tolist() == [1, 1, 4]
    assert out.topk_ids[0, 0].tolist() == [1, 2, 4, 0, 3]
    assert out.commit_pos.tolist() == [0]  # positions 0 and 1 tie; 2 is more confident but not masked
    margin = run(logits, masked, temperature=0.0, confidence="margin").confidence
    assert margin[0, 0].item() == 0.0


def test_topk_ties_at_the_cut_take_the_lowest_ids():
    """K < V with several entries tied at the K-th value: the lowest ids make the cut, in id order."""
    logits = torch.tensor([[[0.0, 5.0, 5.0, 5.0, 0.0, 5.0], [-math.inf, 0.0, -math.inf, -math.inf, 0.0, -math.inf],
                            [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]], dtype=torch.float64)
    for temperature in (0.0, 0.9):
        out = run(logits, temperature=temperature, top_k=3)
        assert out.topk_ids[0].tolist() == [[1, 2, 3], [1, 4, 0], [0, 1, 2]]
        assert out.topk_probs[0, 1].tolist() == [0.5, 0.5, 0.0]
    wide = torch.randn(1, 2, 200, generator=torch.Generator().manual_seed(12)).round()  # many exact ties
    for k in (50, 150):  # a sorted list, and the CPU kernel's heap (K above 64)
        out = run(wide, temperature=0.5, top_k=k)
        for j in range(2):
            _, _, top, _ = brute.score_row(wide[0, j].tolist(), 0, 0, j, 0, 0.5, "prob", k)
            assert out.topk_ids[0, j].tolist() == [v for _, v in top]


def test_topk_lowest_id_mixes_rows_with_and_without_a_tie_at_the_cut():
    """Only rows whose (K+1)-th value ties the K-th take the slow path; every row must equal a full sort."""
    g = torch.Generator().manual_seed(5)
    values = torch.randn(6, 40, generator=g, dtype=torch.float64)
    values[1] = values[1].round()  # ties everywhere, at the cut too
    values[3, :12] = 2.0  # twelve-way tie straddling a cut of 5
    values[4] = 0.0  # all tied
    for k in (1, 5, 39, 40):
        vals, ids = ref_scoring.topk_lowest_id(values, k)
        for r in range(values.shape[0]):
            want = sorted(range(40), key=lambda v: (-values[r, v].item(), v))[:k]
            assert ids[r].tolist() == want, (k, r)
            assert torch.equal(vals[r], values[r, want])


def test_masks_all_and_none():
    logits = torch.randn(2, 4, 7, generator=torch.Generator().manual_seed(3))
    none = run(logits, torch.zeros(2, 4, dtype=torch.bool), temperature=0.7)
    assert none.commit_pos.tolist() == [-1, -1]
    assert (none.tokens >= 0).all()  # tokens and confidences are still reported for unmasked positions
    every = run(logits, torch.ones(2, 4, dtype=torch.bool), temperature=0.7)
    assert torch.equal(every.commit_pos, every.confidence.argmax(-1))


def test_empty_batch_and_empty_block():
    out = run(torch.zeros(0, 4, 10), temperature=1.0, top_k=3)
    assert [tuple(t.shape) for t in out] == [(0, 4), (0, 4), (0, 4, 3), (0, 4, 3), (0,)]
    out = run(torch.zeros(2, 0, 10), temperature=1.0, top_k=3)
    assert [tuple(t.shape) for t in out] == [(2, 0), (2, 0), (2, 0, 3), (2, 0, 3), (2,)]
    assert out.commit_pos.tolist() == [-1, -1]
    lead_empty = run(torch.zeros(3, 0, 2, 5), temperature=0.0)
    assert lead_empty.commit_pos.shape == (3, 0) and lead_empty.topk_ids.shape == (3, 0, 2, 32)


def test_no_leading_dims():
    """A single node: logits [B, V] with 0-dim rows / block_start / steps."""
    logits = torch.randn(4, 9, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    one = spot_kernels.score(logits, torch.ones(4, dtype=torch.bool), 1, torch.tensor(2), torch.tensor(3),
                             torch.tensor(1), 0.8, top_k=3)
    batched = spot_kernels.score(logits[None], torch.ones(1, 4, dtype=torch.bool), 1, torch.tensor([2]),
                                 torch.tensor([3]), torch.tensor([1]), 0.8, top_k=3)
    assert one.commit_pos.shape == () and one.tokens.shape == (4,)
    for a, b in zip(one, batched):
        assert torch.equal(a, b[0])


def test_k_larger_than_v_and_v_one():
    out = run(torch.tensor([[[0.0, 1.0, 2.0]]]), temperature=1.0, top_k=5)
    assert out.topk_ids[0, 0].tolist() == [2, 1, 0, -1, -1]
    assert out.topk_probs[0, 0, 3:].tolist() == [0.0, 0.0]
    assert out.topk_probs[0, 0].sum().item() == pytest.approx(1.0)
    for temperature in (0.0, 1.3):
        one = {kind: run(torch.tensor([[[4.0], [-2.0]]]), temperature=temperature, confidence=kind, top_k=2)
               for kind in CONFIDENCE_KINDS}
        assert one["prob"].tokens.tolist() == [[0, 0]]
        assert one["prob"].confidence.tolist() == [[1.0, 1.0]]
        assert one["raw_prob"].confidence.tolist() == [[1.0, 1.0]]
        assert one["margin"].confidence.tolist() == [[1.0, 1.0]]  # top-2 of a single entry is 0
        assert one["neg_entropy"].confidence.tolist() == [[0.0, 0.0]]
        assert one["prob"].topk_ids.tolist() == [[[0, -1], [0, -1]]]


def test_leading_dims_are_flattened_consistently():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 3, 4, 9, generator=g)
    masked = torch.rand(2, 3, 4, generator=g) < 0.5
    rows = torch.tensor([[0, 0, 0], [1, 1, 1]])
    block_start = torch.full((2, 3), 8)
    steps = torch.tensor([[2, 3, 3], [0, 1, 2]])
    out = spot_kernels.score(logits, masked, 9, rows, block_start, steps, 0.8, top_k=4)
    flat = spot_kernels.score(logits.reshape(6, 4, 9), masked.reshape(6, 4), 9, rows.reshape(6),
                              block_start.reshape(6), steps.reshape(6), 0.8, top_k=4)
    for a, b in zip(out, flat):
        assert torch.equal(a.reshape(b.shape), b)
    # Expanded (stride-0) views are accepted.
    expanded = spot_kernels.score(logits, masked, 9, torch.tensor([0, 1])[:, None].expand(2, 3),
                                  torch.tensor(8).expand(2, 3), steps, 0.8, top_k=4)
    assert torch.equal(expanded.tokens, out.tokens)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_logits_compute_in_float32(dtype):
    logits = (torch.randn(2, 4, 50, generator=torch.Generator().manual_seed(6)) * 4).to(dtype)
    out = run(logits, temperature=0.9, confidence="margin", top_k=8)
    want = run(logits.float(), temperature=0.9, confidence="margin", top_k=8)
    assert out.confidence.dtype == torch.float32 and out.topk_probs.dtype == torch.float32
    for a, b in zip(out, want):
        assert torch.equal(a, b)


def test_float32_matches_float64():
    logits = torch.randn(3, 6, 40, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 2
    a = run(logits, temperature=0.7, confidence="neg_entropy", top_k=5)
    b = run(logits.float(), temperature=0.7, confidence="neg_entropy", top_k=5)
    assert a.confidence.dtype == torch.float64
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.topk_ids, b.topk_ids)
    torch.testing.assert_close(a.topk_probs.float(), b.topk_probs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.confidence.float(), b.confidence, rtol=1e-5, atol=1e-6)


def test_greedy_is_the_zero_temperature_limit():
    logits = torch.randn(4, 8, 30, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    greedy = run(logits, temperature=0.0)
    cold = run(logits, temperature=1e-6)
    assert torch.equal(greedy.tokens, logits.argmax(-1))
    assert torch.equal(greedy.tokens, cold.tokens)


def test_row_chunking_does_not_change_results(monkeypatch):
    logits = torch.randn(3, 5, 37, generator=torch.Generator().manual_seed(9))
    want = run(logits, temperature=1.1, confidence="raw_prob", top_k=7)
    monkeypatch.setattr(ref_scoring, "_CHUNK_ELEMENTS", 80)  # two rows per chunk
    got = run(logits, temperature=1.1, confidence="raw_prob", top_k=7)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_tokens_use_the_coupled_noise():
    """The sampled token is argmax(x + gumbel(noise_uniform(...))), the same noise every op draws."""
    logits = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    rows, block_start, steps = torch.tensor([4, 9]), torch.tensor([32, 64]), torch.tensor([1, 5])
    out = spot_kernels.score(logits, torch.ones(2, 3, dtype=torch.bool), 77, rows, block_start, steps, 0.6)
    j = torch.arange(3)
    u = spot_kernels.noise_uniform(77, rows[:, None, None], (block_start[:, None] + j)[..., None],
                                   steps[:, None, None], torch.arange(11))
    g = -torch.log(-torch.log(u.double()))
    assert torch.equal(out.tokens, (logits / 0.6 + g).argmax(-1))


def _chi_square(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    expected = probs.double() * tokens.numel()
    return ((counts - expected) ** 2 / expected).sum().item()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_gumbel_max_samples_the_softmax(temperature):
    """20000 independent rows of the same logits: token frequencies follow softmax(logits / T).

    Chi-square with 5 dof; 20.5 is the 0.001 quantile. The same draws tested against the untempered (or a
    hotter) distribution must fail, so the bound has power.
    """
    n, vocab = 20000, 6
    logits = torch.tensor([1.0, 0.5, 0.0, -0.5, -1.0, 0.2], dtype=torch.float64)
    out = spot_kernels.score(logits.expand(n, 1, vocab), torch.ones(n, 1, dtype=torch.bool), 2024,
                             torch.arange(n), torch.zeros(n, dtype=I64), torch.zeros(n, dtype=I64), temperature)
    tokens = out.tokens[:, 0]
    assert _chi_square(tokens, torch.softmax(logits / temperature, -1)) < 20.5
    wrong = torch.softmax(logits / (temperature * 1.6), -1)
    assert _chi_square(tokens, wrong) > 60


def test_steps_and_positions_decorrelate_draws():
    """Different commit steps must give fresh noise: tokens at step k and k+1 agree only as often as chance."""
    n, vocab = 4000, 4
    logits = torch.zeros(n, 1, vocab, dtype=torch.float64)
    args = (torch.ones(n, 1, dtype=torch.bool), 5, torch.arange(n), torch.zeros(n, dtype=I64))
    a = spot_kernels.score(logits, *args, torch.zeros(n, dtype=I64), 1.0).tokens
    b = spot_kernels.score(logits, *args, torch.ones(n, dtype=I64), 1.0).tokens
    agree = (a == b).double().mean().item()
    assert abs(agree - 1 / vocab) < 0.03


@pytest.mark.parametrize("confidence,temperature", [("prob", 0.8), ("margin", 0.0), ("neg_entropy", 1.0),
                                                    ("raw_prob", 0.5)])
def test_opcheck(confidence, temperature):
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(2, 3, 4, 9, generator=g)
    logits[0, 0, 1, 2] = -math.inf  # (no NaN rows here: opcheck compares outputs with NaN != NaN)
    args = (logits, torch.rand(2, 3, 4, generator=g) < 0.5, 3, torch.zeros(2, 3, dtype=I64),
            torch.full((2, 3), 4), torch.ones(2, 3, dtype=I64), temperature)
    opcheck(torch.ops.spot.score.default, args, {"confidence": confidence, "top_k": 12, "backend": "reference"})


def _good():
    return dict(logits=torch.zeros(2, 4, 10), masked=torch.ones(2, 4, dtype=torch.bool), seed=0,
                rows=torch.zeros(2, dtype=I64), block_start=torch.zeros(2, dtype=I64), steps=torch.zeros(2, dtype=I64),
                temperature=1.0)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"logits": torch.zeros(2, 4, 10, dtype=I64)}, TypeError, "logits.*dtype"),
        ({"logits": torch.zeros(10)}, ValueError, "logits.*at least 2"),
        ({"logits": torch.zeros(2, 4, 0)}, ValueError, "V >= 1"),
        ({"logits": "x"}, TypeError, "logits.*Tensor"),
        ({"masked": torch.ones(2, 4)}, TypeError, "masked.*bool"),
        ({"masked": torch.ones(2, 5, dtype=torch.bool)}, ValueError, "masked.*shape"),
        ({"rows": torch.zeros(3, dtype=I64)}, ValueError, "rows.*shape"),
        ({"rows": torch.zeros(2, dtype=torch.int32)}, TypeError, "rows.*int64"),
        ({"block_start": torch.tensor([0, -1])}, ValueError, "block_start.*>= 0"),
        ({"steps": torch.tensor([0, -2])}, ValueError, "steps.*>= 0"),
        ({"steps": torch.zeros(2, 1, dtype=I64)}, ValueError, "steps.*shape"),
        ({"temperature": -0.1}, ValueError, "temperature"),
        ({"temperature": math.nan}, ValueError, "temperature"),
        ({"temperature": math.inf}, ValueError, "temperature"),
        ({"temperature": "hot"}, TypeError, "temperature"),
        ({"seed": -5}, ValueError, "seed"),
        ({"seed": 2**64}, ValueError, "seed"),
        ({"confidence": "entropy"}, ValueError, "confidence.*one of"),
        ({"top_k": 0}, ValueError, "top_k"),
        ({"top_k": 2.0}, TypeError, "top_k"),
        ({"steps": torch.zeros(2, dtype=I64, device="meta")}, ValueError, "on one device"),
        ({"backend": "fast"}, ValueError, "backend"),
    ],
)
def test_bad_input(kwargs, error, match):
    args = _good()
    args.update(kwargs)
    with pytest.raises(error, match=match):
        spot_kernels.score(**args)


def test_bad_input_through_torch_ops():
    """Callers of torch.ops.spot.score directly get the same checks."""
    a = _good()
    with pytest.raises(ValueError, match="temperature"):
        torch.ops.spot.score(a["logits"], a["masked"], 0, a["rows"], a["block_start"], a["steps"], -1.0)
    with pytest.raises(ValueError, match="confidence"):
        torch.ops.spot.score(a["logits"], a["masked"], 0, a["rows"], a["block_start"], a["steps"], 1.0, "x")


def test_pruned_gumbel_argmax_equals_the_dense_one():
    """The reference hashes noise only for entries that can still win; the token must equal the dense
    argmax(x + g) everywhere: flat and peaked rows, -inf entries, exact ties in x."""
    from spot_kernels.reference.noise import gumbel_from_words, words
    from spot_kernels.reference.score import _gumbel_argmax

    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        for scale in (0.01, 1.0, 30.0):
            x = (torch.randn(64, 1001, generator=gen) * scale).to(dtype)
            x[0] = 0.0  # all tied
            x[1, :500] = float("-inf")
            x[2] = x[2].round()  # many ties
            keys = torch.randint(0, 2**32, (64,), generator=gen)
            dense = torch.argmax(x + gumbel_from_words(words(keys[:, None], torch.arange(1001)), dtype), dim=-1)
            assert torch.equal(_gumbel_argmax(x, keys, dtype), dense), (dtype, scale)


# ------------------------------------------------------------------------------- backends against the reference

def check_score(backend, logits, masked, rows, block_start, steps, temperature, confidence, top_k, seed=11):
    """backend.run vs the reference on the backend's device (a Triton tile test: probabilities to atol 1e-7)."""
    args = backend.to(logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k)
    got, want = backend.both("score", *args)
    assert_score_equal(got, want, probs_atol=1e-7)
    return ScoreOutput(*got)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("dtype,temperature,kinds", [(torch.float32, 0.0, CONFIDENCE_KINDS),
                                                     (torch.float32, 0.7, CONFIDENCE_KINDS),
                                                     (torch.float16, 1.0, ("prob", "margin"))])
def test_score_matches_reference(backend, dtype, temperature, kinds, monkeypatch):
    """Confidence kinds; V = 37 in tiles of 16 (not a multiple); partial -inf; invalid rows; ties."""
    monkeypatch.setenv("SPOT_TRITON_SCORE_BLOCK", "16")
    logits, masked, rows, block_start, steps = score_inputs((2, 2), 4, 37, dtype, seed=int(temperature * 10),
                                                            mask_p=0.6)
    logits[0, 0, 1, 5:9] = -math.inf  # partial -inf is ordinary
    logits[0, 1, 0, 3] = math.nan  # invalid rows: NaN, +inf, all -inf
    logits[0, 1, 2, 30] = math.inf
    logits[1, 0, 3] = -math.inf
    logits[1, 1, 1] = torch.tensor([float(v % 5) for v in range(37)], dtype=dtype)  # ties across tiles
    masked[1, 1] = True
    for kind in kinds:
        out = check_score(backend, logits, masked, rows, block_start, steps, temperature, kind, top_k=4)
    assert (out.tokens[0, 1, [0, 2]] == -1).all() and (out.tokens[1, 0, 3] == -1)
    if temperature == 0:
        assert out.tokens[1, 1, 1] == 4 and out.topk_ids[1, 1, 1].tolist() == [4, 9, 14, 19]


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_gumbel_bound_table(backend):
    """The table the scoring kernel filters tiles with bounds every Gumbel value from above, tightly."""
    from spot_kernels.reference.noise import gumbel_from_words
    from spot_kernels.triton.score import _gumbel_bounds

    t = torch.arange(1 << 23, dtype=torch.int32)
    g = gumbel_from_words((8388607 - t).to(I64) << 9, torch.float32)
    bucket = torch.where(t == 0, 0, (t.to(torch.float32).view(torch.int32) >> 17) - 8127).long()
    bound = _gumbel_bounds(torch.device("cpu"))[bucket]
    assert bool((g <= bound).all())
    assert (bound - g)[g > 0].max().item() < 0.025  # loose only for the smallest values, which never win


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_score_many_tiles_at_temperature(backend, monkeypatch):
    """V = 300 in 19 tiles of 16: most tiles are filtered out by the Gumbel bounds; the tokens stay exact."""
    monkeypatch.setenv("SPOT_TRITON_SCORE_BLOCK", "16")
    logits, masked, rows, block_start, steps = score_inputs((2,), 2, 300, torch.float32, seed=8, mask_p=0.6)
    for temperature in (0.3, 1.0):
        check_score(backend, logits, masked, rows, block_start, steps, temperature, "prob", top_k=2)


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("temperature", [0.0, 0.5])
def test_score_shapes_and_edge_cases(backend, temperature):
    fp32 = torch.float32
    # no leading dims; K > V (padding); V = 1; top_k = 1
    logits, masked, rows, block_start, steps = score_inputs((), 3, 11, fp32, seed=1, mask_p=0.6)
    check_score(backend, logits, masked, rows, block_start, steps, temperature, "margin", top_k=13)
    check_score(backend, logits[:, :1], masked, rows, block_start, steps, temperature, "margin", top_k=2)
    check_score(backend, logits, masked, rows, block_start, steps, temperature, "prob", top_k=1)
    # all masked / none masked / several nodes
    logits, masked, rows, block_start, steps = score_inputs((3,), 3, 9, fp32, seed=2, mask_p=0.6)
    masked[0] = True
    masked[1] = False
    out = check_score(backend, logits, masked, rows, block_start, steps, temperature, "prob", top_k=3)
    assert out.commit_pos[1] == -1 and out.commit_pos[0] >= 0
    # empty batches and B = 0
    for lead, block in (((0, 3), 4), ((2,), 0)):
        logits, masked, rows, block_start, steps = score_inputs(lead, block, 5, fp32, seed=3, mask_p=0.6)
        out = check_score(backend, logits, masked, rows, block_start, steps, temperature, "prob", top_k=2)
        if block == 0:
            assert out.commit_pos.tolist() == [-1, -1]


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_score_zero_probabilities_and_overflow(backend):
    """Entries whose probability underflows to exactly 0 tie at 0 and are listed by lowest id, as the reference
    does; a tiny temperature that overflows x to +inf makes the row invalid."""
    logits = torch.full((1, 3, 10), -200.0)
    logits[0, 0, 7] = 0.0  # one entry carries all the mass; the others underflow to 0
    logits[0, 1, 2] = 5.0
    logits[0, 1, 6] = 5.0  # a tie for the top, then zeros
    logits[0, 2] = torch.linspace(-3, 3, 10)
    z = torch.zeros(1, dtype=I64)
    for temperature in (0.0, 0.25):
        out = check_score(backend, logits, torch.ones(1, 3, dtype=torch.bool), z, z, z, temperature, "prob", top_k=4)
        assert out.topk_ids[0, 0].tolist() == [7, 0, 1, 2]
        assert out.topk_ids[0, 1].tolist() == [2, 6, 0, 1]
    big = torch.full((1, 1, 4), 3e38)
    out = check_score(backend, big, torch.ones(1, 1, dtype=torch.bool), z, z, z, 1e-3, "prob", top_k=2)
    assert out.tokens.item() == -1 and out.commit_pos.item() == -1


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_score_falls_back_to_the_reference(backend):
    """float64 logits and top_k > 1024 run the reference inside the triton backend (documented)."""
    logits, masked, rows, block_start, steps = score_inputs((2,), 2, 7, torch.float64, seed=4, mask_p=0.6)
    check_score(backend, logits, masked, rows, block_start, steps, 0.7, "prob", top_k=3)
    check_score(backend, logits.float(), masked, rows, block_start, steps, 0.7, "prob", top_k=1025)


def _score_args(t, lead, block, vocab, dtype, temperature, kind, top_k, seed=0, scale=3.0, mask_p=0.7):
    """Every argument of score (random inputs of helpers.score_inputs) on the backend's device."""
    logits, masked, rows, block_start, steps = score_inputs(lead, block, vocab, dtype, seed, scale, mask_p)
    return t.to(logits, masked, 12345 + seed, rows, block_start, steps, temperature, kind, top_k)


def _check_score(t, args):
    """t against the reference on the same arguments: (t's outputs as a ScoreOutput). The cpu backend is held to
    helpers.PROB_TOL, neg_entropy's absolute tolerance scaled by log(V) + 1."""
    logits, kind = args[0], args[7]
    cpu_scale = None
    if t.name == "cpu":
        cpu_scale = math.log(logits.shape[-1]) + 1 if kind == "neg_entropy" else 1.0
    got = t.run("score", *args)
    assert_score_equal(got, t.ref("score", *args), cpu_scale=cpu_scale)
    return ScoreOutput(*got)


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
@pytest.mark.parametrize("kind", CONFIDENCE_KINDS)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_score_parity(backend, dtype, temperature, kind):
    _check_score(backend, _score_args(backend, (3, 2), 8, 300, dtype, temperature, kind, 32,
                                      seed=int(temperature * 10)))


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
@pytest.mark.parametrize("vocab,top_k", [(1, 1), (1, 4), (7, 32), (33, 2), (1000, 1), (1000, 33), (1000, 100),
                                         (4099, 64), (32000 + 13, 32), (4099, 512), (300, 299), (300, 300),
                                         (300, 301), (65, 65), (66, 65)])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_score_vocab_and_top_k_sizes(backend, vocab, top_k, temperature):
    """V not a multiple of any tile, K > 32 (several rounds), K > V (padding), V = 1; K above 64 (the CPU kernel's
    heap, a commit rule's 512 at T > 0) up to and past V."""
    for kind in ("prob", "margin"):
        _check_score(backend, _score_args(backend, (2,), 3, vocab, torch.float32, temperature, kind, top_k,
                                         seed=vocab % 97))


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
@pytest.mark.parametrize("lead,block,vocab", [((1,), 2, 151936), ((1, 1), 4, 126464), ((2, 40), 1, 3000),
                                              ((64,), 16, 500)])
def test_score_few_and_many_rows(backend, lead, block, vocab):
    """Few rows with a large V split the vocabulary across blocks; many rows do not."""
    _check_score(backend, _score_args(backend, lead, block, vocab, torch.bfloat16, 1.0, "prob", 32, seed=len(lead)))


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
@pytest.mark.parametrize("temperature", [0.0, 0.5])
@pytest.mark.parametrize("kind", CONFIDENCE_KINDS)
def test_score_invalid_rows_and_ties(backend, temperature, kind):
    logits = torch.zeros(1, 8, 6, dtype=torch.float64)
    logits[0, 0] = torch.tensor([0.0, math.nan, 1.0, 2.0, 0.0, 0.0])
    logits[0, 1] = -math.inf
    logits[0, 2] = torch.tensor([0.0, math.inf, 1.0, 2.0, 0.0, 0.0])
    logits[0, 3] = torch.tensor([-math.inf, 0.0, -math.inf, 0.0, -math.inf, -math.inf])
    logits[0, 4] = torch.tensor([5.0, 1.0, 0.0, 0.0, 5.0, 1.0])
    logits[0, 5] = torch.tensor([-math.inf, -math.inf, -math.inf, 3.0, -math.inf, -math.inf])
    logits[0, 6] = torch.tensor([0.0, 5.0, 5.0, 5.0, 0.0, 5.0])
    logits[0, 7] = torch.tensor([1000.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # probabilities underflow to exact zeros
    z = torch.zeros(1, dtype=I64)
    for dtype in (torch.float64, torch.float32):
        args = backend.to(logits.to(dtype), torch.ones(1, 8, dtype=torch.bool), 3, z, z, z, temperature, kind, 6)
        got = _check_score(backend, args)
        assert got[0][0, :3].tolist() == [-1, -1, -1]
        assert (got[3][0, :3] == -1).all() and (got[2][0, :3] == 0).all()
        masked = torch.zeros(1, 8, dtype=torch.bool)
        masked[0, :3] = True  # only invalid rows masked: no commit
        args = backend.to(logits.to(dtype), masked, 3, z, z, z, temperature, kind, 6)
        assert backend.run("score", *args)[4].tolist() == [-1]


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
def test_score_exact_ties_across_rounds_and_splits(backend):
    """Many exactly tied logits (rounded, bf16): top-K ties go to the lowest ids in every round and split."""
    g = torch.Generator().manual_seed(21)
    z = torch.zeros(1, dtype=I64)
    for vocab, top_k in [(200, 50), (20000, 80), (3000, 32)]:
        logits = torch.randn(1, 3, vocab, generator=g).round().to(torch.bfloat16)
        args = backend.to(logits, torch.ones(1, 3, dtype=torch.bool), 0, z, z, z, 0.5, "prob", top_k)
        _check_score(backend, args)


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
def test_score_empty_no_lead_and_non_contiguous(backend):
    for shape in [(0, 4, 10), (2, 0, 10), (3, 0, 2, 5), (4, 9)]:
        lead = shape[:-2]
        z = torch.zeros(lead, dtype=I64)
        args = backend.to(torch.randn(shape), torch.ones(shape[:-1], dtype=torch.bool), 0, z, z + 2, z, 1.0, "prob",
                          3)
        _check_score(backend, args)
    base = torch.randn(2, 50, 6)
    z2 = torch.zeros(2, dtype=I64)
    args = backend.to(base, torch.ones(2, 6, dtype=torch.bool), 5, z2, z2 + 8, torch.tensor(2))
    logits, masked, seed, rows, block_start, step = args
    args = (logits.transpose(1, 2), masked, seed, rows, block_start, step.expand(2), 0.8, "neg_entropy", 4)
    _check_score(backend, args)


@pytest.mark.parametrize("backend", CPP_KERNELS, indirect=True)
def test_score_matches_the_float64_reference_on_cpu(backend):
    args = _score_args(backend, (2, 3), 16, 500, torch.float64, 0.7, "prob", 8, seed=3)
    got = backend.run("score", *args)
    want = backend.ref("score", *(a.cpu() if isinstance(a, torch.Tensor) else a for a in args))
    for a, b in zip(got, want):
        if a.dtype.is_floating_point and backend.name == "cpu":
            assert_probs_close(a, b, torch.float64)
        elif a.dtype.is_floating_point:
            torch.testing.assert_close(a.cpu(), b, rtol=1e-12, atol=1e-14)
        else:
            assert torch.equal(a.cpu(), b)


@gpu_only
@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("vocab", [151936, 32003])
def test_score_real_vocab(backend, dtype, temperature, vocab):
    nodes, block = 4, 16
    logits = score_inputs((nodes,), block, vocab, dtype, seed=vocab % 97, peaked=True, device=backend.device)[0]
    logits[0, 3, 17] = math.nan
    logits[1, 2] = -math.inf
    masked = torch.rand(nodes, block, device=backend.device) < 0.6
    rows = torch.arange(nodes, device=backend.device)
    bstart = torch.full((nodes,), 40, device=backend.device)
    steps = torch.arange(nodes, device=backend.device) + 1
    for kind in ("prob", "margin", "neg_entropy"):
        a, r = backend.both("score", logits, masked, 9, rows, bstart, steps, temperature, kind, 32)
        assert torch.equal(a[0], r[0]), "tokens"
        assert torch.equal(a[3], r[3]), "top-K ids"
        assert torch.equal(a[4], r[4]), "commit positions"
        torch.testing.assert_close(a[2], r[2], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(a[1], r[1], rtol=1e-4, atol=1e-5, equal_nan=True)


@gpu_only
@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_score_random_logits_all_kinds_and_k(backend):
    logits = torch.randn(3, 8, 50000, device=backend.device, dtype=torch.bfloat16)
    z = torch.zeros(3, dtype=I64, device=backend.device)
    masked = torch.ones(3, 8, dtype=torch.bool, device=backend.device)
    for kind, k, t in (("raw_prob", 32, 0.8), ("prob", 1, 1.0), ("margin", 100, 0.5), ("prob", 7, 0.0)):
        a, r = backend.both("score", logits, masked, 3, z, z, z, t, kind, k)
        assert torch.equal(a[0], r[0]) and torch.equal(a[3], r[3]) and torch.equal(a[4], r[4])
        torch.testing.assert_close(a[2], r[2], rtol=1e-4, atol=1e-7)


# ---------------------------------------------------------------------- the cpu backend (csrc/cpu/) in particular

CPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _score_call(logits, masked=None, seed=3, rows=None, block_start=None, steps=None, temperature=1.0,
                confidence="prob", top_k=8):
    """Every argument of score for `logits`; unset ones: all masked, one row id per node, block at 16, step 2."""
    lead = logits.shape[:-2]
    if masked is None:
        masked = torch.ones(logits.shape[:-1], dtype=torch.bool)
    rows = torch.arange(math.prod(lead), dtype=I64).reshape(lead) if rows is None else rows
    block_start = torch.full(lead, 16, dtype=I64) if block_start is None else block_start
    steps = torch.full(lead, 2, dtype=I64) if steps is None else steps
    return logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
@pytest.mark.parametrize("confidence", CONFIDENCE_KINDS)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=str)
def test_score_random(backend, dtype, temperature, confidence):
    g = torch.Generator().manual_seed(CPU_DTYPES.index(dtype) * 100 + int(temperature * 10)
                                      + CONFIDENCE_KINDS.index(confidence))
    logits = (torch.randn(2, 3, 5, 1003, generator=g) * 3).to(dtype)  # V not a multiple of any tile
    masked = torch.rand(2, 3, 5, generator=g) < 0.7
    _check_score(backend, _score_call(logits, masked=masked, temperature=temperature, confidence=confidence,
                                      top_k=8))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
@pytest.mark.parametrize("temperature", [0.0, 0.5])
@pytest.mark.parametrize("confidence", CONFIDENCE_KINDS)
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
        out = _check_score(backend, _score_call(logits, temperature=temperature, confidence=confidence, top_k=25))
        assert out.tokens[0, :3].tolist() == [-1, -1, -1]
        assert torch.isnan(out.confidence[0, :3]).all()
        assert (out.topk_ids[0, :3] == -1).all() and (out.topk_probs[0, :3] == 0).all()
        assert (out.topk_ids[0, 3:, 21:] == -1).all()  # top_k > V: padding


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
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
        for kind in CONFIDENCE_KINDS:
            _check_score(backend, _score_call(logits, temperature=temperature, confidence=kind, top_k=top_k))
    # a commit tie: identical rows give equal confidences, the lowest position wins
    same = torch.randn(1, 1, 30, dtype=dtype).expand(2, 4, 30).contiguous()
    _check_score(backend, _score_call(same, temperature=temperature))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
@pytest.mark.parametrize("vocab", [1, 2, 15, 16, 17, 4099])
def test_score_vocab_sizes(backend, vocab):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(3, 4, vocab, generator=g, dtype=torch.float64) * 4
    for temperature in (0.0, 0.3, 1.0):
        for kind in CONFIDENCE_KINDS:
            _check_score(backend, _score_call(logits, temperature=temperature, confidence=kind, top_k=6))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_score_wide_logits_and_small_temperatures(backend):
    """Logit spreads far beyond the Gumbel range (most entries pruned before hashing) and tiny temperatures."""
    g = torch.Generator().manual_seed(7)
    for dtype in (torch.float32, torch.float64):
        logits = (torch.randn(2, 4, 5000, generator=g) * 200).to(dtype)
        for temperature in (1e-3, 0.05, 1.0, 30.0):
            _check_score(backend, _score_call(logits, temperature=temperature, top_k=32))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_score_empty_and_shapes(backend):
    for shape in [(0, 4, 9), (2, 0, 9), (0, 0, 9), (1, 3, 0, 9), (4, 9)]:
        _check_score(backend, _score_call(torch.randn(shape)))
    out = _check_score(backend, _score_call(torch.randn(2, 0, 9)))
    assert out.commit_pos.tolist() == [-1, -1]
    # more leading dims, T = 0 and T > 0
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 4, 50, generator=g)
    for temperature in (0.0, 1.0):
        _check_score(backend, _score_call(logits, temperature=temperature, top_k=3))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
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
        _check_score(backend, _score_call(logits, masked=masked, rows=rows, block_start=block_start, steps=steps,
                                          temperature=temperature, confidence="margin", top_k=7))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_score_seeds_and_row_ids(backend):
    """Noise words for extreme seeds and ids (only the low 32 bits are used, two's complement)."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 4, 300, generator=g, dtype=torch.float64)
    rows = torch.tensor([-1, 2**40 + 3, 0])
    block_start = torch.tensor([0, 2**33, 7])
    steps = torch.tensor([2**32 - 1, 5, 0])
    for seed in (0, 1, 2**32, 2**63 - 1):
        _check_score(backend, _score_call(logits, seed=seed, rows=rows, block_start=block_start, steps=steps,
                                          temperature=1.0))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_score_large_vocabulary(backend):
    """A decoder-sized row, where the Gumbel pruning matters."""
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(1, 3, 151936, generator=g) * 2.5
    for temperature in (0.0, 1.0):
        _check_score(backend, _score_call(logits, temperature=temperature, top_k=32))


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_score_threads(backend):
    """Rows are spread over threads (at::parallel_for): results do not depend on the thread count."""
    g = torch.Generator().manual_seed(8)
    logits = torch.randn(4, 16, 3000, generator=g)
    args = _score_call(logits, temperature=0.8, confidence="neg_entropy")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = backend.run("score", *args)
        torch.set_num_threads(2)
        two = backend.run("score", *args)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, two):
        assert torch.equal(a, b)
    _check_score(backend, args)
