"""The C++ CPU backend (csrc/cpu/*.cpp, backend="cpu") against the reference, on the same inputs.

Every parity test takes the backend under test from BACKENDS and compares `backend=<name>` with
`backend="reference"`: identical tokens, top-K ids, commit positions, children, accepted chains and noise words;
probabilities and log-probabilities within float rounding. The reference's softmax sums V float32 terms in float32;
the kernel sums chunks in double, so most of the difference is the reference's own rounding: over float16 / bfloat16 /
float32 logits, V up to 151,936 and logit scales up to 10, the largest measured |p_cpu - p_ref| was 1.4e-5 (2.3e-5
relative, probabilities >= 1e-6; the kernel's error against a float64 softmax stayed below 7e-7 relative) and
2.6e-14 for float64 (neg_entropy: 5.9e-5 and 2.8e-14 absolute). PROB_TOL covers the smaller shapes tested here.
"""

import pytest
import torch

import spot_kernels
from spot_kernels import backends
from spot_kernels.ops import FAMILIES

I64 = torch.int64

HAS_CPU = spot_kernels.HAS_C_EXTENSION and hasattr(torch.ops.spot, "_score_cpu")
pytestmark = pytest.mark.skipif(not HAS_CPU, reason="spot_kernels._C (with csrc/cpu) is not built or not loaded")
BACKENDS = ["cpu"]

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
