"""Backend registry and resolution for the `torch.ops.spot.*` ops (docs/ops.md, "backend").

A backend implementation of op X is a function taking X's schema arguments, positionally, without `backend`, and
returning X's outputs. Where implementations come from:
  - "reference": `spot_kernels.reference.<family>`, registered at import (pure PyTorch, any device);
  - "triton": `spot_kernels/triton/<family>.py`, imported on first use; the module calls `register(...)`;
  - "cuda": the private op `torch.ops.spot._X_cuda` (X's schema without `backend`), defined by a
    `csrc/cuda/<family>.cu` compiled into `spot_kernels._C`; found by name, nothing to register.
So adding a Triton or CUDA kernel means adding its file only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Callable

import torch

from .schemas import FAMILIES

BACKENDS = ("reference", "triton", "cuda")
_CHOICES = ("auto",) + BACKENDS

_registry: dict[tuple[str, str], Callable] = {}
_imported_triton_families: set[str] = set()
_cuda_ops: dict[str, Callable | None] = {}  # op -> torch.ops.spot._<op>_cuda or None (looked up once)


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run this call (wrong device, not built, not installed, or no kernel yet)."""


def register(op: str, backend: str, fn: Callable) -> None:
    """Register `fn` as the `backend` implementation of `spot::<op>` (replacing any previous one)."""
    if op not in FAMILIES:
        raise ValueError(f"register: unknown op {op!r}; expected one of {sorted(FAMILIES)}")
    if backend not in BACKENDS:
        raise ValueError(f"register: unknown backend {backend!r}; expected one of {BACKENDS}")
    _registry[(op, backend)] = fn


def _c_extension():
    """spot_kernels._C when it was loaded at import, else None."""
    import spot_kernels

    return getattr(spot_kernels, "_C", None) if spot_kernels.HAS_C_EXTENSION else None


def _cuda_kernel(op: str, device: torch.device) -> tuple[Callable | None, str]:
    if device.type != "cuda":
        return None, f"cuda backend needs CUDA tensors, got {device.type} tensors"
    ext = _c_extension()
    if ext is None:
        return None, "cuda backend: spot_kernels._C is not loaded (extension not built or SPOT_NO_EXTENSION=1)"
    if not getattr(ext, "WITH_CUDA", 0):
        return None, "cuda backend: spot_kernels._C was built without CUDA (see the setup.py build message)"
    fn = _registry.get((op, "cuda"))
    if fn is None:
        if op not in _cuda_ops:
            _cuda_ops[op] = getattr(torch.ops.spot, f"_{op}_cuda", None)
        fn = _cuda_ops[op]
    if fn is None:
        return None, f"cuda backend: no kernel for spot::{op} yet"
    return fn, ""


def triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def _triton_kernel(op: str, device: torch.device) -> tuple[Callable | None, str]:
    if not triton_importable():
        return None, "triton backend: the triton package is not installed"
    interpret = os.environ.get("TRITON_INTERPRET", "") == "1"
    if device.type != "cuda" and not (device.type == "cpu" and interpret):
        return None, f"triton backend needs CUDA tensors or TRITON_INTERPRET=1, got {device.type} tensors"
    family = FAMILIES[op]
    if (op, "triton") not in _registry and family not in _imported_triton_families:
        _imported_triton_families.add(family)
        module = f"spot_kernels.triton.{family}"
        try:
            importlib.import_module(module)  # registers its kernels
        except ModuleNotFoundError as err:
            if err.name not in (module, "spot_kernels.triton"):
                raise  # a kernel file that fails to import is a bug, not a missing kernel
    fn = _registry.get((op, "triton"))
    if fn is None:
        return None, f"triton backend: no kernel for spot::{op} yet"
    return fn, ""


def _kernel(op: str, backend: str, device: torch.device) -> tuple[Callable | None, str]:
    if backend == "reference":
        return _registry[(op, "reference")], ""
    if backend == "triton":
        return _triton_kernel(op, device)
    return _cuda_kernel(op, device)


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
    "auto" takes, for CUDA tensors, the first of cuda, triton, reference that has a kernel for this op; for any
    other device the reference.
    """
    name, source = requested_backend(backend)
    if name != "auto":
        fn, reason = _kernel(op, name, device)
        if fn is None:
            raise BackendUnavailable(f"{reason} (requested by {source})")
        return fn
    if device.type == "cuda":
        for candidate in ("cuda", "triton"):
            fn, _ = _kernel(op, candidate, device)
            if fn is not None:
                return fn
    return _registry[(op, "reference")]


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
    found = [b for b in ("cuda", "triton", "reference") if any(_kernel(o, b, device)[0] for o in ops)]
    return found
