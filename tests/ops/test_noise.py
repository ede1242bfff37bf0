"""spot::noise_uniform and the coupled-noise reference (docs/noise.md): the contract against brute force (on the
reference, the oracle), then every other backend bit for bit against the reference."""

import math

import pytest
import torch
from torch.library import opcheck

import spot_kernels
from spot_kernels.reference import noise as ref_noise

import brute
from helpers import KERNEL_BACKENDS

# (seed, row, position, step, vocab id) -> u32 word, from the literal transcription of docs/noise.md in brute.py.
# Pinned here so every backend, now and later, is held to the same numbers.
KNOWN_WORDS = [
    ((0, 0, 0, 0, 0), 0x4C727AF3),
    ((1, 2, 3, 4, 5), 0x826A99FF),
    ((2**63 - 1, -1, 2**40 + 7, 0, 151935), 0x1C981A23),
    ((123456789012345, 7, -3, 31, -1), 0x4B366273),
    ((42, 0, 4096, 17, 32000), 0xB792018C),
]


def _t(*values):
    return torch.tensor(values, dtype=torch.int64)


@pytest.mark.parametrize("args,w", KNOWN_WORDS)
def test_known_answers(args, w):
    assert brute.word(*args) == w
    seed, row, pos, step, v = args
    u = spot_kernels.noise_uniform(seed, _t(row), _t(pos), _t(step), _t(v))
    assert u.dtype == torch.float32 and u.shape == (1,)
    assert u.item() == ((w >> 9) + 0.5) * 2.0**-23


def test_random_against_brute_force():
    g = torch.Generator().manual_seed(0)
    for seed in (0, 1, 2**32 - 1, 2**32, 2**62 + 12345, 2**63 - 1):
        # Values beyond 32 bits and negatives: only the low 32 bits count (two's complement).
        rows = torch.randint(-(2**40), 2**40, (3, 1, 1), generator=g)
        pos = torch.randint(-5, 2**33, (1, 4, 1), generator=g)
        steps = torch.randint(0, 64, (3, 4, 1), generator=g)
        vocab = torch.randint(-2, 200000, (1, 1, 5), generator=g)
        u = spot_kernels.noise_uniform(seed, rows, pos, steps, vocab)
        assert u.shape == (3, 4, 5)
        for i in range(3):
            for j in range(4):
                for k in range(5):
                    expected = brute.uniform(seed, rows[i, 0, 0].item(), pos[0, j, 0].item(),
                                             steps[i, j, 0].item(), vocab[0, 0, k].item())
                    assert u[i, j, k].item() == expected, (seed, i, j, k)


def test_low_32_bits_only():
    base = spot_kernels.noise_uniform(5, _t(3), _t(10), _t(2), torch.arange(8))
    shifted = spot_kernels.noise_uniform(5, _t(3 + 2**32), _t(10 - 2**33), _t(2 + 2**35), torch.arange(8) + 2**32)
    assert torch.equal(base, shifted)
    minus_one = spot_kernels.noise_uniform(5, _t(-1), _t(10), _t(2), torch.arange(8))
    assert torch.equal(minus_one, spot_kernels.noise_uniform(5, _t(2**32 - 1), _t(10), _t(2), torch.arange(8)))


def test_every_argument_matters():
    v = torch.arange(64)
    base = spot_kernels.noise_uniform(7, _t(1), _t(2), _t(3), v)
    for changed in (
        spot_kernels.noise_uniform(8, _t(1), _t(2), _t(3), v),
        spot_kernels.noise_uniform(7 + 2**32, _t(1), _t(2), _t(3), v),  # seed_hi
        spot_kernels.noise_uniform(7, _t(2), _t(2), _t(3), v),
        spot_kernels.noise_uniform(7, _t(1), _t(3), _t(3), v),
        spot_kernels.noise_uniform(7, _t(1), _t(2), _t(4), v),
    ):
        assert (changed != base).float().mean() > 0.9


def test_extreme_words_give_finite_gumbel():
    words = torch.tensor([0, 511, 512, 2**32 - 1], dtype=torch.int64)
    u = ref_noise.uniform_from_words(words)
    assert u.dtype == torch.float32
    assert u.tolist() == [2.0**-24, 2.0**-24, 3 * 2.0**-24, 1 - 2.0**-24]
    for dtype in (torch.float32, torch.float64):
        g = ref_noise.gumbel_from_words(words, dtype)
        assert g.dtype == dtype and torch.isfinite(g).all()
        assert g[0].item() == pytest.approx(-math.log(-math.log(2.0**-24)), rel=1e-6)


def test_mix_is_a_bijection_sample():
    x = torch.randperm(1 << 16, generator=torch.Generator().manual_seed(1)).to(torch.int64) * 65521
    x = x & 0xFFFFFFFF
    y = ref_noise.mix32(x)
    assert ((y >= 0) & (y < 2**32)).all()
    assert y.unique().numel() == x.unique().numel()
    assert [ref_noise.mix32_int(int(a)) for a in x[:50]] == y[:50].tolist()


def test_uniform_histogram():
    """20 equal bins over 2e5 draws: chi-square with 19 dof; 43.8 is the 0.001 quantile."""
    u = spot_kernels.noise_uniform(11, torch.arange(200)[:, None], _t(0), _t(0), torch.arange(1000)[None, :])
    counts = torch.histc(u.double(), bins=20, min=0.0, max=1.0)
    expected = u.numel() / 20
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 43.8
    assert abs(u.double().mean().item() - 0.5) < 0.003


def test_broadcast_and_empty():
    u = spot_kernels.noise_uniform(0, torch.zeros(2, 1, dtype=torch.int64), _t(1), _t(2), torch.arange(3))
    assert u.shape == (2, 3) and u.is_contiguous()
    assert torch.equal(u[0], u[1])
    empty = spot_kernels.noise_uniform(0, torch.zeros(0, 1, dtype=torch.int64), _t(1), _t(2), torch.arange(3))
    assert empty.shape == (0, 3)
    scalar = spot_kernels.noise_uniform(0, torch.tensor(0), torch.tensor(1), torch.tensor(2), torch.tensor(3))
    assert scalar.shape == () and scalar.item() == brute.uniform(0, 0, 1, 2, 3)


def test_opcheck():
    args = (3, torch.arange(4)[:, None], torch.arange(5)[None, :], _t(2), torch.arange(5)[None, :] * 7)
    opcheck(torch.ops.spot.noise_uniform.default, args, {"backend": "reference"})


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 2**63}, ValueError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"seed": True}, TypeError, "seed"),
        ({"rows": torch.zeros(3, dtype=torch.int32)}, TypeError, "rows.*int64"),
        ({"vocab_ids": torch.zeros(3)}, TypeError, "vocab_ids"),
        ({"positions": [1, 2]}, TypeError, "positions"),
        ({"steps": torch.zeros(4, dtype=torch.int64)}, ValueError, "broadcast"),
        ({"rows": torch.zeros(3, dtype=torch.int64, device="meta")}, ValueError, "rows is on meta.*one device"),
        ({"backend": "nope"}, ValueError, "backend"),
    ],
)
def test_bad_input(kwargs, error, match):
    args = {"seed": 0, "rows": torch.zeros(3, dtype=torch.int64), "positions": torch.zeros(3, dtype=torch.int64),
            "steps": torch.zeros(3, dtype=torch.int64), "vocab_ids": torch.arange(3)}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        spot_kernels.noise_uniform(**args)


# ------------------------------------------------------------------------------- backends against the reference

@pytest.mark.parametrize("backend", KERNEL_BACKENDS, indirect=True)
@pytest.mark.parametrize("seed", [0, 1, 2**32 + 5, 2**63 - 1])
def test_noise_uniforms_bit_for_bit(backend, seed):
    g = torch.Generator().manual_seed(seed % 1000)
    x = torch.randint(-2**40, 2**40, (4, 3, 2), generator=g).transpose(0, 2)  # non-contiguous, negative, > 32 bits
    cases = [
        (torch.arange(3)[:, None], torch.tensor(7), torch.tensor(1), torch.arange(50)),
        (x, x[:1], x[:, :1, :1] - 40, torch.arange(2)[:, None, None, None] * x),
        (torch.tensor(-1), torch.tensor(2**33), torch.tensor(0), torch.arange(0)),
    ]
    for args in cases:
        a, r = backend.both("noise_uniform", seed, *backend.to(*args))
        assert a.dtype == torch.float32 and a.shape == r.shape
        assert torch.equal(a, r)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS, indirect=True)
@pytest.mark.parametrize("shapes", [((3, 1), (1, 5), (), (5,)), ((2, 1, 1), (4, 1), (1,), (1, 1, 9)),
                                    ((0, 3), (3,), (), ())])
def test_noise_uniform_bit_exact(backend, shapes):
    g = torch.Generator().manual_seed(0)
    tensors = backend.to(*(torch.randint(-2**40, 2**40, s, generator=g) for s in shapes))
    for seed in (0, 1, 2**32 + 7, 2**63 - 1):
        got = backend.run("noise_uniform", seed, *tensors)
        assert got.dtype == torch.float32 and torch.equal(got, backend.ref("noise_uniform", seed, *tensors))
        assert torch.equal(got.cpu(), backend.ref("noise_uniform", seed, *[t.cpu() for t in tensors]))
    many = backend.to(torch.arange(2).view(2, 1, 1, 1, 1, 1, 1, 1, 1, 1), torch.arange(3), torch.tensor(4),
                      torch.arange(2).view(2, 1))  # 10 dimensions: the flat fallback
    assert torch.equal(backend.run("noise_uniform", 9, *many), backend.ref("noise_uniform", 9, *many))
    strided = backend.to(torch.arange(12).view(3, 4)[:, ::2], torch.arange(2), torch.tensor(1), torch.tensor(0))
    assert torch.equal(backend.run("noise_uniform", 4, *strided), backend.ref("noise_uniform", 4, *strided))


@pytest.mark.parametrize("backend", KERNEL_BACKENDS, indirect=True)
def test_noise_uniform_extreme_and_degenerate_shapes(backend):
    """Ids beyond 32 bits and negative, a 0-dim call, equal shapes, an empty batch and strided views."""
    g = torch.Generator().manual_seed(5)
    cases = [
        (torch.arange(3)[:, None], torch.tensor(7), torch.tensor(1), torch.arange(4)),
        (torch.randint(-2**62, 2**62, (2, 1, 1), generator=g), torch.randint(0, 2**40, (1, 3, 1), generator=g),
         torch.tensor([-1, 0, 2**32 + 5])[None, :, None], torch.arange(-3, 1000)),
        (torch.tensor(0), torch.tensor(0), torch.tensor(0), torch.tensor(0)),  # 0-dim
        (torch.arange(4), torch.arange(4), torch.arange(4), torch.arange(4)),
        (torch.zeros(0, 3, dtype=torch.int64), torch.tensor(1), torch.tensor(2), torch.arange(3)),  # empty
        (torch.arange(12).reshape(3, 4).t(), torch.tensor(1), torch.arange(6)[::2], torch.tensor(9)),  # strided
    ]
    for seed in (0, 5, 2**32 + 1, 2**63 - 1):
        for args in cases:
            out, ref = backend.both("noise_uniform", seed, *backend.to(*args))
            assert out.dtype == torch.float32 and out.shape == ref.shape and out.is_contiguous()
            assert torch.equal(out, ref)
