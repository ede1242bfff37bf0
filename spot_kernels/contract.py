"""The two rules that both an op's contract (spot_kernels/ops/) and its oracle (spot_kernels/reference/) state:
the dtype an op computes in, and which key a tree-pass query sees. They live here, below both, so that ops/
never imports the reference it is tested against (docs/ops.md states them in words)."""

from __future__ import annotations

import torch


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def tree_visible(
    key_start: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    prefix_len: int,
    num_new: int,
    block_size: int,
) -> torch.Tensor:
    """The tree mask rule on broadcastable int64 index tensors (key_start, q, k) -> bool (docs/ops.md, "Tree
    attention masks"): a new token sees the prefix from key_start up to itself, a node token the prefix and its own
    node's block; a padding query (kq < key_start) sees only itself."""
    kq = prefix_len - num_new + q  # key index of a new token
    new_row = torch.where(kq < key_start, k == kq, (k >= key_start) & (k <= kq))
    node = torch.div(q - num_new, block_size, rounding_mode="floor")
    key_node = torch.div(k - prefix_len, block_size, rounding_mode="floor")
    node_row = (k >= key_start) & ((k < prefix_len) | (key_node == node))
    return torch.where(q < num_new, new_row, node_row)
