"""What an op family module declares (`OpDef`) and how its Python wrappers call the registered op (`call`).

spot_kernels/ops/<family>.py imports only this module and spot_kernels/checks.py, never the registration or the
backends: spot_kernels/registry.py reads the op definitions and registers them (and then `bind`s each one here),
spot_kernels/backends.py reads the op families. So the dependencies run one way: registry -> backends -> ops ->
opdef.

`call` only looks at the Python types of the arguments; the router (spot_kernels/registry.py) validates the call.
A value the dispatcher would reject or silently convert (a list for a Tensor, 2**64 or True for an int) never
reaches the router, so here the op's own check runs instead, and raises the op's own error rather than the
dispatcher's.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable

import torch

from . import checks


@dataclass(frozen=True)
class OpDef:
    """One op: its schema string, its argument check and its fake (meta) implementation.

    check(*args, values) takes the schema arguments without `backend`, raises on bad input (value-range checks only
    when `values`) and returns the device of the tensors. fake(*args, backend="auto") returns empty outputs.
    """

    schema: str
    check: Callable
    fake: Callable

    @property
    def name(self) -> str:
        return self.schema.split("(", 1)[0]


_DEFS: dict[str, OpDef] = {}
# op -> ((argument name, schema type), ...), filled by bind() at registration so that torch.compile traces `call`
# as plain dictionary lookups and isinstance tests.
_KINDS: dict[str, tuple[tuple[str, str], ...]] = {}


def bind(d: OpDef, schema_args) -> None:
    """Make `call(d.name, ...)` ready: `schema_args` are the registered schema's arguments (torch's FunctionSchema
    .arguments). Called by spot_kernels/registry.py once the schema is defined."""
    _DEFS[d.name] = d
    _KINDS[d.name] = tuple((a.name, str(a.real_type).replace("Optional[float]", "float?")) for a in schema_args)


def _convertible(kind: str, value) -> bool:
    """Whether the dispatcher takes `value` for a schema argument of type `kind` as it is."""
    if kind == "Tensor":
        return isinstance(value, torch.Tensor)
    if kind == "int":
        return isinstance(value, torch.SymInt) or (isinstance(value, numbers.Integral) and not isinstance(value, bool)
                                                   and -(1 << 63) <= value < (1 << 63))
    if kind == "float":
        return isinstance(value, (numbers.Real, torch.SymFloat, torch.SymInt)) and not isinstance(value, bool)
    if kind == "float?":
        return value is None or _convertible("float", value)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":  # the dispatcher takes 1, 2.0 or None for a bool
        return isinstance(value, (bool, torch.SymBool))
    if kind == "ScalarType":
        return isinstance(value, torch.dtype)
    return True


def call(op: str, *args):
    """torch.ops.spot.<op>(*args), args being every schema argument in order (backend last).

    The router validates the call. An argument the dispatcher would reject or convert is reported here instead,
    by the op's own check (see the module docstring), so that it reads like any other argument error.
    """
    for (name, kind), value in zip(_KINDS[op], args):
        if not _convertible(kind, value):
            _explain(op, args)
            break
    return getattr(torch.ops.spot, op)(*args)


def _explain(op: str, args: tuple) -> None:
    kinds = _KINDS[op]
    checks.tensor_args(op, **{name: v for (name, kind), v in zip(kinds, args) if kind == "Tensor"})
    _DEFS[op].check(*args[:-1], values=True)
    # Nothing to say (e.g. an int beyond int64 where any int >= 0 is valid): the dispatcher's error stands.
