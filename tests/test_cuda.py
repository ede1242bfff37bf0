"""The CUDA C++ backend (csrc/cuda/*.cu): registration and argument checks on any machine, parity on a GPU.

Without a GPU (CI) this checks that the extension was built with CUDA, that every op has its private
`spot::_<op>_cuda` op with a CUDA kernel and the public schema minus `backend`, that "auto" would route CUDA tensors
to it, and that bad input raises the reference's errors: through the public op (the router validates first) and in
the C++ kernels themselves, reached on CPU tensors by redispatching to the CUDA key (their checks run before any
CUDA call). With a GPU the parity tests compare every kernel with the reference on the same device: identical
tokens, commit positions, top-K ids, children, accepted chains and masks; close probabilities and attention.
GPU tests are skipped, never passed, without a GPU.
"""

import math
import os
import shutil

import pytest
import torch

import spot_kernels
from spot_kernels import backends
from spot_kernels.schemas import SCHEMAS

from samples import sample_args

I64 = torch.int64
OPS = list(SCHEMAS)
CUDA_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
WITH_CUDA = bool(spot_kernels.HAS_C_EXTENSION and getattr(spot_kernels._C, "WITH_CUDA", 0))
ON_GPU = WITH_CUDA and torch.cuda.is_available()
gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU and the CUDA build of spot_kernels._C")


def _cuda_build_expected() -> bool:
    """setup.py builds CUDA when torch is a CUDA build, nvcc is found and SPOT_BUILD_CUDA != 0."""
    if os.environ.get("SPOT_BUILD_CUDA") == "0" or not torch.version.cuda:
        return False
    home = os.environ.get("CUDA_HOME")
    return bool(shutil.which("nvcc") or (home and os.path.isfile(os.path.join(home, "bin", "nvcc")))
                or os.path.isfile("/usr/local/cuda/bin/nvcc"))


def _private(op: str):
    return getattr(torch.ops.spot, f"_{op}_cuda")


def _private_schema_text(op: str) -> str:
    """The public schema without its trailing backend argument, renamed to _<op>_cuda."""
    public = SCHEMAS[op]
    assert public.count(', str backend="auto")') == 1, public
    return "_" + op + "_cuda" + public[len(op):].replace(', str backend="auto")', ")")


# ------------------------------------------------------------------------------------------ registration (CPU)

def test_extension_is_built_with_cuda():
    if os.environ.get("SPOT_NO_EXTENSION") == "1":
        pytest.skip("SPOT_NO_EXTENSION=1: the extension is deliberately not loaded")
    assert spot_kernels.HAS_C_EXTENSION, "spot_kernels._C did not load; rebuild with pip install -e ."
    if not _cuda_build_expected():
        pytest.skip("no CUDA toolchain or CUDA torch here: setup.py builds the CPU-only extension")
    assert spot_kernels._C.WITH_CUDA == 1, "nvcc and a CUDA torch are present but _C was built without CUDA"


needs_cuda_build = pytest.mark.skipif(not WITH_CUDA, reason="spot_kernels._C was built without CUDA")


@needs_cuda_build
@pytest.mark.parametrize("op", OPS)
def test_every_op_has_a_cuda_kernel(op):
    name = f"spot::_{op}_cuda"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"), name
    # CUDA only: CPU tensors must reach the router's BackendUnavailable, never a kernel.
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"), name


@needs_cuda_build
@pytest.mark.parametrize("op", OPS)
def test_private_schema_is_the_public_one_without_backend(op):
    registered = _private(op).default._schema
    expected = torch._C.parse_schema("spot::" + _private_schema_text(op))
    assert str(registered) == str(expected)
    public = getattr(torch.ops.spot, op).default._schema
    assert [a.name for a in registered.arguments] == [a.name for a in public.arguments][:-1]
    assert [str(r.type) for r in registered.returns] == [str(r.type) for r in public.returns]


@needs_cuda_build
@pytest.mark.parametrize("op", OPS)
def test_auto_routes_cuda_tensors_to_the_cuda_kernel(op, monkeypatch):
    monkeypatch.delenv("SPOT_BACKEND", raising=False)
    cuda = torch.device("cuda")
    assert backends.resolve(op, cuda, "auto") is _private(op)
    assert backends.resolve(op, cuda, "cuda") is _private(op)
    assert spot_kernels.available_backends(op, "cuda")[0] == "cuda"
    assert "cuda" not in spot_kernels.available_backends(op, "cpu")


@pytest.mark.parametrize("op", OPS)
def test_forcing_cuda_on_cpu_tensors_is_backend_unavailable(op, monkeypatch):
    with pytest.raises(spot_kernels.BackendUnavailable, match="cuda backend needs CUDA tensors"):
        getattr(torch.ops.spot, op)(*sample_args(op), backend="cuda")
    monkeypatch.setenv("SPOT_BACKEND", "cuda")
    with pytest.raises(spot_kernels.BackendUnavailable, match="requested by SPOT_BACKEND"):
        getattr(torch.ops.spot, op)(*sample_args(op))


# ----------------------------------------------------------------------------------- bad input (CPU + kernels)
# (op, position of the argument to replace, bad value, error type, message pattern). Each case must raise the same
# error from the public op whatever the backend (the router checks first), and from the C++ kernel itself.

def _t(*values):
    return torch.tensor(values)


BAD_INPUT = [
    ("noise_uniform", 1, torch.zeros(3, dtype=torch.int32), TypeError, "rows must have dtype int64"),
    ("noise_uniform", 4, torch.zeros(2, 4, dtype=I64), ValueError, "must broadcast"),
    ("noise_uniform", 0, -1, ValueError, "seed must lie in"),
    ("score", 0, torch.zeros(2, 3, 11, dtype=I64), TypeError, "logits must have dtype"),
    ("score", 0, torch.zeros(11), ValueError, "logits must have at least 2 dimensions"),
    ("score", 0, torch.zeros(2, 3, 0), ValueError, "V >= 1"),
    ("score", 1, torch.ones(2, 3), TypeError, "masked must have dtype bool"),
    ("score", 1, torch.ones(2, 4, dtype=torch.bool), ValueError, "masked must have shape"),
    ("score", 3, torch.zeros(3, dtype=I64), ValueError, "rows must have shape"),
    ("score", 4, torch.zeros(2, dtype=torch.int32), TypeError, "block_start must have dtype int64"),
    ("score", 5, torch.zeros(2, 1, dtype=I64), ValueError, "steps must have shape"),
    ("score", 6, -0.5, ValueError, "temperature must be finite and >= 0"),
    ("score", 6, math.inf, ValueError, "temperature must be finite and >= 0"),
    ("score", 7, "entropy", ValueError, "confidence must be one of"),
    ("score", 8, 0, ValueError, "top_k must lie in"),
    ("score", 2, -3, ValueError, "seed must lie in"),
    ("select_children", 0, torch.zeros(2, 4, dtype=torch.float16), TypeError, "position_logits must have dtype"),
    ("select_children", 0, torch.zeros(2, 4, 1), ValueError, "position_logits must have 2 dimensions"),
    ("select_children", 1, torch.ones(2, 5, dtype=torch.bool), ValueError, "masked must have shape"),
    ("select_children", 2, torch.zeros(2, dtype=torch.float64), TypeError, "path_logprob must have dtype float32"),
    ("select_children", 3, torch.zeros(2, 3, 3), ValueError, r"stale_topk_probs must have shape \[F, B, K\]"),
    ("select_children", 4, torch.zeros(2, 4, 2, dtype=I64), ValueError, "stale_topk_ids must have shape"),
    ("select_children", 6, torch.zeros(3, dtype=I64), ValueError, "rows must have shape"),
    ("select_children", 9, -1.0, ValueError, "temperature must be finite and >= 0"),
    ("select_children", 10, 0, ValueError, "k must lie in"),
    ("verify_tree", 0, torch.zeros(1, 0, dtype=I64), ValueError, "N >= 1"),
    ("verify_tree", 0, torch.zeros(1, 3, dtype=torch.int32), TypeError, "parents must have dtype int64"),
    ("verify_tree", 1, torch.zeros(1, 2, dtype=I64), ValueError, "draft_pos must have shape"),
    ("verify_tree", 4, torch.zeros(1, 3), TypeError, "target_tokens must have dtype int64"),
    ("verify_tree", 5, torch.zeros(2, 4, dtype=I64), ValueError, r"block must have shape \[b, B\]"),
    ("tree_mask", 0, torch.zeros(2, 1, dtype=I64), ValueError, "key_start must have 1 dimensions"),
    ("tree_mask", 0, torch.zeros(2, dtype=torch.int32), TypeError, "key_start must have dtype int64"),
    ("tree_mask", 1, -1, ValueError, "prefix_len must lie in"),
    ("tree_mask", 2, 6, ValueError, "num_new must be <= prefix_len"),
    ("tree_mask", 3, -2, ValueError, "num_nodes must lie in"),
    ("tree_mask", 4, 0, ValueError, "block_size must lie in"),
    ("tree_mask_additive", 5, torch.int32, TypeError, "dtype must be a floating"),
    ("tree_mask_packed", 4, 0, ValueError, "block_size must lie in"),
    ("tree_position_ids", 2, 9, ValueError, "num_new must be <= prefix_len"),
    ("tree_attention", 0, torch.zeros(2, 4, 3, 2), ValueError, "q must have 5 dimensions"),
    ("tree_attention", 0, torch.zeros(2, 4, 2, 3, 4, dtype=I64), TypeError, "q must have dtype"),
    ("tree_attention", 1, torch.zeros(2, 3, 5, 4), ValueError, "multiple of the key/value heads"),
    ("tree_attention", 2, torch.zeros(2, 2, 4, 4), ValueError, "v_prefix must have shape"),
    ("tree_attention", 3, torch.zeros(2, 2, 1, 3, 4), ValueError, "k_nodes must have shape"),
    ("tree_attention", 5, torch.zeros(3, dtype=I64), ValueError, "key_start must have shape"),
    ("tree_attention", 6, 0.0, ValueError, "scale must be finite and > 0"),
]


def _bad_args(op, index, value):
    args = list(sample_args(op))
    if op == "tree_attention" and len(args) < 7:
        args.append(None)
    args[index] = value
    return tuple(args)


def _case_id(case):
    op, index, _, error, _ = case
    return f"{op}-arg{index}-{error.__name__}"


def test_bad_input_table_covers_every_op():
    assert {case[0] for case in BAD_INPUT} == set(OPS)


@pytest.mark.parametrize("case", BAD_INPUT, ids=_case_id)
@pytest.mark.parametrize("backend", ["cuda", "reference"])
def test_bad_input_through_the_public_op(case, backend):
    op, index, value, error, match = case
    with pytest.raises(error, match=match):
        getattr(torch.ops.spot, op)(*_bad_args(op, index, value), backend=backend)


@needs_cuda_build
@pytest.mark.parametrize("case", BAD_INPUT, ids=_case_id)
def test_bad_input_in_the_cuda_kernel(case):
    """The C++ checks themselves: run the CUDA kernel on CPU tensors (its checks come before any CUDA call)."""
    op, index, value, error, match = case
    with pytest.raises(error, match=match):
        _private(op).default.redispatch(CUDA_KEY, *_bad_args(op, index, value))


@needs_cuda_build
@pytest.mark.parametrize("op", OPS)
def test_cuda_kernel_rejects_cpu_tensors(op):
    with pytest.raises(ValueError, match=r"\(cuda backend\): \w+ must be a CUDA tensor, got cpu"):
        _private(op).default.redispatch(CUDA_KEY, *sample_args(op))


# ================================================================================================= parity
# Each parity test runs on two targets: "gpu" (the compiled kernels on CUDA tensors; skipped without a GPU) and
# "emulation" (the same kernel sources compiled with g++ under -DSPOT_EMULATE, csrc/cuda/emulate.h, run by a CPU
# SIMT emulation on CPU tensors; by default only where no GPU is present, SPOT_TEST_CUDA_EMULATION=1 forces it and
# =0 skips it). Both compare with the reference on the same device. The emulation checks the kernels' logic
# (indexing, reductions, merges, launch sequences), not speed, registers or the GPU memory model.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("prob", "raw_prob", "margin", "neg_entropy")


@pytest.fixture(scope="session")
def emulation():
    mode = os.environ.get("SPOT_TEST_CUDA_EMULATION", "")
    if mode == "0":
        pytest.skip("SPOT_TEST_CUDA_EMULATION=0")
    if ON_GPU and mode != "1":
        pytest.skip("the real kernels run on this GPU (SPOT_TEST_CUDA_EMULATION=1 runs the emulation too)")
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler for the emulation build")
    from torch.utils import cpp_extension

    build = os.path.join(ROOT, "build", "cuda_emulation")
    os.makedirs(build, exist_ok=True)
    sources = []
    for family in ("noise", "score", "select_children", "tree_attention", "verify_tree"):
        wrapper = os.path.join(build, f"emu_{family}.cpp")
        text = f'#include "{os.path.join(ROOT, "csrc", "cuda", family + ".cu")}"\n'
        if not os.path.exists(wrapper) or open(wrapper).read() != text:
            with open(wrapper, "w") as f:
                f.write(text)
        sources.append(wrapper)
    # Headers are not tracked by the build's dependency check: hash them into the extension name.
    import hashlib
    digest = hashlib.sha1()
    for name in sorted(os.listdir(os.path.join(ROOT, "csrc", "cuda"))):
        with open(os.path.join(ROOT, "csrc", "cuda", name), "rb") as f:
            digest.update(f.read())
    cpp_extension.load(name=f"spot_cuda_emulation_{digest.hexdigest()[:12]}", sources=sources,
                       extra_cflags=["-DSPOT_EMULATE", "-O2", "-Wno-unknown-pragmas"], build_directory=build,
                       is_python_module=False, verbose=False)
    return torch.ops.spot_emu


class Target:
    def __init__(self, device, ops):
        self.device = torch.device(device)
        self.ops = ops

    def cuda(self, op, *args):
        """The CUDA kernel of `op` (schema arguments without backend)."""
        if self.ops is None:
            return getattr(torch.ops.spot, op)(*args, backend="cuda")
        return getattr(self.ops, f"_{op}_cuda")(*args)

    @staticmethod
    def ref(op, *args):
        return getattr(torch.ops.spot, op)(*args, backend="reference")

    def to(self, *values):
        return tuple(v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values)


@pytest.fixture(params=["gpu", "emulation"])
def target(request):
    if request.param == "gpu":
        if not ON_GPU:
            pytest.skip("needs a CUDA GPU and the CUDA build of spot_kernels._C")
        return Target("cuda", None)
    return Target("cpu", request.getfixturevalue("emulation"))


def _score_args(t, lead, block, vocab, dtype, temperature, kind, top_k, seed=0, scale=3.0, mask_p=0.7):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(*lead, block, vocab, generator=g, dtype=torch.float64) * scale).to(dtype)
    masked = torch.rand(*lead, block, generator=g) < mask_p
    rows = torch.randint(0, 1000, lead, generator=g)
    block_start = torch.randint(0, 4096, lead, generator=g)
    steps = torch.randint(0, block + 1, lead, generator=g)
    return t.to(logits, masked, 12345 + seed, rows, block_start, steps, temperature, kind, top_k)


def _assert_score_equal(got, want):
    tokens, conf, probs, ids, commit = got
    w_tokens, w_conf, w_probs, w_ids, w_commit = want
    assert [(x.shape, x.dtype) for x in got] == [(x.shape, x.dtype) for x in want]
    assert all(x.is_contiguous() for x in got)
    assert torch.equal(tokens, w_tokens)
    assert torch.equal(ids, w_ids)
    assert torch.equal(commit, w_commit)
    assert torch.equal(conf.isnan(), w_conf.isnan())
    tol = dict(rtol=1e-12, atol=1e-14) if conf.dtype == torch.float64 else dict(rtol=2e-5, atol=2e-6)
    torch.testing.assert_close(conf, w_conf, equal_nan=True, **tol)
    torch.testing.assert_close(probs, w_probs, **tol)


def _check_score(t, args):
    _assert_score_equal(t.cuda("score", *args), t.ref("score", *args))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_score_parity(target, dtype, temperature, kind):
    _check_score(target, _score_args(target, (3, 2), 8, 300, dtype, temperature, kind, 32, seed=int(temperature * 10)))


@pytest.mark.parametrize("vocab,top_k", [(1, 1), (1, 4), (7, 32), (33, 2), (1000, 1), (1000, 33), (1000, 100),
                                         (4099, 64), (32000 + 13, 32)])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_score_vocab_and_top_k_sizes(target, vocab, top_k, temperature):
    """V not a multiple of any tile, K > 32 (several rounds), K > V (padding), V = 1."""
    for kind in ("prob", "margin"):
        _check_score(target, _score_args(target, (2,), 3, vocab, torch.float32, temperature, kind, top_k,
                                         seed=vocab % 97))


@pytest.mark.parametrize("lead,block,vocab", [((1,), 2, 151936), ((1, 1), 4, 126464), ((2, 40), 1, 3000),
                                              ((64,), 16, 500)])
def test_score_few_and_many_rows(target, lead, block, vocab):
    """Few rows with a large V split the vocabulary across blocks; many rows do not."""
    _check_score(target, _score_args(target, lead, block, vocab, torch.bfloat16, 1.0, "prob", 32, seed=len(lead)))


@pytest.mark.parametrize("temperature", [0.0, 0.5])
@pytest.mark.parametrize("kind", KINDS)
def test_score_invalid_rows_and_ties(target, temperature, kind):
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
        args = target.to(logits.to(dtype), torch.ones(1, 8, dtype=torch.bool), 3, z, z, z, temperature, kind, 6)
        got = target.cuda("score", *args)
        _assert_score_equal(got, target.ref("score", *args))
        assert got[0][0, :3].tolist() == [-1, -1, -1]
        assert (got[3][0, :3] == -1).all() and (got[2][0, :3] == 0).all()
        masked = torch.zeros(1, 8, dtype=torch.bool)
        masked[0, :3] = True  # only invalid rows masked: no commit
        args = target.to(logits.to(dtype), masked, 3, z, z, z, temperature, kind, 6)
        assert target.cuda("score", *args)[4].tolist() == [-1]


def test_score_exact_ties_across_rounds_and_splits(target):
    """Many exactly tied logits (rounded, bf16): top-K ties go to the lowest ids in every round and split."""
    g = torch.Generator().manual_seed(21)
    z = torch.zeros(1, dtype=I64)
    for vocab, top_k in [(200, 50), (20000, 80), (3000, 32)]:
        logits = torch.randn(1, 3, vocab, generator=g).round().to(torch.bfloat16)
        args = target.to(logits, torch.ones(1, 3, dtype=torch.bool), 0, z, z, z, 0.5, "prob", top_k)
        _check_score(target, args)


def test_score_empty_no_lead_and_non_contiguous(target):
    for shape in [(0, 4, 10), (2, 0, 10), (3, 0, 2, 5), (4, 9)]:
        lead = shape[:-2]
        z = torch.zeros(lead, dtype=I64)
        args = target.to(torch.randn(shape), torch.ones(shape[:-1], dtype=torch.bool), 0, z, z + 2, z, 1.0, "prob",
                         3)
        got, want = target.cuda("score", *args), target.ref("score", *args)
        _assert_score_equal(got, want)
    base = torch.randn(2, 50, 6)
    z2 = torch.zeros(2, dtype=I64)
    args = target.to(base, torch.ones(2, 6, dtype=torch.bool), 5, z2, z2 + 8, torch.tensor(2))
    logits, masked, seed, rows, block_start, step = args
    args = (logits.transpose(1, 2), masked, seed, rows, block_start, step.expand(2), 0.8, "neg_entropy", 4)
    _check_score(target, args)


def test_score_matches_the_float64_reference_on_cpu(target):
    args = _score_args(target, (2, 3), 16, 500, torch.float64, 0.7, "prob", 8, seed=3)
    got = target.cuda("score", *args)
    want = Target.ref("score", *(a.cpu() if isinstance(a, torch.Tensor) else a for a in args))
    for a, b in zip(got, want):
        if a.dtype.is_floating_point:
            torch.testing.assert_close(a.cpu(), b, rtol=1e-12, atol=1e-14)
        else:
            assert torch.equal(a.cpu(), b)


@pytest.mark.parametrize("shapes", [((3, 1), (1, 5), (), (5,)), ((2, 1, 1), (4, 1), (1,), (1, 1, 9)),
                                    ((0, 3), (3,), (), ())])
def test_noise_uniform_bit_exact(target, shapes):
    g = torch.Generator().manual_seed(0)
    tensors = target.to(*(torch.randint(-2**40, 2**40, s, generator=g) for s in shapes))
    for seed in (0, 1, 2**32 + 7, 2**63 - 1):
        got = target.cuda("noise_uniform", seed, *tensors)
        assert got.dtype == torch.float32 and torch.equal(got, target.ref("noise_uniform", seed, *tensors))
        assert torch.equal(got.cpu(), Target.ref("noise_uniform", seed, *[t.cpu() for t in tensors]))
    many = target.to(torch.arange(2).view(2, 1, 1, 1, 1, 1, 1, 1, 1, 1), torch.arange(3), torch.tensor(4),
                     torch.arange(2).view(2, 1))  # 10 dimensions: the flat fallback
    assert torch.equal(target.cuda("noise_uniform", 9, *many), target.ref("noise_uniform", 9, *many))
    strided = target.to(torch.arange(12).view(3, 4)[:, ::2], torch.arange(2), torch.tensor(1), torch.tensor(0))
    assert torch.equal(target.cuda("noise_uniform", 4, *strided), target.ref("noise_uniform", 4, *strided))


def _children_args(t, frontier, block, top, k, pdt, qdt, temperature, seed=0, expand=False):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(frontier, block, generator=g, dtype=torch.float64).to(pdt)
    if frontier and block > 3:
        logits[0, 1] = math.nan
        logits[0, 2] = -math.inf
        logits[-1, 0] = logits[-1, 3]  # an exact tie
    masked = torch.rand(frontier, block, generator=g) < 0.7
    path = torch.randn(frontier, generator=g, dtype=torch.float64).to(pdt)
    probs = torch.softmax(torch.randn(frontier, block, top, generator=g, dtype=torch.float64), -1).to(qdt)
    ids = torch.randint(0, 32000, (frontier, block, top), generator=g)
    if top > 1:
        ids[..., -1] = -1
        zero = torch.rand(frontier, block, generator=g) < 0.2
        probs[..., 0] = torch.where(zero, 0.0, probs[..., 0].double()).to(qdt)
    if expand:
        probs, ids = probs[:, :, :1].expand(frontier, block, top), ids[:, :1, :].expand(frontier, block, top)
    rows, bs, steps = (torch.randint(0, 100, (frontier,), generator=g) for _ in range(3))
    return t.to(logits, masked, path, probs, ids, 77 + seed, rows, bs, steps, temperature, k)


@pytest.mark.parametrize("pdt,qdt", [(torch.float32, torch.float32), (torch.float64, torch.float64),
                                     (torch.float32, torch.float64), (torch.float64, torch.float32)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("frontier,block,top,k", [(5, 16, 32, 4), (3, 32, 8, 40), (2, 40, 0, 3), (0, 8, 4, 2),
                                                  (7, 70, 5, 6)])
def test_select_children_parity(target, frontier, block, top, k, pdt, qdt, temperature):
    for expand in (False, True):
        args = _children_args(target, frontier, block, top, k, pdt, qdt, temperature, seed=block, expand=expand)
        got, want = target.cuda("select_children", *args), target.ref("select_children", *args)
        assert torch.equal(got[0], want[0]) and torch.equal(got[2], want[2])
        assert got[1].dtype == want[1].dtype
        tol = 2e-6 if pdt == torch.float32 else 1e-12
        torch.testing.assert_close(got[1], want[1], rtol=tol, atol=tol)


def test_select_children_infinite_logits(target):
    logits = torch.tensor([[math.inf, 0.0, math.inf, 1.0], [-math.inf, -math.inf, math.nan, -math.inf]])
    z = torch.zeros(2, dtype=I64)
    args = target.to(logits, torch.ones(2, 4, dtype=torch.bool), torch.zeros(2), torch.full((2, 4, 2), 0.5),
                     torch.ones(2, 4, 2, dtype=I64), 0, z, z, z, 1.0, 5)
    got, want = target.cuda("select_children", *args), target.ref("select_children", *args)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def _random_tree(t, batch, nodes, block, seed, hit=0.6):
    g = torch.Generator().manual_seed(seed)
    node = torch.arange(nodes)
    parents = (torch.rand(batch, nodes, generator=g) * node).long().where(node > 0, -1)
    parents = torch.where(torch.rand(batch, nodes, generator=g) < 0.05, -1, parents)  # some inactive nodes
    parents[:, 0] = -1
    target_pos = torch.randint(-1, block, (batch, nodes), generator=g)
    target_tok = torch.randint(0, 50, (batch, nodes), generator=g)
    parent_pos = target_pos.gather(1, parents.clamp(min=0))
    hits = (torch.rand(batch, nodes, generator=g) < hit) & (parent_pos >= 0)
    draft_pos = torch.where(hits, parent_pos, (parent_pos + 1) % block)  # always a valid block position
    draft_tok = target_tok.gather(1, parents.clamp(min=0))
    block_state = torch.randint(0, 50, (batch, block), generator=g)
    return t.to(parents, draft_pos, draft_tok, target_pos, target_tok, block_state)


@pytest.mark.parametrize("batch,nodes,block", [(4, 1, 8), (8, 16, 32), (6, 64, 32), (2, 1000, 64), (1, 3000, 16),
                                               (0, 5, 4)])
def test_verify_tree_parity(target, batch, nodes, block):
    for seed in range(3):
        args = _random_tree(target, batch, nodes, block, seed, hit=0.95 if seed == 0 else 0.6)
        got, want = target.cuda("verify_tree", *args), target.ref("verify_tree", *args)
        for a, b in zip(got, want):
            assert torch.equal(a, b)


def test_verify_tree_chain_fully_accepted(target):
    n, block = 12, 16
    parents = torch.arange(-1, n - 1)[None]
    target_pos = torch.arange(n)[None] % block
    target_tok = torch.arange(n)[None] + 100
    draft_pos = torch.cat([torch.zeros(1, 1, dtype=I64), target_pos[:, :-1]], 1)
    draft_tok = torch.cat([torch.zeros(1, 1, dtype=I64), target_tok[:, :-1]], 1)
    args = target.to(parents, draft_pos, draft_tok, target_pos, target_tok, torch.zeros(1, block, dtype=I64))
    got = target.cuda("verify_tree", *args)
    assert got[2].tolist() == [n] and got[4].tolist() == [n - 1]
    for a, b in zip(got, target.ref("verify_tree", *args)):
        assert torch.equal(a, b)


TREE_CASES = [(torch.tensor([0, 2, 5]), 5, 2, 3, 4), (torch.tensor([0]), 0, 0, 2, 3),
              (torch.tensor([1, 0]), 7, 7, 0, 1), (torch.tensor([3, 0, 11, 2]), 11, 3, 5, 7),
              (torch.zeros(0, dtype=I64), 4, 1, 2, 2), (torch.tensor([0, 100]), 300, 16, 9, 32)]


@pytest.mark.parametrize("case", range(len(TREE_CASES)))
def test_tree_masks_parity(target, case):
    key_start, *sizes = TREE_CASES[case]
    (key_start,) = target.to(key_start)
    for op in ("tree_mask", "tree_mask_packed", "tree_position_ids"):
        got, want = target.cuda(op, key_start, *sizes), target.ref(op, key_start, *sizes)
        assert got.dtype == want.dtype and torch.equal(got, want), op
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        got = target.cuda("tree_mask_additive", key_start, *sizes, dtype)
        want = target.ref("tree_mask_additive", key_start, *sizes, dtype)
        assert got.dtype == dtype and torch.equal(got, want), dtype


def _attention_args(t, b, hq, hkv, n, block, prefix, dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)

    key_start = torch.tensor([(5 * r) % (prefix + 1) for r in range(b)], dtype=I64)
    if b > 1:
        key_start[-1] = prefix  # a row whose prefix is all padding
    return t.to(rnd(b, hq, n, block, dim), rnd(b, hkv, prefix, dim), rnd(b, hkv, prefix, dim),
                rnd(b, hkv, n, block, dim), rnd(b, hkv, n, block, dim), key_start)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 4, 2, 3, 5, 37, 8), (1, 4, 2, 2, 32, 70, 64), (2, 4, 4, 2, 16, 17, 40),
                                   (1, 2, 1, 3, 4, 0, 128), (1, 2, 1, 2, 8, 20, 256), (0, 2, 1, 2, 3, 4, 8),
                                   (2, 2, 1, 0, 3, 4, 8)],
                         ids=lambda s: "b{}-hq{}-hkv{}-N{}-B{}-P{}-D{}".format(*s))
def test_tree_attention_parity(target, shape, dtype):
    args = _attention_args(target, *shape, dtype, seed=sum(shape))
    for scale in (None, 0.3):
        got = target.cuda("tree_attention", *args, scale)
        want = target.ref("tree_attention", *args, scale)
        assert got.dtype == dtype and got.shape == want.shape and got.is_contiguous()
        tol = {torch.float64: 1e-10, torch.float32: 2e-5}.get(dtype, 2e-2)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


# ===================================================================================================== GPU only

@gpu
def test_bad_input_on_gpu_reaches_the_kernel_checks():
    logits = torch.zeros(2, 3, 5, device="cuda")
    z = torch.zeros(2, dtype=I64, device="cuda")
    with pytest.raises(TypeError, match="masked must have dtype bool"):
        torch.ops.spot._score_cuda(logits, torch.ones(2, 3, device="cuda"), 0, z, z, z, 1.0)
    with pytest.raises(ValueError, match=r"rows must be a CUDA tensor, got cpu"):
        torch.ops.spot._score_cuda(logits, torch.ones(2, 3, dtype=torch.bool, device="cuda"), 0, z.cpu(), z, z, 1.0)
    with pytest.raises(ValueError, match="k must lie in"):
        args = _children_args(Target("cuda", None), 2, 4, 3, 1, torch.float32, torch.float32, 1.0)
        spot_kernels.select_children(*args[:10], 0, backend="cuda")


@gpu
def test_auto_backend_on_gpu_is_the_cuda_kernel(monkeypatch):
    monkeypatch.delenv("SPOT_BACKEND", raising=False)
    t = Target("cuda", None)
    args = _score_args(t, (2, 3), 8, 100, torch.float32, 0.7, "prob", 4)
    _assert_score_equal(spot_kernels.score(*args), t.cuda("score", *args))


@gpu
def test_cuda_graph_capture_of_score_and_verify():
    """score + verify_tree are capturable (no host sync, no sync allocation) and replay to the eager results."""
    t = Target("cuda", None)
    logits, masked, seed, rows, block_start, steps, temperature, kind, top_k = _score_args(
        t, (1, 8), 16, 5000, torch.bfloat16, 0.8, "prob", 32, seed=9)
    parents, draft_pos, draft_tok, _, _, block_state = _random_tree(t, 1, 8, 16, seed=4)

    def step():
        out = t.cuda("score", logits, masked, seed, rows, block_start, steps, temperature, kind, top_k)
        target_pos = out[4]
        target_tok = out[0].gather(-1, target_pos.clamp(min=0)[..., None])[..., 0]
        return out + t.cuda("verify_tree", parents, draft_pos, draft_tok, target_pos, target_tok, block_state)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm-up outside the capture
        eager = [x.clone() for x in step()]
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, eager):
        assert torch.equal(a, b)
    logits.mul_(0.5)  # new inputs in the same buffers: the replay follows them
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, step()):
        assert torch.equal(a, b)
