"""Registration of the `torch.ops.spot.*` ops: one generic loop over the op definitions of spot_kernels/ops/.

Each op family module (spot_kernels/ops/<family>.py) lists its ops as `OpDef`s (spot_kernels/opdef.py): the schema
string, the argument check and the fake implementation. From those this module defines, once and only here:
  - the public schema `spot::<op>` (every public schema ends with `str backend="auto"`);
  - for each extension backend (backends.EXTENSION_BACKENDS, today "cuda"), the private schema
    `spot::_<op>_<backend>`: the public schema without `backend`, renamed. csrc/cuda/<family>.cu only registers
    its kernels for those names (TORCH_LIBRARY_IMPL, before or after the schema exists: the dispatcher checks the
    kernel's inferred signature against the schema when both are there);
  - the router, under CompositeExplicitAutograd, i.e. once for every device: it validates the arguments (the op's
    check, with value checks) and calls the kernel backends.resolve picks. Registering per dispatch key (CPU,
    CUDA) would duplicate that choice and leave other devices without the reference;
  - the fake implementation, which runs the same check without the value checks.
The ops define no autograd formula (decoding runs without gradients; integer outputs are not differentiable).

Validation happens once per call, in the router, whether the call came through a Python wrapper (spot_kernels.score,
...; see spot_kernels/opdef.py, `call`) or straight through torch.ops.spot.<op>.
"""

from __future__ import annotations

import warnings

import torch

from . import backends, opdef
from .opdef import OpDef

NAMESPACE = "spot"
_BACKEND_ARG = ', str backend="auto")'


def private_schema(schema: str, backend: str) -> str:
    """The schema of `_<op>_<backend>`: the public schema without its trailing `str backend="auto"`, renamed."""
    name, rest = schema.split("(", 1)
    if rest.count(_BACKEND_ARG) != 1:
        raise ValueError(f"the schema of {name} must end its arguments with {_BACKEND_ARG!r}: {schema}")
    return f"_{name}_{backend}(" + rest.replace(_BACKEND_ARG, ")")


def define_schemas(defs, namespace: str = NAMESPACE, public: bool = True,
                   private=tuple(backends.EXTENSION_BACKENDS)) -> torch.library.Library:
    """Define the public and/or private schemas of `defs` in `namespace`; returns the Library (keep it alive).

    Tests define the private schemas a second time in the namespace of the CUDA emulation build ("spot_emu").
    """
    schemas = [d.schema for d in defs] if public else []
    schemas += [private_schema(d.schema, b) for d in defs for b in private]
    try:
        lib = torch.library.Library(namespace, "DEF")
    except RuntimeError:
        # An extension built from older sources that still define the schemas in C++ (TORCH_LIBRARY).
        warnings.warn(f"the {namespace} op namespace is already defined in C++ by a spot_kernels._C built from "
                      "older sources; rebuild it (pip install --no-build-isolation -e .). Defining only the "
                      "missing schemas from Python", stacklevel=3)
        lib = torch.library.Library(namespace, "FRAGMENT")
        schemas = [s for s in schemas if not hasattr(getattr(torch.ops, namespace), s.split("(", 1)[0])]
    for schema in schemas:
        lib.define(schema)
    return lib


def _full_args(schema_args, args: tuple, kwargs: dict) -> list:
    """All schema arguments in order: the dispatcher leaves out trailing arguments that equal their defaults."""
    full = list(args)
    for arg in schema_args[len(args):]:
        full.append(kwargs[arg.name] if arg.name in kwargs else arg.default_value)
    return full


def _router(d: OpDef):
    op = d.name
    schema_args = getattr(torch.ops.spot, op).default._schema.arguments

    def route(*args, **kwargs):
        *call_args, backend = _full_args(schema_args, args, kwargs)
        device = d.check(*call_args, values=True)
        out = backends.resolve(op, device, backend)(*call_args)
        # Contiguous, freshly allocated outputs whatever the backend (the fake impls promise this layout).
        if isinstance(out, torch.Tensor):
            return out.contiguous()
        return tuple(t.contiguous() for t in out)

    route.__name__ = f"spot_{op}_router"
    return route


def register(defs) -> list[torch.library.Library]:
    """Define and implement every op of `defs`; returns the Library objects, which must stay alive."""
    defs = list(defs)
    schema_lib = define_schemas(defs)
    impl_lib = torch.library.Library(NAMESPACE, "IMPL")
    for d in defs:
        opdef.bind(d, getattr(torch.ops.spot, d.name).default._schema.arguments)
        impl_lib.impl(d.name, _router(d), "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{d.name}", d.fake, lib=impl_lib)
    return [schema_lib, impl_lib]
