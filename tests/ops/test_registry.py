"""Op registration and the build: schemas defined once (in Python), the compiled extension and its CUDA kernels,
fake impls, argument errors from every entry point, backend resolution, the extension-free mode, torch.compile,
CUDA graphs, and decoding that is token-identical whatever the backend.

GPU tests are skipped, never passed, without a GPU."""

import itertools
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.library import opcheck

import spot_kernels
from spot_kernels import backends, checks, extension, registry
from spot_kernels.ops import FAMILIES, SCHEMAS

from helpers import (CPU_OPS, I64, ON_GPU, WITH_CPU, WITH_CUDA, capture, children_inputs, gpu_only, needs_cpu_build,
                     random_trees, score_inputs)
from samples import sample_args

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPS = list(SCHEMAS)
PUBLIC_OPS = OPS + ["tree_mask_mod"]
# Ops with a C++ CPU kernel (csrc/cpu/), which "auto" takes for CPU tensors when the extension is loaded.
CPU_KERNEL_OPS = set(CPU_OPS) if WITH_CPU else set()
CUDA_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
needs_cuda_build = pytest.mark.skipif(not WITH_CUDA, reason="spot_kernels._C was built without CUDA")
gpu = pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU and the CUDA build of spot_kernels._C")


def _python(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env}
    full_env.pop("SPOT_BACKEND", None)
    full_env.pop("TRITON_INTERPRET", None)  # set by conftest.py when there is no GPU
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, cwd=str(ROOT / "tests"), timeout=120)


def _private(op: str):
    return getattr(torch.ops.spot, f"_{op}_cuda")


# Families with no CUDA C++ kernel (on CUDA tensors "auto" would take their Triton kernel, backends._AUTO_ORDER):
# none today, every family has its csrc/cuda/<family>.cu.
WITHOUT_CUDA_KERNEL: set[str] = set()
CUDA_OPS = [op for op in OPS if FAMILIES[op] not in WITHOUT_CUDA_KERNEL]  # the ops csrc/cuda/ has a kernel for


def _private_schema_text(op: str) -> str:
    """The public schema without its trailing backend argument, renamed to _<op>_cuda."""
    public = SCHEMAS[op]
    assert public.count(', str backend="auto")') == 1, public
    return "_" + op + "_cuda" + public[len(op):].replace(', str backend="auto")', ")")


def test_schema_table_covers_every_op():
    assert set(SCHEMAS) == set(FAMILIES)
    for op, schema in SCHEMAS.items():
        parsed = torch._C.parse_schema(f"spot::{schema}")
        assert parsed.name == f"spot::{op}"
        assert parsed.arguments[-1].name == "backend" and parsed.arguments[-1].default_value == "auto"


def _tracked_sources() -> dict[str, str]:
    files = subprocess.run(["git", "ls-files", "*.py", "*.cpp", "*.cu", "*.cuh", "*.h"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    return {f: (ROOT / f).read_text() for f in files if (ROOT / f).is_file()}


def _registered_spot_ops() -> list[str]:
    return sorted(name.split("::", 1)[1] for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("spot::"))


def test_each_schema_is_written_once_in_the_source_tree():
    """Every op of torch.ops.spot, public or private: its schema text (name, "(", first argument) appears in exactly
    one tracked source file, once: the public one in spot_kernels/ops/<family>.py; a private `_<op>_cuda` nowhere,
    as it is derived from the public one (registry.private_schema). So C++ defines no schema."""
    sources = _tracked_sources()
    registered = _registered_spot_ops()
    assert set(OPS) <= set(registered)
    for name in registered:
        schema = getattr(torch.ops.spot, name).default._schema
        first = schema.arguments[0]
        text = f"{name}({first.real_type} {first.name}"
        where = {f: src.count(text) for f, src in sources.items() if text in src}
        private = re.fullmatch(r"_(\w+)_(" + "|".join(backends.EXTENSION_BACKENDS) + ")", name)
        if private:
            assert private.group(1) in SCHEMAS, name
            assert where == {}, f"{name}: derived from the public schema, but written in {where}"
        else:
            assert where == {f"spot_kernels/ops/{FAMILIES[name]}.py": 1}, f"{name}: written in {where}"
    for f, src in sources.items():
        if f.startswith("csrc/"):
            assert "TORCH_LIBRARY(" not in src and "TORCH_LIBRARY_FRAGMENT(" not in src and ".def(" not in src, f


def test_every_family_stem_has_a_file_in_every_backend_folder_and_in_tests():
    for family in sorted(set(FAMILIES.values())):
        cuda = () if family in WITHOUT_CUDA_KERNEL else (f"csrc/cuda/{family}.cu",)
        for path in (f"spot_kernels/ops/{family}.py", f"spot_kernels/reference/{family}.py",
                     f"spot_kernels/triton/{family}.py", *cuda, f"tests/ops/test_{family}.py"):
            assert (ROOT / path).is_file(), path
    for family in WITHOUT_CUDA_KERNEL:
        assert not (ROOT / f"csrc/cuda/{family}.cu").exists(), f"{family} has a CUDA kernel: drop it from the list"


@needs_cuda_build
def test_cuda_kernel_signatures_are_checked_against_the_python_schemas():
    """The .cu files register kernels before any schema exists; when the schema arrives the dispatcher compares it
    with the kernel's C++ signature: a wrong Python schema is refused, the real one is accepted."""
    result = _python("""
        import glob, torch
        torch.ops.load_library(glob.glob("../spot_kernels/_C*.so")[0])  # the kernels only, no schema yet
        lib = torch.library.Library("spot", "FRAGMENT")
        try:
            lib.define("_noise_uniform_cuda(Tensor rows, Tensor positions, Tensor steps, Tensor vocab_ids) -> Tensor")
        except RuntimeError as err:
            assert "Inferred operator schema for a C++ kernel function doesn't match" in str(err), err
        else:
            raise AssertionError("a schema with a missing argument was accepted")
        import spot_kernels  # defines the real schemas after the kernels were registered
        assert spot_kernels.HAS_C_EXTENSION
        assert torch._C._dispatch_has_kernel_for_dispatch_key("spot::_noise_uniform_cuda", "CUDA")
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_extension_is_loaded():
    """The installed package must carry the compiled schemas (a silent fallback would hide a broken build)."""
    if os.environ.get("SPOT_NO_EXTENSION") == "1":
        assert not spot_kernels.HAS_C_EXTENSION
    else:
        assert spot_kernels.HAS_C_EXTENSION, "spot_kernels._C did not load; rebuild with pip install -e ."
        assert spot_kernels._C.WITH_CUDA in (0, 1)


@pytest.mark.parametrize("op", OPS)
def test_registered_schema_equals_python_string(op):
    registered = getattr(torch.ops.spot, op).default._schema
    assert str(registered) == str(torch._C.parse_schema(f"spot::{SCHEMAS[op]}"))


@pytest.mark.parametrize("op", OPS)
def test_private_schema_is_the_public_one_without_backend(op):
    registered = _private(op).default._schema
    assert registry.private_schema(SCHEMAS[op], "cuda") == _private_schema_text(op)
    expected = torch._C.parse_schema("spot::" + _private_schema_text(op))
    assert str(registered) == str(expected)
    public = getattr(torch.ops.spot, op).default._schema
    assert [a.name for a in registered.arguments] == [a.name for a in public.arguments][:-1]
    assert [str(r.type) for r in registered.returns] == [str(r.type) for r in public.returns]


def test_a_call_is_validated_once(monkeypatch):
    """The router validates every call; the Python wrappers add no second pass (registry.call only looks at the
    Python types of the arguments, and runs the op's check itself only where the router will not be reached)."""
    calls = []
    real = checks.seed
    monkeypatch.setattr(checks, "seed", lambda op, value: calls.append(op) or real(op, value))
    args = sample_args("score")
    spot_kernels.score(*args)
    assert calls == ["score"]
    calls.clear()
    torch.ops.spot.score(*args)
    assert calls == ["score"]
    calls.clear()
    with pytest.raises(TypeError, match="seed must be an int, got bool"):  # the dispatcher would take True as 1
        spot_kernels.noise_uniform(True, *sample_args("noise_uniform")[1:])
    assert calls == ["noise_uniform"]


def test_public_surface():
    assert spot_kernels.CONFIDENCE_KINDS == ("prob", "raw_prob", "margin", "neg_entropy")
    for name in spot_kernels.__all__:
        assert hasattr(spot_kernels, name), name
    for op in PUBLIC_OPS:
        doc = getattr(spot_kernels, op).__doc__
        assert doc and "[" in doc, op  # shapes are documented
    assert issubclass(spot_kernels.BackendUnavailable, RuntimeError)


def _to_meta(x):
    return x.to("meta") if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("op", OPS)
def test_fake_impl_shapes_match_real_outputs(op):
    args = sample_args(op)
    packet = getattr(torch.ops.spot, op)
    real = packet(*args)
    fake = packet(*map(_to_meta, args))
    real = real if isinstance(real, tuple) else (real,)
    fake = fake if isinstance(fake, tuple) else (fake,)
    assert [(t.shape, t.dtype) for t in real] == [(t.shape, t.dtype) for t in fake]
    assert all(t.device.type == "meta" for t in fake) and all(t.is_contiguous() for t in real)


@pytest.mark.parametrize("op", OPS)
def test_forcing_cuda_on_cpu_tensors(op, monkeypatch):
    with pytest.raises(spot_kernels.BackendUnavailable, match="cuda backend needs CUDA tensors.*backend argument"):
        getattr(torch.ops.spot, op)(*sample_args(op), backend="cuda")
    monkeypatch.setenv("SPOT_BACKEND", "cuda")
    with pytest.raises(spot_kernels.BackendUnavailable, match="cuda backend needs CUDA tensors.*requested by "
                       "SPOT_BACKEND"):
        getattr(torch.ops.spot, op)(*sample_args(op))


@pytest.mark.parametrize("op", OPS)
def test_forcing_triton_on_cpu_tensors(op, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(spot_kernels.BackendUnavailable,
                       match="triton backend needs CUDA tensors or TRITON_INTERPRET=1"):
        getattr(torch.ops.spot, op)(*sample_args(op), backend="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    # As if spot_kernels/triton/ had no kernel for any op (every op has one; tests/ops/test_<family>.py run them).
    monkeypatch.setattr(backends, "_tables", {**backends._tables,
                                              **{("triton", family): {} for family in set(FAMILIES.values())}})
    with pytest.raises(spot_kernels.BackendUnavailable, match=f"triton backend: no kernel for spot::{op} yet"):
        getattr(torch.ops.spot, op)(*sample_args(op), backend="triton")


def test_unknown_backend_names():
    with pytest.raises(ValueError, match="backend must be one of"):
        spot_kernels.tree_mask(*sample_args("tree_mask"), backend="Reference")
    with pytest.raises(ValueError, match="backend must be one of"):
        torch.ops.spot.verify_tree(*sample_args("verify_tree"), backend="")


def test_spot_backend_environment_variable(monkeypatch):
    args = sample_args("score")
    want = spot_kernels.score(*args)
    monkeypatch.setenv("SPOT_BACKEND", "cuda")
    with pytest.raises(spot_kernels.BackendUnavailable, match="cuda backend.*requested by SPOT_BACKEND"):
        spot_kernels.score(*args)
    # An explicit per-call backend wins over the environment.
    assert torch.equal(spot_kernels.score(*args, backend="reference").tokens, want.tokens)
    monkeypatch.setenv("SPOT_BACKEND", "reference")
    assert torch.equal(spot_kernels.score(*args).tokens, want.tokens)
    monkeypatch.setenv("SPOT_BACKEND", "auto")
    assert torch.equal(spot_kernels.score(*args).tokens, want.tokens)
    monkeypatch.setenv("SPOT_BACKEND", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(spot_kernels.BackendUnavailable, match="TRITON_INTERPRET=1.*SPOT_BACKEND"):
        spot_kernels.score(*args)
    monkeypatch.setenv("SPOT_BACKEND", "gpu")
    with pytest.raises(ValueError, match="SPOT_BACKEND must be one of"):
        spot_kernels.score(*args)


def test_registered_triton_kernel_is_routed(monkeypatch):
    """A kernel registered for ("tree_mask", "triton") runs for CPU tensors under TRITON_INTERPRET=1."""
    calls = []

    def fake_kernel(key_start, prefix_len, num_new, num_nodes, block_size):
        calls.append((prefix_len, num_new, num_nodes, block_size))
        reference = backends.kernels("reference", "tree_attention")["tree_mask"]
        mask = reference(key_start, prefix_len, num_new, num_nodes, block_size)
        return mask.transpose(-1, -2).contiguous().transpose(-1, -2)  # non-contiguous: the router fixes that

    monkeypatch.setitem(backends.kernels("triton", "tree_attention"), "tree_mask", fake_kernel)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    args = sample_args("tree_mask")
    out = spot_kernels.tree_mask(*args, backend="triton")
    assert calls == [args[1:]] and out.is_contiguous()
    assert torch.equal(out, spot_kernels.tree_mask(*args, backend="reference"))
    spot_kernels.tree_mask(*args)  # "auto" on CPU tensors stays on the reference
    assert len(calls) == 1
    monkeypatch.setenv("SPOT_BACKEND", "triton")
    spot_kernels.tree_mask(*args)
    assert len(calls) == 2
    assert spot_kernels.available_backends("tree_mask", "cpu") == ["triton", "reference"]
    # spot_kernels/triton/, and csrc/cpu/ when built
    assert spot_kernels.available_backends("score", "cpu") == ["triton"] + ["cpu"] * bool(CPU_KERNEL_OPS) + \
        ["reference"]


def test_cuda_reasons(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setitem(backends._tables, ("cuda", "score"), {})  # as if csrc/cuda had no kernel for score
    if spot_kernels.HAS_C_EXTENSION and spot_kernels._C.WITH_CUDA:
        assert backends._kernel("score", "cuda", cuda) == (None, "cuda backend: no kernel for spot::score yet")
    monkeypatch.setattr(extension, "C", type("FakeC", (), {"WITH_CUDA": 0}))
    monkeypatch.setattr(extension, "HAS_C_EXTENSION", True)
    assert backends._kernel("score", "cuda", cuda)[1] == \
        "cuda backend: spot_kernels._C was built without CUDA (see the setup.py build message)"
    monkeypatch.setattr(extension, "HAS_C_EXTENSION", False)
    assert "spot_kernels._C is not loaded" in backends._kernel("score", "cuda", cuda)[1]


def test_auto_on_cuda_tensors_falls_back_to_the_reference(monkeypatch):
    """With no CUDA or Triton kernel for an op yet, "auto" on a CUDA device picks the reference."""
    for op in OPS:
        monkeypatch.setitem(backends._tables, ("cuda", FAMILIES[op]), {})  # as if csrc/cuda had no kernel for it
        monkeypatch.setattr(backends, "triton_importable", lambda: False)  # and Triton were not installed
        assert backends.resolve(op, torch.device("cuda"), "auto") is backends.kernels("reference", FAMILIES[op])[op]


def test_private_cuda_op_is_discovered():
    """A csrc/cuda/<family>.cu registers a CUDA kernel for spot::_<op>_cuda; the cuda table of the family lists it
    (run in a subprocess so the extra kernel does not leak into this process)."""
    result = _python("""
        import torch, spot_kernels
        from spot_kernels import backends, extension
        lib = torch.library.Library("spot", "IMPL")
        lib.impl("_noise_uniform_cuda", lambda *args: None, "CUDA")  # what noise.cu's TORCH_LIBRARY_IMPL does
        extension.C = type("FakeC", (), {"WITH_CUDA": 1})
        extension.HAS_C_EXTENSION = True
        fn = backends.resolve("noise_uniform", torch.device("cuda"), "auto")
        assert fn is torch.ops.spot._noise_uniform_cuda, fn
        fn, reason = backends._kernel("score", "cuda", torch.device("cuda"))
        assert fn is None and reason == "cuda backend: no kernel for spot::score yet", reason
        print("ok")
    """, SPOT_NO_EXTENSION="1")  # without the built extension, whose CUDA kernels register these names already
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_registry_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown op"):
        backends.register("scores", "triton", lambda *a: None)
    with pytest.raises(ValueError, match="unknown backend"):
        backends.register("score", "metal", lambda *a: None)
    with pytest.raises(ValueError, match="unknown op"):
        spot_kernels.available_backends("nope")


def test_available_backends_on_cpu(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert spot_kernels.available_backends(device="cpu") == ["cpu"] * bool(CPU_KERNEL_OPS) + ["reference"]
    for op in OPS:
        assert spot_kernels.available_backends(op, "cpu") == ["cpu"] * (op in CPU_KERNEL_OPS) + ["reference"]


@needs_cpu_build
def test_auto_picks_cpu_for_cpu_tensors(monkeypatch):
    monkeypatch.delenv("SPOT_BACKEND", raising=False)
    cpu = torch.device("cpu")
    for op in CPU_OPS:
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


@needs_cpu_build
def test_cpu_backend_reasons(monkeypatch):
    with pytest.raises(spot_kernels.BackendUnavailable, match="cpu backend needs CPU tensors, got meta tensors"):
        backends.resolve("score", torch.device("meta"), "cpu")
    monkeypatch.setattr(extension, "HAS_C_EXTENSION", False)
    fn, reason = backends._kernel("score", "cpu", torch.device("cpu"))
    assert fn is None and "spot_kernels._C is not loaded" in reason
    # without the extension "auto" falls back to the reference, and SPOT_BACKEND=cpu cannot run
    assert backends.resolve("score", torch.device("cpu"), "auto") is backends.kernels("reference", "score")["score"]
    monkeypatch.setenv("SPOT_BACKEND", "cpu")
    for op in ("score", "tree_mask"):
        with pytest.raises(spot_kernels.BackendUnavailable, match="_C is not loaded.*requested by SPOT_BACKEND"):
            backends.resolve(op, torch.device("cpu"))


@needs_cpu_build
def test_spot_backend_cpu_covers_ops_without_a_cpu_kernel(monkeypatch):
    """SPOT_BACKEND=cpu is process wide: ops without a C++ CPU kernel run the reference instead of failing, while an
    explicit per-call backend="cpu" for them still raises."""
    monkeypatch.setenv("SPOT_BACKEND", "cpu")
    args = sample_args("tree_mask")
    assert torch.equal(spot_kernels.tree_mask(*args), spot_kernels.tree_mask(*args, backend="reference"))
    with pytest.raises(spot_kernels.BackendUnavailable, match="no kernel for spot::tree_mask yet.*backend argument"):
        spot_kernels.tree_mask(*args, backend="cpu")
    with pytest.raises(spot_kernels.BackendUnavailable, match="cpu backend needs CPU tensors.*SPOT_BACKEND"):
        backends.resolve("tree_mask", torch.device("meta"))


def test_value_checks_gating(monkeypatch):
    monkeypatch.delenv("SPOT_CHECK_VALUES", raising=False)
    assert checks.values_enabled(torch.device("cpu"))
    assert not checks.values_enabled(torch.device("cuda"))
    assert not checks.values_enabled(torch.device("meta"))
    monkeypatch.setenv("SPOT_CHECK_VALUES", "1")
    assert checks.values_enabled(torch.device("cuda"))


def test_ops_work_without_the_extension(tmp_path):
    """SPOT_NO_EXTENSION=1: schemas come from Python, and every op gives the same results."""
    out_file = tmp_path / "no_ext.pt"
    result = _python(f"""
        import torch, spot_kernels
        from samples import sample_args
        from spot_kernels.ops import SCHEMAS
        assert not spot_kernels.HAS_C_EXTENSION
        for op, schema in SCHEMAS.items():
            assert str(getattr(torch.ops.spot, op).default._schema) == str(torch._C.parse_schema("spot::" + schema))
        results = {{op: getattr(torch.ops.spot, op)(*sample_args(op)) for op in SCHEMAS}}
        torch.save(results, {str(out_file)!r})
        print("{{}}".format(spot_kernels.available_backends(device="cpu")))
    """, SPOT_NO_EXTENSION="1")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().replace("'", '"')) == ["reference"]
    theirs = torch.load(out_file, weights_only=True)
    for op in OPS:
        mine = getattr(torch.ops.spot, op)(*sample_args(op), backend="reference")
        mine = mine if isinstance(mine, tuple) else (mine,)
        other = theirs[op] if isinstance(theirs[op], tuple) else (theirs[op],)
        assert len(mine) == len(other)
        for a, b in zip(mine, other):
            assert torch.equal(a, b), op
        # "auto" here may take a C++ CPU kernel (csrc/cpu/): the same integers and noise, floats to rounding
        auto = getattr(torch.ops.spot, op)(*sample_args(op))
        auto = auto if isinstance(auto, tuple) else (auto,)
        for a, b in zip(auto, other):
            if a.is_floating_point() and op in CPU_KERNEL_OPS and op != "noise_uniform":
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True, msg=op)
            else:
                assert torch.equal(a, b), op


def test_ops_trace_under_torch_compile():
    """The public functions compile without graph breaks (fullgraph) and give the eager results."""

    def step(logits, masked, rows, block_start, steps, key_start):
        out = spot_kernels.score(logits, masked, 3, rows, block_start, steps, 0.7, top_k=4)
        mask = spot_kernels.tree_mask(key_start, 6, 2, logits.shape[1], logits.shape[2])
        return out.tokens, out.commit_pos, mask

    args = sample_args("score")[:2] + (torch.zeros(2, 1, dtype=torch.int64),) * 3 + (torch.tensor([0, 1]),)
    args = (args[0][:, None], args[1][:, None]) + args[2:]
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    for a, b in zip(compiled(*args), step(*args)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
def test_ops_trace_with_the_cpu_backend(backend):
    """The public op (router + fake impl) still compiles and matches eager with the C++ kernels underneath."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 50, generator=g)
    masked = torch.rand(2, 3, generator=g) < 0.7
    z = torch.zeros(2, dtype=I64)

    def step(logits, masked, rows):
        out = spot_kernels.score(logits, masked, 3, rows, rows, rows, 0.7, top_k=4, backend=backend.name)
        return out.tokens, out.commit_pos

    eager = step(logits, masked, z)
    compiled = torch.compile(step, fullgraph=True, backend="eager")(logits, masked, z)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------------------- extension build

def _cuda_build_expected() -> bool:
    """setup.py builds CUDA when torch is a CUDA build, nvcc is found and a GPU is visible or SPOT_BUILD_CUDA=1 (which
    `make test`, and so CI, sets); never with SPOT_BUILD_CUDA=0."""
    switch = os.environ.get("SPOT_BUILD_CUDA", "")
    if switch == "0" or not torch.version.cuda or (switch != "1" and not torch.cuda.is_available()):
        return False
    home = os.environ.get("CUDA_HOME")
    return bool(shutil.which("nvcc") or (home and os.path.isfile(os.path.join(home, "bin", "nvcc")))
                or os.path.isfile("/usr/local/cuda/bin/nvcc"))


def test_extension_is_built_with_cuda():
    if os.environ.get("SPOT_NO_EXTENSION") == "1":
        pytest.skip("SPOT_NO_EXTENSION=1: the extension is deliberately not loaded")
    assert spot_kernels.HAS_C_EXTENSION, "spot_kernels._C did not load; rebuild with pip install -e ."
    if not _cuda_build_expected():
        pytest.skip("no GPU (and SPOT_BUILD_CUDA is not 1), CUDA toolchain or CUDA torch here: setup.py builds "
                    "the CPU-only extension")
    assert spot_kernels._C.WITH_CUDA == 1, "nvcc and a CUDA torch are present but _C was built without CUDA"


@needs_cuda_build
@pytest.mark.parametrize("op", CUDA_OPS)
def test_every_op_has_a_cuda_kernel(op):
    name = f"spot::_{op}_cuda"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"), name
    # CUDA only: CPU tensors must reach the router's BackendUnavailable, never a kernel.
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"), name


@needs_cuda_build
@pytest.mark.parametrize("op", CUDA_OPS)
def test_auto_routes_cuda_tensors_to_the_cuda_kernel(op, monkeypatch):
    monkeypatch.delenv("SPOT_BACKEND", raising=False)
    cuda = torch.device("cuda")
    assert backends.resolve(op, cuda, "auto") is _private(op)
    assert backends.resolve(op, cuda, "cuda") is _private(op)
    assert spot_kernels.available_backends(op, "cuda")[0] == "cuda"
    assert "cuda" not in spot_kernels.available_backends(op, "cpu")


# ---------------------------------------------------------------------------------------------- bad input
# (op, position of the argument to replace, bad value, error type, message pattern). Each case must raise the same
# error from the public op whatever the backend (the router checks first), and from the C++ kernel itself.

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
    ("expand_frontier", 0, torch.zeros(4, 4, dtype=torch.float16), TypeError, "position_logits must have dtype"),
    ("expand_frontier", 1, torch.zeros(4, 5, dtype=I64), ValueError, "states must have shape"),
    ("expand_frontier", 12, 0, ValueError, "width must lie in"),
    ("select_children", 0, torch.zeros(2, 4, dtype=torch.float16), TypeError, "position_logits must have dtype"),
    ("select_children", 0, torch.zeros(2, 4, 1), ValueError, "position_logits must have 2 dimensions"),
    ("select_children", 1, torch.ones(2, 5, dtype=torch.bool), ValueError, "masked must have shape"),
    ("select_children", 2, torch.zeros(2, dtype=torch.float64), TypeError, "path_logprob must have dtype float32"),
    ("select_children", 3, torch.zeros(2, 3, 3), ValueError, r"stale_topk_probs must have shape \[F, B, K\]"),
    ("select_children", 4, torch.zeros(2, 4, 2, dtype=I64), ValueError, "stale_topk_ids must have shape"),
    ("select_children", 6, torch.zeros(3, dtype=I64), ValueError, "rows must have shape"),
    ("select_children", 9, -1.0, ValueError, "temperature must be finite and >= 0"),
    ("select_children", 10, 0, ValueError, "k must lie in"),
    ("commit_rule", 0, torch.zeros(2, 3, 5, dtype=torch.float16), TypeError, "confidence must have dtype"),
    ("commit_rule", 1, torch.zeros(2, 3, 4, dtype=torch.bool), ValueError, "masked must have shape"),
    ("commit_rule", 2, torch.zeros(2, dtype=I64), ValueError, "steps must have shape"),
    ("commit_rule", 3, torch.zeros(2, 5, dtype=I64), ValueError, r"quota must have shape \[S, B \+ 1\]"),
    ("commit_rule", 4, torch.zeros(6, 5), TypeError, "thresholds must have dtype float64"),
    ("commit_rule", 4, torch.zeros(5, 5, dtype=torch.float64), ValueError, "thresholds must have shape"),
    ("verify_steps", 0, torch.zeros(1, 0, dtype=I64), ValueError, "N >= 1"),
    ("verify_steps", 1, torch.zeros(1, 3, 4, dtype=I64), ValueError, r"states must have shape \[b, N, B\]"),
    ("verify_steps", 2, torch.zeros(1, 4, 4, dtype=I64), TypeError, "commit must have dtype bool"),
    ("verify_steps", 3, torch.zeros(1, 4, 3, dtype=I64), ValueError, "tokens must have shape"),
    ("expand_steps", 3, torch.zeros(4, 4), ValueError, r"size_logprob must have shape"),
    ("expand_steps", 3, torch.zeros(4, 5, dtype=torch.float64), TypeError, "size_logprob must have dtype"),
    ("expand_steps", 13, 0, ValueError, "width must lie in"),
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
    ("order_logits", 0, torch.zeros(2, 4, 5, dtype=torch.float64), TypeError, "features must have dtype float32"),
    ("order_logits", 2, torch.zeros(2, 4), ValueError, "tokens must have 3 dimensions"),
    ("order_logits", 3, torch.tensor([0, 2, 1]), ValueError, "node_row must lie in"),
    ("order_logits", 4, torch.ones(3, 5, dtype=torch.bool), ValueError, "node_masked must have shape"),
    ("order_logits", 7, torch.zeros(3), ValueError, "weights must hold"),
    ("order_logits", 10, 3, ValueError, "n_heads"),
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


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
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
            call(backend.name)
        assert str(got.value) == str(want.value)


# Value checks of tensor contents, which only the router makes (on a GPU they would cost the kernel a host sync):
# (op, argument position). The CUDA kernel clamps such values instead, so a direct call stays memory-safe.
ROUTER_VALUE_CHECKS = {("order_logits", 3)}


@needs_cuda_build
@pytest.mark.parametrize("case", [c for c in BAD_INPUT if c[0] in CUDA_OPS and c[:2] not in ROUTER_VALUE_CHECKS],
                         ids=_case_id)
def test_bad_input_in_the_cuda_kernel(case):
    """The C++ checks themselves: run the CUDA kernel on CPU tensors (its checks come before any CUDA call)."""
    op, index, value, error, match = case
    with pytest.raises(error, match=match):
        _private(op).default.redispatch(CUDA_KEY, *_bad_args(op, index, value))


@needs_cuda_build
@pytest.mark.parametrize("op", CUDA_OPS)
def test_cuda_kernel_rejects_cpu_tensors(op):
    with pytest.raises(ValueError, match=r"\(cuda backend\): \w+ must be a CUDA tensor, got cpu"):
        _private(op).default.redispatch(CUDA_KEY, *sample_args(op))


# ---------------------------------------------------------------------------------------------------- triton

@pytest.mark.parametrize("backend", ["triton"], indirect=True)
def test_every_op_has_a_triton_kernel(backend):
    for op in SCHEMAS:
        assert "triton" in spot_kernels.available_backends(op, backend.device), op


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("op", OPS)
def test_opcheck_with_the_triton_backend(backend, op):
    opcheck(getattr(torch.ops.spot, op).default, backend.to(*sample_args(op)), {"backend": "triton"})


# ------------------------------------------------------------------------------------------------ end to end
# Decoding with every op on one backend gives exactly the reference's tokens. The decoder's test fixtures
# (PROMPTS, sharp_target) live with the decoder's tests in tests/runtime/test_decode.py.

@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize("score_all_nodes", [True, False])
def test_generate_with_triton_equals_reference(backend, monkeypatch, score_all_nodes):
    """spot.generate on a tiny random float32 model: SPOT_BACKEND=triton gives exactly the reference's tokens, and
    the model's mask ops run through Triton too (T = 0 is covered op by op in tests/ops/test_<family>.py). Both ways of
    scoring a tree: every node in one call (as on a GPU) and the accepted chain only (the CPU default)."""
    from spot.decode import generate
    from spot.settings import TreeSettings
    from tiny import PROMPTS, sharp_target

    target = sharp_target(dtype=torch.float32)
    target.model.to(backend.device)
    kw = dict(max_new_tokens=4, block_size=4, temperature=0.7, seed=3, top_k=4, eos_id=None,
              tree=TreeSettings(budget=4, score_all_nodes=score_all_nodes))
    prompts = PROMPTS[:2]
    monkeypatch.setenv("SPOT_BACKEND", "reference")
    want = generate(target, prompts, "confidence", **kw)

    calls = {}
    for op in ("score", "expand_frontier", "verify_tree", "tree_mask", "tree_position_ids"):
        fn = backends.resolve(op, backend.device, "triton")

        def counted(*args, _fn=fn, _op=op):
            calls[_op] = calls.get(_op, 0) + 1
            return _fn(*args)

        monkeypatch.setitem(backends.kernels("triton", FAMILIES[op]), op, counted)
    monkeypatch.setenv("SPOT_BACKEND", "triton")
    got = generate(target, prompts, "confidence", **kw)
    assert got.tokens == want.tokens
    assert torch.equal(got.orders, want.orders)
    assert got.stats.target_passes == want.stats.target_passes
    assert any(c > 1 and n > 0 for c, n in got.stats.commits_per_pass.items()), "no drafted commit was accepted"
    assert set(calls) == {"score", "expand_frontier", "verify_tree", "tree_mask", "tree_position_ids"}, calls


@gpu_only
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_on_gpu_with_triton_equals_reference(temperature, monkeypatch):
    from spot.decode import generate
    from tiny import PROMPTS, sharp_target

    target = sharp_target(dtype=torch.float32)
    target.model.to("cuda")
    kw = dict(max_new_tokens=24, block_size=16, temperature=temperature, seed=2, budget=8, eos_id=None)
    monkeypatch.setenv("SPOT_BACKEND", "reference")
    want = generate(target, PROMPTS, "confidence", **kw)
    monkeypatch.setenv("SPOT_BACKEND", "triton")
    got = generate(target, PROMPTS, "confidence", **kw)
    assert got.tokens == want.tokens
    assert got.stats.target_passes == want.stats.target_passes


@pytest.mark.parametrize("backend", ["cpu"], indirect=True)
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_decoder_is_token_identical(backend, temperature, monkeypatch):
    """spot.generate on a tiny float64 target: the same tokens with SPOT_BACKEND=<backend> and =reference, and the
    backend's kernels are really the ones called."""
    import spot
    from spot.decode import generate

    from tiny import PROMPTS, sharp_target

    target = sharp_target()
    calls = {}
    for op in ("score", "expand_frontier", "verify_tree"):  # a tree depth is one expand_frontier (spot.tree)
        kernel = getattr(torch.ops.spot, f"_{op}_{backend.name}")

        def counted(*args, _op=op, _kernel=kernel):
            calls[_op] = calls.get(_op, 0) + 1
            return _kernel(*args)

        monkeypatch.setitem(backends.kernels(backend.name, FAMILIES[op]), op, counted)
    runs = [("standard", {}), ("confidence", {}), ("spot", {"drafter": spot.ConfidenceDrafter()})]
    for (method, extra), block_size in itertools.product(runs, (4, 16, 32)):  # the exactness grid's block sizes
        kw = dict(max_new_tokens=block_size + block_size // 2, block_size=block_size, temperature=temperature,
                  seed=4, eos_id=None, budget=8, **extra)
        monkeypatch.setenv("SPOT_BACKEND", "reference")
        ref = generate(target, PROMPTS, method, **kw)
        before = dict(calls)
        monkeypatch.setenv("SPOT_BACKEND", backend.name)
        out = generate(target, PROMPTS, method, **kw)
        assert out.tokens == ref.tokens, (method, temperature, block_size)
        assert torch.equal(out.orders, ref.orders)
        assert calls.get("score", 0) > before.get("score", 0)
    assert calls.get("verify_tree", 0) > 0 and calls.get("expand_frontier", 0) > 0


# ======================================================================================================= GPU only

@gpu
def test_bad_input_on_gpu_reaches_the_kernel_checks():
    logits = torch.zeros(2, 3, 5, device="cuda")
    z = torch.zeros(2, dtype=I64, device="cuda")
    with pytest.raises(TypeError, match="masked must have dtype bool"):
        torch.ops.spot._score_cuda(logits, torch.ones(2, 3, device="cuda"), 0, z, z, z, 1.0)
    with pytest.raises(ValueError, match=r"rows must be a CUDA tensor, got cpu"):
        torch.ops.spot._score_cuda(logits, torch.ones(2, 3, dtype=torch.bool, device="cuda"), 0, z.cpu(), z, z, 1.0)
    with pytest.raises(ValueError, match="k must lie in"):
        args = children_inputs(2, 4, 3, 1, device="cuda")
        spot_kernels.select_children(*args[:10], 0, backend="cuda")


@gpu
def test_auto_backend_on_gpu_is_the_cuda_kernel(monkeypatch):
    monkeypatch.delenv("SPOT_BACKEND", raising=False)
    logits, masked, rows, block_start, steps = score_inputs((2, 3), 8, 100, torch.float32, device="cuda")
    args = (logits, masked, 12345, rows, block_start, steps, 0.7, "prob", 4)
    for a, b in zip(spot_kernels.score(*args), torch.ops.spot.score(*args, backend="cuda")):
        assert torch.equal(a, b)


@gpu_only
def test_auto_uses_a_gpu_kernel():
    args = (torch.tensor([0, 2], device="cuda"), 5, 2, 2, 3)
    fn = backends.resolve("tree_mask", torch.device("cuda"), "auto")
    assert fn is not backends.kernels("reference", "tree_attention")["tree_mask"]
    assert torch.equal(spot_kernels.tree_mask(*args), spot_kernels.tree_mask(*args, backend="reference"))


@gpu_only
@pytest.mark.parametrize("backend", ["triton", "cuda"], indirect=True)
def test_cuda_graph_capture_of_score_and_verify(backend):
    """score + verify_tree are capturable (no host sync, no sync allocation) and replay to the eager results."""
    logits, masked, rows, block_start, steps = score_inputs((1, 8), 16, 5000, torch.bfloat16, seed=9,
                                                            device=backend.device)
    parents, draft_pos, draft_tok, _, _, block_state = random_trees(1, 8, 16, seed=4, device=backend.device)

    def step():
        out = backend.run("score", logits, masked, 12354, rows, block_start, steps, 0.8, "prob", 32)
        target_pos = out[4]
        target_tok = out[0].gather(-1, target_pos.clamp(min=0)[..., None])[..., 0]
        return out + backend.run("verify_tree", parents, draft_pos, draft_tok, target_pos, target_tok, block_state)

    eager = [x.clone() for x in step()]
    graph, captured = capture(step)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, eager):
        assert torch.equal(a, b)
    logits.mul_(0.5)  # new inputs in the same buffers: the replay follows them
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(captured, step()):
        assert torch.equal(a, b)
