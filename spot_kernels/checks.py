"""Argument validation for the `torch.ops.spot.*` ops (docs/ops.md, DESIGN §7).

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
CONFIDENCE_KINDS = ("prob", "raw_prob", "margin", "neg_entropy")
SEED_LIMIT = 1 << 63


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
    """A finite real >= 0 (0 = greedy)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"spot.{op}: temperature must be a float, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"spot.{op}: temperature must be finite and >= 0, got {value}")
    return value


def choice(op: str, name: str, value, choices) -> str:
    if not isinstance(value, str):
        raise TypeError(f"spot.{op}: {name} must be a str, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"spot.{op}: {name} must be one of {tuple(choices)}, got {value!r}")
    return value


def _first_bad(bad: torch.Tensor) -> str:
    """'at index (i, j, ...)' of the first True entry of a bool tensor (host sync: only on the error path)."""
    index = tuple(int(i) for i in torch.nonzero(bad)[0].tolist())
    return f"at index {index}"


def at_least(op: str, name: str, t: torch.Tensor, lo: int, what: str = "") -> None:
    """Every entry >= lo (value check)."""
    bad = t < lo
    if bool(bad.any()):
        hint = f" ({what})" if what else ""
        raise ValueError(f"spot.{op}: {name} must be >= {lo}{hint}; got {t[bad][0].item()} {_first_bad(bad)}")


def in_range(op: str, name: str, t: torch.Tensor, lo: int, hi: int, where: torch.Tensor | None = None,
             what: str = "") -> None:
    """Every entry (where `where` is True) in [lo, hi) (value check)."""
    bad = (t < lo) | (t >= hi)
    if where is not None:
        bad = bad & where
    if bool(bad.any()):
        hint = f" ({what})" if what else ""
        raise ValueError(
            f"spot.{op}: {name} must lie in [{lo}, {hi}){hint}; got {t[bad][0].item()} {_first_bad(bad)}"
        )


# ----------------------------------------------------------------------------------------------- per-op validators
# Each takes the op's arguments (without `backend`) and `values` (run value-range checks), and returns the device.

_I64 = (torch.int64,)
_BOOL = (torch.bool,)
_F32_64 = (torch.float32, torch.float64)


def noise_uniform(seed_, rows, positions, steps, vocab_ids, *, values: bool) -> torch.device:
    op = "noise_uniform"
    seed(op, seed_)
    named = {"rows": rows, "positions": positions, "steps": steps, "vocab_ids": vocab_ids}
    for name, t in named.items():
        tensor(op, name, t, _I64)
    try:
        torch.broadcast_shapes(*(t.shape for t in named.values()))
    except RuntimeError:
        shapes = ", ".join(f"{n}={list(t.shape)}" for n, t in named.items())
        raise ValueError(f"spot.{op}: rows, positions, steps and vocab_ids must broadcast; got {shapes}") from None
    return same_device(op, **named)


def score(logits, masked, seed_, rows, block_start, steps, temperature_, confidence, top_k, *,
          values: bool) -> torch.device:
    op = "score"
    tensor(op, "logits", logits, FLOAT_DTYPES, min_ndim=2)
    if logits.shape[-1] < 1:
        raise ValueError(f"spot.{op}: logits must have a vocabulary dimension V >= 1, got shape {list(logits.shape)}")
    lead = tuple(logits.shape[:-2])
    tensor(op, "masked", masked, _BOOL)
    shape(op, "masked", masked, tuple(logits.shape[:-1]), "logits.shape[:-1]")
    for name, t in (("rows", rows), ("block_start", block_start), ("steps", steps)):
        tensor(op, name, t, _I64)
        shape(op, name, t, lead, "logits.shape[:-2]; use .expand() to broadcast")
    seed(op, seed_)
    temperature(op, temperature_)
    choice(op, "confidence", confidence, CONFIDENCE_KINDS)
    integer(op, "top_k", top_k, 1)
    device = same_device(op, logits=logits, masked=masked, rows=rows, block_start=block_start, steps=steps)
    if values and values_enabled(device):
        at_least(op, "steps", steps, 0, "commits already made inside the block")
        at_least(op, "block_start", block_start, 0, "an absolute position")
    return device


def select_children(position_logits, masked, path_logprob, stale_topk_probs, stale_topk_ids, seed_, rows,
                    block_start, steps, temperature_, k, *, values: bool) -> torch.device:
    op = "select_children"
    tensor(op, "position_logits", position_logits, _F32_64, ndim=2)
    frontier, block = position_logits.shape
    tensor(op, "masked", masked, _BOOL)
    shape(op, "masked", masked, (frontier, block), "position_logits.shape")
    tensor(op, "path_logprob", path_logprob, (position_logits.dtype,))
    shape(op, "path_logprob", path_logprob, (frontier,), "[F] from position_logits")
    tensor(op, "stale_topk_probs", stale_topk_probs, _F32_64, ndim=3)
    if tuple(stale_topk_probs.shape[:2]) != (frontier, block):
        raise ValueError(
            f"spot.{op}: stale_topk_probs must have shape [F, B, K] = [{frontier}, {block}, K] "
            f"(F, B from position_logits), got {list(stale_topk_probs.shape)}"
        )
    tensor(op, "stale_topk_ids", stale_topk_ids, _I64)
    shape(op, "stale_topk_ids", stale_topk_ids, tuple(stale_topk_probs.shape), "stale_topk_probs.shape")
    for name, t in (("rows", rows), ("block_start", block_start), ("steps", steps)):
        tensor(op, name, t, _I64)
        shape(op, name, t, (frontier,), "[F] from position_logits")
    seed(op, seed_)
    temperature(op, temperature_)
    integer(op, "k", k, 1)
    device = same_device(op, position_logits=position_logits, masked=masked, path_logprob=path_logprob,
                         stale_topk_probs=stale_topk_probs, stale_topk_ids=stale_topk_ids, rows=rows,
                         block_start=block_start, steps=steps)
    if values and values_enabled(device):
        at_least(op, "stale_topk_ids", stale_topk_ids, -1, "token ids, -1 for padding")
        at_least(op, "steps", steps, 0, "commits already made inside the block")
        at_least(op, "block_start", block_start, 0, "an absolute position")
    return device


def tree(op: str, key_start, prefix_len, num_new, num_nodes, block_size, *, values: bool) -> torch.device:
    """The shared arguments of tree_mask, tree_mask_additive, tree_mask_packed and tree_position_ids."""
    tensor(op, "key_start", key_start, _I64, ndim=1)
    prefix_len = integer(op, "prefix_len", prefix_len, 0)
    num_new = integer(op, "num_new", num_new, 0)
    if num_new > prefix_len:
        raise ValueError(f"spot.{op}: num_new must be <= prefix_len (the new tokens are the last num_new prefix "
                         f"keys), got num_new={num_new}, prefix_len={prefix_len}")
    integer(op, "num_nodes", num_nodes, 0)
    integer(op, "block_size", block_size, 1)
    device = key_start.device
    if values and values_enabled(device):
        in_range(op, "key_start", key_start, 0, prefix_len + 1, what="first valid key, at most prefix_len")
    return device


def additive_dtype(op: str, dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"spot.{op}: dtype must be a floating torch.dtype (for 0 / -inf), got {dtype}")


def verify_tree(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, *,
                values: bool) -> torch.device:
    op = "verify_tree"
    tensor(op, "parents", parents, _I64, ndim=2)
    b, n = parents.shape
    if n < 1:
        raise ValueError(f"spot.{op}: parents must have N >= 1 nodes (node 0 is the root), got shape {[b, n]}")
    named = {"draft_pos": draft_pos, "draft_tokens": draft_tokens, "target_pos": target_pos,
             "target_tokens": target_tokens}
    for name, t in named.items():
        tensor(op, name, t, _I64)
        shape(op, name, t, (b, n), "parents.shape")
    tensor(op, "block", block, _I64, ndim=2)
    if block.shape[0] != b:
        raise ValueError(f"spot.{op}: block must have shape [b, B] with b = {b} (from parents), "
                         f"got {list(block.shape)}")
    device = same_device(op, parents=parents, **named, block=block)
    if values and values_enabled(device):
        width = block.shape[1]
        node = torch.arange(n, device=device).expand(b, n)
        if bool((parents[:, 0] != -1).any()):
            raise ValueError(f"spot.{op}: parents[:, 0] must be -1 (node 0 is the root); "
                             f"got {parents[:, 0].tolist()[:8]}")
        bad = (node > 0) & ((parents < -1) | (parents >= node))
        if bool(bad.any()):
            raise ValueError(f"spot.{op}: parents must satisfy -1 <= parents[:, i] < i (parents precede children); "
                             f"got {parents[bad][0].item()} {_first_bad(bad)}")
        child = (node > 0) & (parents >= 0)
        active = child | (node == 0)
        in_range(op, "draft_pos", draft_pos, 0, width, child, "a block position, for every non-root active node")
        at_least(op, "draft_tokens", torch.where(child, draft_tokens, 0), 0, "a token id, for every non-root "
                 "active node")
        in_range(op, "target_pos", target_pos, -1, width, active, "a block position or -1, for every active node")
        at_least(op, "target_tokens", torch.where(active & (target_pos >= 0), target_tokens, 0), 0,
                 "a token id wherever target_pos >= 0")
    return device


def attention_scale(op: str, value) -> float | None:
    """None (1/sqrt(D)) or a finite real > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"spot.{op}: scale must be a float or None, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"spot.{op}: scale must be finite and > 0 (or None for 1/sqrt(D)), got {value}")
    return value


def tree_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale, *, values: bool) -> torch.device:
    op = "tree_attention"
    tensor(op, "q", q, FLOAT_DTYPES, ndim=5)
    b, hq, n, block, dim = q.shape
    if dim < 1:
        raise ValueError(f"spot.{op}: q must have a head dimension D >= 1, got shape {list(q.shape)}")
    same = (q.dtype,)
    tensor(op, "k_prefix", k_prefix, same, ndim=4)
    if k_prefix.shape[0] != b or k_prefix.shape[3] != dim:
        raise ValueError(f"spot.{op}: k_prefix must have shape [b, Hkv, P, D] = [{b}, Hkv, P, {dim}] (b, D from q), "
                         f"got {list(k_prefix.shape)}")
    hkv, prefix = k_prefix.shape[1], k_prefix.shape[2]
    if hkv < 1 or hq % hkv != 0:
        raise ValueError(f"spot.{op}: the query heads Hq = {hq} must be a multiple of the key/value heads "
                         f"Hkv = {hkv} >= 1 (grouped-query attention)")
    tensor(op, "v_prefix", v_prefix, same, ndim=4)
    shape(op, "v_prefix", v_prefix, tuple(k_prefix.shape), "k_prefix.shape")
    tensor(op, "k_nodes", k_nodes, same, ndim=5)
    shape(op, "k_nodes", k_nodes, (b, hkv, n, block, dim), "[b, Hkv, N, B, D] from q and k_prefix")
    tensor(op, "v_nodes", v_nodes, same, ndim=5)
    shape(op, "v_nodes", v_nodes, (b, hkv, n, block, dim), "[b, Hkv, N, B, D] from q and k_prefix")
    tensor(op, "key_start", key_start, _I64, ndim=1)
    shape(op, "key_start", key_start, (b,), "[b] from q")
    attention_scale(op, scale)
    device = same_device(op, q=q, k_prefix=k_prefix, v_prefix=v_prefix, k_nodes=k_nodes, v_nodes=v_nodes,
                         key_start=key_start)
    if values and values_enabled(device):
        in_range(op, "key_start", key_start, 0, prefix + 1, what="first valid prefix key, at most P")
    return device
