"""Backend registry and resolution for the `torch.ops.spot.*` ops (docs/ops.md, "backend").

A backend implementation of op X is a function taking X's schema arguments, positionally, without `backend`, and
returning X's outputs. Every backend hands its implementations over the same way: one table {op: function} per op
family, read once, on first use, by `kernels(backend, family)`:
  - "reference", "triton": Python packages with one module per family, `spot_kernels.<backend>.<family>`, each
    ending with `KERNELS = {op: function}` (the Triton modules are imported only when first needed, so that Triton
    is never imported for CPU-only work);
  - "cpu", "cuda": the compiled extension `spot_kernels._C`; csrc/cpu/<family>.cpp (built on every machine) and
    csrc/cuda/<family>.cu (built where CUDA is) register a kernel for the private op `spot::_X_cpu` / `_X_cuda`
    under the CPU / CUDA dispatch key, and the family's table lists the private ops that have one.
So adding a kernel means adding its file (and its table entry) only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Callable

import torch

from . import extension
from .ops import FAMILIES

BACKENDS = ("reference", "triton", "cuda", "cpu")
_CHOICES = ("auto",) + BACKENDS
# Backends written in Python: the package holding their family modules.
MODULE_BACKENDS = {"reference": "spot_kernels.reference", "triton": "spot_kernels.triton"}
# Backends compiled into spot_kernels._C: the dispatch key their private ops `_<op>_<backend>` are registered under.
EXTENSION_BACKENDS = {"cuda": "CUDA", "cpu": "CPU"}
# What "auto" tries, in order, per device type; any other device gets the reference.
_AUTO_ORDER = {"cuda": ("cuda", "triton", "reference"), "cpu": ("cpu", "reference")}
_PREFERENCE = ("cuda", "triton", "cpu", "reference")  # the order available_backends lists them in

_tables: dict[tuple[str, str], dict[str, Callable]] = {}


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run this call (wrong device, not built, not installed, or no kernel yet)."""


def _load(backend: str, family: str) -> dict[str, Callable]:
    if backend in MODULE_BACKENDS:
        package = MODULE_BACKENDS[backend]
        module = f"{package}.{family}"
        try:
            return dict(importlib.import_module(module).KERNELS)
        except ModuleNotFoundError as err:
            if err.name not in (module, package):
                raise  # a kernel file that fails to import is a bug, not a missing kernel
            return {}
    key = EXTENSION_BACKENDS[backend]
    ops = [op for op, fam in FAMILIES.items() if fam == family]
    return {op: getattr(torch.ops.spot, f"_{op}_{backend}") for op in ops
            if torch._C._dispatch_has_kernel_for_dispatch_key(f"spot::_{op}_{backend}", key)}


def kernels(backend: str, family: str) -> dict[str, Callable]:
    """The kernel table {op: function} of one backend for one op family (loaded once, then cached)."""
    key = (backend, family)
    if key not in _tables:
        _tables[key] = _load(backend, family)
    return _tables[key]


def register(op: str, backend: str, fn: Callable) -> None:
    """Put `fn` in the `backend` table as the implementation of `spot::<op>` (replacing the one there)."""
    if op not in FAMILIES:
        raise ValueError(f"register: unknown op {op!r}; expected one of {sorted(FAMILIES)}")
    if backend not in BACKENDS:
        raise ValueError(f"register: unknown backend {backend!r}; expected one of {BACKENDS}")
    kernels(backend, FAMILIES[op])[op] = fn


def triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def _unavailable(backend: str, device: torch.device) -> str:
    """Why `backend` cannot run on `device` whatever the op ("" when it can)."""
    if backend == "triton":
        if not triton_importable():
            return "triton backend: the triton package is not installed"
        interpret = os.environ.get("TRITON_INTERPRET", "") == "1"
        if device.type != "cuda" and not (device.type == "cpu" and interpret):
            return f"triton backend needs CUDA tensors or TRITON_INTERPRET=1, got {device.type} tensors"
    elif backend in EXTENSION_BACKENDS:
        key = EXTENSION_BACKENDS[backend]
        if device.type != key.lower():
            return f"{backend} backend needs {key} tensors, got {device.type} tensors"
        ext = extension.C if extension.HAS_C_EXTENSION else None
        if ext is None:
            return f"{backend} backend: spot_kernels._C is not loaded (extension not built or SPOT_NO_EXTENSION=1)"
        if not getattr(ext, f"WITH_{key}", 0):
            return f"{backend} backend: spot_kernels._C was built without {key} (see the setup.py build message)"
    return ""


def _kernel(op: str, backend: str, device: torch.device) -> tuple[Callable | None, str]:
    reason = _unavailable(backend, device)
    if reason:
        return None, reason
    fn = kernels(backend, FAMILIES[op]).get(op)
    if fn is None:
        return None, f"{backend} backend: no kernel for spot::{op} yet"
    return fn, ""


def requested_backend(backend: str) -> tuple[str, str]:
    """(backend name or "auto", where it came from) after applying SPOT_BACKEND to a per-call "auto"."""
    if not isinstance(backend, str) or backend not in _CHOICES:
        raise ValueError(f"backend must be one of {_CHOICES}, got {backend!r}")
    if backend != "auto":
        return backend, "backend argument"
    env = os.environ.get("SPOT_BACKEND", "").strip()
    if env in ("", "auto"):
        return "auto", ""
    if env not in BACKENDS:
        raise ValueError(f"environment variable SPOT_BACKEND must be one of {_CHOICES}, got {env!r}")
    return env, "SPOT_BACKEND"


def resolve(op: str, device: torch.device, backend: str = "auto") -> Callable:
    """The implementation of `spot::<op>` for tensors on `device`.

    An explicit backend (argument, else SPOT_BACKEND) must be able to run the call or BackendUnavailable is raised.
    "auto" takes, for CUDA tensors, the first of cuda, triton, reference that has a kernel for this op; for CPU
    tensors cpu (the C++ kernels of csrc/cpu/) where it has one, else the reference; for any other device the
    reference. SPOT_BACKEND=cpu covers the ops the cpu backend has no kernel for (tree masks, attention) with the
    reference, itself a CPU implementation, so that a whole decode can run under it; an explicit backend="cpu"
    argument for such an op raises.
    """
    name, source = requested_backend(backend)
    if name != "auto":
        fn, reason = _kernel(op, name, device)
        if fn is None and name == "cpu" and source == "SPOT_BACKEND" and not _unavailable("cpu", device):
            fn = kernels("reference", FAMILIES[op]).get(op)
        if fn is None:
            raise BackendUnavailable(f"{reason} (requested by {source})")
        return fn
    for candidate in _AUTO_ORDER.get(device.type, ("reference",)):
        fn, _ = _kernel(op, candidate, device)
        if fn is not None:
            return fn
    raise BackendUnavailable(f"no backend has a kernel for spot::{op} on {device.type} tensors")


def available_backends(op: str | None = None, device: str | torch.device | None = None) -> list[str]:
    """Backends that can run here, in "auto" preference order.

    Args:
        op: an op name such as "score"; when given, only backends with a kernel for that op are listed,
            otherwise backends that have a kernel for at least one op.
        device: where the tensors would live; default "cuda" when a GPU is visible, else "cpu".
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    ops = [op] if op is not None else list(FAMILIES)
    for name in ops:
        if name not in FAMILIES:
            raise ValueError(f"available_backends: unknown op {name!r}; expected one of {sorted(FAMILIES)}")
    return [b for b in _PREFERENCE if any(_kernel(o, b, device)[0] for o in ops)]
