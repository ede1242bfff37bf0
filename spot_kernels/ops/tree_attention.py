"""Tree attention (docs/ops.md, "Tree attention masks" and "Shared-prefix tree attention"): the mask builders
spot::tree_mask, tree_mask_additive, tree_mask_packed, tree_position_ids, the fused spot::tree_attention, and the
Python-only FlexAttention mask_mod; schemas, wrappers, checks and fakes."""

from __future__ import annotations

import math
import numbers

import torch

from .. import checks
from ..contract import tree_visible
from ..opdef import OpDef, call

SCHEMAS = {
    "tree_mask": ('tree_mask(Tensor key_start, int prefix_len, int num_new, int num_nodes, int block_size, '
                  'str backend="auto") -> Tensor'),
    "tree_mask_additive": ('tree_mask_additive(Tensor key_start, int prefix_len, int num_new, int num_nodes, '
                           'int block_size, ScalarType dtype, str backend="auto") -> Tensor'),
    "tree_mask_packed": ('tree_mask_packed(Tensor key_start, int prefix_len, int num_new, int num_nodes, '
                         'int block_size, str backend="auto") -> Tensor'),
    "tree_position_ids": ('tree_position_ids(Tensor key_start, int prefix_len, int num_new, int num_nodes, '
                          'int block_size, str backend="auto") -> Tensor'),
    "tree_attention": ('tree_attention(Tensor q, Tensor k_prefix, Tensor v_prefix, Tensor k_nodes, Tensor v_nodes, '
                       'Tensor key_start, float? scale=None, str backend="auto") -> Tensor'),
}

# ------------------------------------------------------------------------------------------------ tree masks

_TREE_ARGS = """
    Args:
        key_start: [b] int64, first valid key of each row (rows are left-padded), 0 <= key_start <= prefix_len.
        prefix_len: cached prefix keys, including the `num_new` tokens appended in this pass.
        num_new: new prefix tokens queried in this pass, 0 <= num_new <= prefix_len.
        num_nodes: block copies (tree nodes) scored in this pass, >= 0.
        block_size: B >= 1.
        backend: see spot_kernels.ops.
    Layout: Q = num_new + num_nodes * block_size queries (new tokens, then node tokens), K = prefix_len +
    num_nodes * block_size keys (prefix, then node tokens). New tokens attend causally to valid keys; node tokens
    attend to the valid prefix and bidirectionally to their own node only.
"""


def tree_mask(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int,
              backend: str = "auto") -> torch.Tensor:
    return call("tree_mask", key_start, prefix_len, num_new, num_nodes, block_size, backend)


tree_mask.__doc__ = f"""Boolean tree-attention mask, True = attend: bool [b, 1, Q, K] (SDPA / Hugging Face 4D).
{_TREE_ARGS}"""


def tree_mask_additive(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int,
                       dtype: torch.dtype, backend: str = "auto") -> torch.Tensor:
    return call("tree_mask_additive", key_start, prefix_len, num_new, num_nodes, block_size, dtype, backend)


tree_mask_additive.__doc__ = f"""Additive tree-attention mask: [b, 1, Q, K] of the floating `dtype`, 0 or -inf.
{_TREE_ARGS}"""


def tree_mask_packed(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int,
                     backend: str = "auto") -> torch.Tensor:
    return call("tree_mask_packed", key_start, prefix_len, num_new, num_nodes, block_size, backend)


tree_mask_packed.__doc__ = f"""Bit-packed tree-attention mask: int32 [b, Q, ceil(K / 32)], key k is bit k % 32 of
word k // 32 (two's complement, so bit 31 makes the word negative).
{_TREE_ARGS}"""


def tree_position_ids(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int,
                      backend: str = "auto") -> torch.Tensor:
    return call("tree_position_ids", key_start, prefix_len, num_new, num_nodes, block_size, backend)


tree_position_ids.__doc__ = f"""Position ids of the queries: int64 [b, Q]. New token q (key index
kq = prefix_len - num_new + q) -> max(kq - key_start, 0); node token at block position j ->
prefix_len - key_start + j.
{_TREE_ARGS}"""


def tree_mask_mod(key_start: torch.Tensor, prefix_len: int, num_new: int, block_size: int):
    """The tree_mask rule as a FlexAttention mask_mod(b, h, q_idx, kv_idx) -> bool tensor.

    Reference only: a plain Python function (not a torch.ops.spot op, no `backend`) on the rule the reference
    tree_mask computes (spot_kernels/contract.py); FlexAttention compiles it into its own kernel.
    Use with torch.nn.attention.flex_attention.create_block_mask(mask_mod, b, None, Q, K) where
    Q = num_new + num_nodes * block_size and K = prefix_len + num_nodes * block_size.

    Args:
        key_start: [b] int64 (captured; value-checked now on CPU), 0 <= key_start <= prefix_len.
        prefix_len, num_new, block_size: as for tree_mask.
    """
    check_tree("tree_mask_mod", key_start, prefix_len, num_new, 0, block_size, values=True)

    def mask_mod(b, h, q_idx, kv_idx):
        return tree_visible(key_start[b], q_idx, kv_idx, prefix_len, num_new, block_size)

    return mask_mod


def check_tree(op: str, key_start, prefix_len, num_new, num_nodes, block_size, *, values: bool) -> torch.device:
    """The shared arguments of tree_mask, tree_mask_additive, tree_mask_packed, tree_position_ids, tree_mask_mod."""
    checks.tensor(op, "key_start", key_start, checks.I64, ndim=1)
    prefix_len = checks.integer(op, "prefix_len", prefix_len, 0)
    num_new = checks.integer(op, "num_new", num_new, 0)
    if num_new > prefix_len:
        raise ValueError(f"spot.{op}: num_new must be <= prefix_len (the new tokens are the last num_new prefix "
                         f"keys), got num_new={num_new}, prefix_len={prefix_len}")
    num_nodes = checks.integer(op, "num_nodes", num_nodes, 0)
    block_size = checks.integer(op, "block_size", block_size, 1)
    q, k = _tree_sizes(prefix_len, num_new, num_nodes, block_size)
    # the output (the packed mask: the reference's int64 working copy), estimated before anything is allocated
    per_query = {"tree_mask": k, "tree_mask_additive": 8 * k, "tree_mask_packed": 8 * k,
                 "tree_position_ids": 8}.get(op, 0)
    checks.size(f"spot.{op}: prefix_len={prefix_len}, num_new={num_new}, num_nodes={num_nodes}, "
                f"block_size={block_size} give {q} queries x {k} keys per row, an output of",
                len(key_start) * q * per_query)
    device = key_start.device
    if values and checks.values_enabled(device):
        checks.in_range(op, "key_start", key_start, 0, prefix_len + 1, what="first valid key, at most prefix_len")
    return device


def _additive_dtype(op: str, dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"spot.{op}: dtype must be a floating torch.dtype (for 0 / -inf), got {dtype}")


def _tree_sizes(prefix_len, num_new, num_nodes, block_size):
    """(Q, K): queries and keys of the layout above."""
    return num_new + num_nodes * block_size, prefix_len + num_nodes * block_size


def _mask_op(op: str, output) -> OpDef:
    """The OpDef of a mask op: the shared check, and a fake of `output(key_start, Q, K, *extra)`."""

    def check(key_start, prefix_len, num_new, num_nodes, block_size, *extra, values: bool) -> torch.device:
        if extra:  # tree_mask_additive's dtype
            _additive_dtype(op, extra[0])
        return check_tree(op, key_start, prefix_len, num_new, num_nodes, block_size, values=values)

    def fake(key_start, prefix_len, num_new, num_nodes, block_size, *extra, backend="auto"):
        extra = tuple(e for e in extra if not isinstance(e, str))  # `backend` passed positionally
        check(key_start, prefix_len, num_new, num_nodes, block_size, *extra, values=False)
        return output(key_start, *_tree_sizes(prefix_len, num_new, num_nodes, block_size), *extra)

    return OpDef(SCHEMAS[op], check, fake)


# -------------------------------------------------------------------------------------- shared-prefix attention

def tree_attention(
    q: torch.Tensor,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
    k_nodes: torch.Tensor,
    v_nodes: torch.Tensor,
    key_start: torch.Tensor,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Shared-prefix tree attention: N node copies of a block attend to one cached prefix and to themselves.

    Args:
        q: [b, Hq, N, B, D] float16/bfloat16/float32/float64, the queries of N nodes of a B-token block.
        k_prefix, v_prefix: [b, Hkv, P, D], same dtype: the cached prefix shared by every node of a row;
            Hq must be a multiple of Hkv (query head h reads key/value head h // (Hq // Hkv)).
        k_nodes, v_nodes: [b, Hkv, N, B, D], same dtype: each node's own keys/values.
        key_start: [b] int64, first valid prefix key of each row (left padding), 0 <= key_start <= P.
        scale: softmax scale, finite and > 0; None means 1/sqrt(D).
        backend: see spot_kernels.ops.
    Returns:
        [b, Hq, N, B, D] in q's dtype: query (b, h, n, i) attends to prefix keys key_start[b] <= k < P and to the
        B keys of node n (bidirectionally), never to another node.
    """
    return call("tree_attention", q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale, backend)


def _attention_scale(op: str, value) -> float | None:
    """None (1/sqrt(D)) or a finite real > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"spot.{op}: scale must be a float or None, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"spot.{op}: scale must be finite and > 0 (or None for 1/sqrt(D)), got {value}")
    return value


def check_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale, *, values: bool) -> torch.device:
    op = "tree_attention"
    checks.tensor(op, "q", q, checks.FLOAT_DTYPES, ndim=5)
    b, hq, n, block, dim = q.shape
    if dim < 1:
        raise ValueError(f"spot.{op}: q must have a head dimension D >= 1, got shape {list(q.shape)}")
    same = (q.dtype,)
    checks.tensor(op, "k_prefix", k_prefix, same, ndim=4)
    if k_prefix.shape[0] != b or k_prefix.shape[3] != dim:
        raise ValueError(f"spot.{op}: k_prefix must have shape [b, Hkv, P, D] = [{b}, Hkv, P, {dim}] (b, D from q), "
                         f"got {list(k_prefix.shape)}")
    hkv, prefix = k_prefix.shape[1], k_prefix.shape[2]
    if hkv < 1 or hq % hkv != 0:
        raise ValueError(f"spot.{op}: the query heads Hq = {hq} must be a multiple of the key/value heads "
                         f"Hkv = {hkv} >= 1 (grouped-query attention)")
    checks.tensor(op, "v_prefix", v_prefix, same, ndim=4)
    checks.shape(op, "v_prefix", v_prefix, tuple(k_prefix.shape), "k_prefix.shape")
    checks.tensor(op, "k_nodes", k_nodes, same, ndim=5)
    checks.shape(op, "k_nodes", k_nodes, (b, hkv, n, block, dim), "[b, Hkv, N, B, D] from q and k_prefix")
    checks.tensor(op, "v_nodes", v_nodes, same, ndim=5)
    checks.shape(op, "v_nodes", v_nodes, (b, hkv, n, block, dim), "[b, Hkv, N, B, D] from q and k_prefix")
    checks.tensor(op, "key_start", key_start, checks.I64, ndim=1)
    checks.shape(op, "key_start", key_start, (b,), "[b] from q")
    _attention_scale(op, scale)
    device = checks.same_device(op, q=q, k_prefix=k_prefix, v_prefix=v_prefix, k_nodes=k_nodes, v_nodes=v_nodes,
                                key_start=key_start)
    checks.footprint(op, q.numel() * q.element_size(), q=q, k_prefix=k_prefix, v_prefix=v_prefix, k_nodes=k_nodes,
                     v_nodes=v_nodes, key_start=key_start)
    if values and checks.values_enabled(device):
        checks.in_range(op, "key_start", key_start, 0, prefix + 1, what="first valid prefix key, at most P")
    return device


def fake_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale=None, backend="auto"):
    check_attention(q, k_prefix, v_prefix, k_nodes, v_nodes, key_start, scale, values=False)
    return q.new_empty(q.shape)


OPS = [
    _mask_op("tree_mask", lambda ks, n_q, n_k: ks.new_empty((ks.shape[0], 1, n_q, n_k), dtype=torch.bool)),
    _mask_op("tree_mask_additive", lambda ks, n_q, n_k, dtype: ks.new_empty((ks.shape[0], 1, n_q, n_k), dtype=dtype)),
    _mask_op("tree_mask_packed",
             lambda ks, n_q, n_k: ks.new_empty((ks.shape[0], n_q, (n_k + 31) // 32), dtype=torch.int32)),
    _mask_op("tree_position_ids", lambda ks, n_q, n_k: ks.new_empty((ks.shape[0], n_q), dtype=torch.int64)),
    OpDef(SCHEMAS["tree_attention"], check_attention, fake_attention),
]
