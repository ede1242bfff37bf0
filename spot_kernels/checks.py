"""Argument-check helpers of the `torch.ops.spot.*` ops (docs/ops.md, docs/design.md §7).

The per-op checks are written with these helpers beside each op's schema, in spot_kernels/ops/<family>.py.
Wrong types/dtypes raise TypeError, wrong shapes/ranges/devices raise ValueError; every message names the op and
the argument and says what was expected. Structural checks (type, dtype, shape, device) never read tensor data and
also run in the fake (meta) implementations. Value-range checks read data, so they run for CPU tensors always and
for other devices only when SPOT_CHECK_VALUES=1 (they would force a host synchronisation).
"""

from __future__ import annotations

import math
import numbers
import operator
import os

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
F32_64 = (torch.float32, torch.float64)
I64 = (torch.int64,)
BOOL = (torch.bool,)
SEED_LIMIT = 1 << 63
# The largest finite float32: a temperature above it becomes inf when the logits are scaled in float32.
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
# Anything sized by the caller (an op's output, a model built from a config, a pass's tree and logits) is estimated
# before it is allocated and refused above this many GB (decimal); override with SPOT_MEMORY_LIMIT_GB. The one
# estimate check of the project (`size`), shared by the ops here and by spot's targets, drafters and decoder.
MEMORY_LIMIT_GB = 16.0


def limit_bytes(variable: str, default_gb: float) -> int:
    """A limit in bytes from the environment variable `variable` (GB, decimal; read at each call), else
    `default_gb`. A value that is not a finite number >= 0 is refused, naming the variable."""
    value = os.environ.get(variable)
    if value is None:
        return int(default_gb * 1e9)
    try:
        gb = float(value)
    except ValueError:
        raise ValueError(f"{variable}: expected a number of GB, got {value!r}") from None
    if not math.isfinite(gb) or gb < 0:
        raise ValueError(f"{variable}: expected a finite number of GB >= 0, got {value!r}")
    return int(gb * 1e9)


def memory_limit_bytes() -> int:
    return limit_bytes("SPOT_MEMORY_LIMIT_GB", MEMORY_LIMIT_GB)


def size(what: str, nbytes: int) -> None:
    """Refuse, before allocating, what an estimate says needs more than SPOT_MEMORY_LIMIT_GB: `what` names the
    arguments that set the size ("... give"), the message adds the estimate and the limit."""
    limit = memory_limit_bytes()
    if nbytes > limit:
        raise ValueError(f"{what} {nbytes / 1e9:.3g} GB, above the limit of {limit / 1e9:.3g} GB "
                         "(SPOT_MEMORY_LIMIT_GB)")


def footprint(op: str, out_bytes: int, **tensors: torch.Tensor) -> None:
    """Refuse (`size`), before anything is allocated or read, a call whose input tensors, each at its logical size
    (numel x element size), plus its outputs (`out_bytes`) need more than SPOT_MEMORY_LIMIT_GB. A broadcast
    (zero-stride) input of 2**40 elements holds one element but is read, and copied by any kernel that makes it
    contiguous, as 2**40: it counts at that size. Runs after the structural checks, before the value checks (which
    compute over the inputs)."""
    total = out_bytes
    for t in tensors.values():
        total += t.numel() * t.element_size()
    if total <= memory_limit_bytes():  # the common case: no message is built
        return
    sizes = {name: t.numel() * t.element_size() for name, t in tensors.items()}
    largest = max(sizes, key=sizes.get) if sizes else None
    what = f"spot.{op}: its inputs at their logical size"
    if largest is not None:
        t = tensors[largest]
        what += f" ({largest}: shape {list(t.shape)}, {_dtype_names((t.dtype,))}, {sizes[largest] / 1e9:.3g} GB)"
    size(f"{what} and outputs ({out_bytes / 1e9:.3g} GB) need", total)


def values_enabled(device: torch.device) -> bool:
    """Whether value-range checks may read tensors on `device` (see the module docstring)."""
    if device.type == "cpu":
        return True
    return device.type != "meta" and os.environ.get("SPOT_CHECK_VALUES", "") == "1"


def _dtype_names(dtypes) -> str:
    return "/".join(str(d).replace("torch.", "") for d in dtypes)


def tensor(op: str, name: str, t, dtypes, ndim: int | None = None, min_ndim: int | None = None) -> None:
    """t must be a Tensor with a dtype in `dtypes` and the given number of dimensions."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"spot.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"spot.{op}: {name} must have dtype {_dtype_names(dtypes)}, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"spot.{op}: {name} must have {ndim} dimensions, got shape {list(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"spot.{op}: {name} must have at least {min_ndim} dimensions, got shape {list(t.shape)}")


def tensor_args(op: str, **named) -> None:
    """Each argument must be a Tensor (checked before the schema conversion, whose errors are less clear)."""
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"spot.{op}: {name} must be a torch.Tensor, got {type(t).__name__}")


def shape(op: str, name: str, t: torch.Tensor, expected, what: str = "") -> None:
    """t.shape must equal `expected`; `what` explains where the expected shape comes from."""
    if tuple(t.shape) != tuple(expected):
        hint = f" ({what})" if what else ""
        raise ValueError(f"spot.{op}: {name} must have shape {list(expected)}{hint}, got {list(t.shape)}")


def same_device(op: str, **tensors: torch.Tensor) -> torch.device:
    """All tensors on one device; returns it."""
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(
                f"spot.{op}: {name} is on {t.device} but {first_name} is on {first.device}; "
                "all tensors must be on one device"
            )
    return first.device


# The widest top-K list `score` returns and the most children `select_children` drafts per node: outputs grow with
# it (and a K beyond the vocabulary or block is padding), so a larger K is refused before anything is allocated.
MAX_K = 1 << 16


def integer(op: str, name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """A Python integer (not bool) with lo <= value < hi; returns it as int."""
    if isinstance(value, bool):
        raise TypeError(f"spot.{op}: {name} must be an int, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"spot.{op}: {name} must be an int, got {type(value).__name__}") from None
    if (lo is not None and value < lo) or (hi is not None and value >= hi):
        lo_s = "-inf" if lo is None else str(lo)
        hi_s = "inf" if hi is None else str(hi)
        raise ValueError(f"spot.{op}: {name} must lie in [{lo_s}, {hi_s}), got {value}")
    return value


def seed(op: str, value) -> int:
    """Seeds lie in [0, 2^63) (docs/noise.md)."""
    return integer(op, "seed", value, 0, SEED_LIMIT)


def temperature(op: str, value) -> float:
    """A real >= 0 (0 = greedy), finite in float32 (the logits are scaled in float32 or float64)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"spot.{op}: temperature must be a float, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or value > FLOAT32_MAX:
        raise ValueError(f"spot.{op}: temperature must be finite and >= 0, and finite in float32 (<= "
                         f"{FLOAT32_MAX:.4g}), got {value}")
    return value


def choice(op: str, name: str, value, choices) -> str:
    if not isinstance(value, str):
        raise TypeError(f"spot.{op}: {name} must be a str, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"spot.{op}: {name} must be one of {tuple(choices)}, got {value!r}")
    return value


def first_bad(bad: torch.Tensor) -> str:
    """'at index (i, j, ...)' of the first True entry of a bool tensor (host sync: only on the error path)."""
    index = tuple(int(i) for i in torch.nonzero(bad)[0].tolist())
    return f"at index {index}"


def at_least(op: str, name: str, t: torch.Tensor, lo: int, what: str = "") -> None:
    """Every entry >= lo (value check)."""
    bad = t < lo
    if bool(bad.any()):
        hint = f" ({what})" if what else ""
        raise ValueError(f"spot.{op}: {name} must be >= {lo}{hint}; got {t[bad][0].item()} {first_bad(bad)}")


def in_range(op: str, name: str, t: torch.Tensor, lo: int, hi: int, where: torch.Tensor | None = None,
             what: str = "") -> None:
    """Every entry (where `where` is True) in [lo, hi) (value check)."""
    bad = (t < lo) | (t >= hi)
    if where is not None:
        bad = bad & where
    if bool(bad.any()):
        hint = f" ({what})" if what else ""
        raise ValueError(
            f"spot.{op}: {name} must lie in [{lo}, {hi}){hint}; got {t[bad][0].item()} {first_bad(bad)}"
        )
