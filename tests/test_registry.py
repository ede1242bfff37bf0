"""Op registration, schema parity (C++ vs Python), fake impls, backend resolution and the extension-free mode."""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import spot_kernels
from spot_kernels import backends, checks
from spot_kernels.schemas import FAMILIES, SCHEMAS

from samples import sample_args

ROOT = pathlib.Path(__file__).resolve().parents[1]
OPS = list(SCHEMAS)
PUBLIC_OPS = OPS + ["tree_mask_mod"]


def _python(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env}
    full_env.pop("SPOT_BACKEND", None)
    full_env.pop("TRITON_INTERPRET", None)  # set by conftest.py when there is no GPU
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, cwd=str(ROOT / "tests"), timeout=120)


def test_schema_table_covers_every_op():
    assert set(SCHEMAS) == set(FAMILIES)
    for op, schema in SCHEMAS.items():
        parsed = torch._C.parse_schema(f"spot::{schema}")
        assert parsed.name == f"spot::{op}"
        assert parsed.arguments[-1].name == "backend" and parsed.arguments[-1].default_value == "auto"


def test_cpp_source_defines_the_same_schemas():
    source = (ROOT / "csrc" / "spot_ops.cpp").read_text()
    defs = re.findall(r'm\.def\(R"spot\((.*?)\)spot"\);', source)
    by_name = {d.split("(", 1)[0]: d for d in defs}
    assert len(defs) == len(by_name), "one m.def per op"
    assert by_name == SCHEMAS


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


def test_public_surface():
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
def test_forcing_cuda_on_cpu_tensors(op):
    with pytest.raises(spot_kernels.BackendUnavailable, match="cuda backend needs CUDA tensors.*backend argument"):
        getattr(torch.ops.spot, op)(*sample_args(op), backend="cuda")


@pytest.mark.parametrize("op", OPS)
def test_forcing_triton_on_cpu_tensors(op, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(spot_kernels.BackendUnavailable,
                       match="triton backend needs CUDA tensors or TRITON_INTERPRET=1"):
        getattr(torch.ops.spot, op)(*sample_args(op), backend="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    # As if spot_kernels/triton/ had no kernel for any op (every op has one; tests/test_triton.py runs them).
    monkeypatch.setattr(backends, "_imported_triton_families", set(FAMILIES.values()))
    monkeypatch.setattr(backends, "_registry", {k: v for k, v in backends._registry.items() if k[1] != "triton"})
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
        mask = backends._registry[("tree_mask", "reference")](key_start, prefix_len, num_new, num_nodes, block_size)
        return mask.transpose(-1, -2).contiguous().transpose(-1, -2)  # non-contiguous: the router fixes that

    monkeypatch.setitem(backends._registry, ("tree_mask", "triton"), fake_kernel)
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
    assert spot_kernels.available_backends("score", "cpu") == ["triton", "reference"]  # spot_kernels/triton/


def test_cuda_reasons(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setitem(backends._cuda_ops, "score", None)  # as if csrc/cuda had no kernel for score
    if spot_kernels.HAS_C_EXTENSION and spot_kernels._C.WITH_CUDA:
        assert backends._kernel("score", "cuda", cuda) == (None, "cuda backend: no kernel for spot::score yet")
    monkeypatch.setattr(spot_kernels, "_C", type("FakeC", (), {"WITH_CUDA": 0}), raising=False)
    monkeypatch.setattr(spot_kernels, "HAS_C_EXTENSION", True)
    assert backends._kernel("score", "cuda", cuda)[1] == \
        "cuda backend: spot_kernels._C was built without CUDA (see the setup.py build message)"
    monkeypatch.setattr(spot_kernels, "HAS_C_EXTENSION", False)
    assert "spot_kernels._C is not loaded" in backends._kernel("score", "cuda", cuda)[1]


def test_auto_on_cuda_tensors_falls_back_to_the_reference(monkeypatch):
    """With no CUDA or Triton kernel for an op yet, "auto" on a CUDA device picks the reference."""
    for op in OPS:
        monkeypatch.setitem(backends._cuda_ops, op, None)  # as if csrc/cuda had no kernel for it
        monkeypatch.setattr(backends, "triton_importable", lambda: False)  # and Triton were not installed
        assert backends.resolve(op, torch.device("cuda"), "auto") is backends._registry[(op, "reference")]


def test_private_cuda_op_is_discovered():
    """A csrc/cuda/<family>.cu defines spot::_<op>_cuda; the registry finds it by name (run in a subprocess so the
    extra op does not leak into this process)."""
    result = _python("""
        import torch, spot_kernels
        from spot_kernels import backends
        lib = torch.library.Library("spot", "FRAGMENT")
        lib.define("_noise_uniform_cuda(int seed, Tensor rows, Tensor positions, Tensor steps, Tensor vocab_ids)"
                   " -> Tensor")
        spot_kernels._C = type("FakeC", (), {"WITH_CUDA": 1})
        spot_kernels.HAS_C_EXTENSION = True
        fn = backends.resolve("noise_uniform", torch.device("cuda"), "auto")
        assert fn is torch.ops.spot._noise_uniform_cuda, fn
        fn, reason = backends._kernel("score", "cuda", torch.device("cuda"))
        assert fn is None and reason == "cuda backend: no kernel for spot::score yet", reason
        print("ok")
    """, SPOT_NO_EXTENSION="1")  # without the built extension, whose CUDA kernels define these names already
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
    assert spot_kernels.available_backends(device="cpu") == ["reference"]
    for op in OPS:
        assert spot_kernels.available_backends(op, "cpu") == ["reference"]


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
        from spot_kernels.schemas import SCHEMAS
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
        mine = getattr(torch.ops.spot, op)(*sample_args(op))
        mine = mine if isinstance(mine, tuple) else (mine,)
        other = theirs[op] if isinstance(theirs[op], tuple) else (theirs[op],)
        assert len(mine) == len(other)
        for a, b in zip(mine, other):
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
