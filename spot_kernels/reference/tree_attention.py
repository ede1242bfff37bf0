"""Tree attention mask builders (docs/ops.md, "Tree attention masks").

Queries: `num_new` new prefix tokens, then `num_nodes * block_size` node tokens. Keys: `prefix_len` prefix keys
(the last `num_new` are the new tokens), then the node tokens. Every node sees the (left-padded) prefix and its
own block bidirectionally; new tokens are causal; padding queries see only themselves so no row is empty.
"""

from __future__ import annotations

import math

import torch

from ..contract import tree_visible


def tree_mask(key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int) -> torch.Tensor:
    """Reference for spot::tree_mask. key_start: [b] int64 -> bool [b, 1, Q, K], True = attend."""
    device = key_start.device
    n_q = num_new + num_nodes * block_size
    n_k = prefix_len + num_nodes * block_size
    q = torch.arange(n_q, dtype=torch.int64, device=device)[:, None]
    k = torch.arange(n_k, dtype=torch.int64, device=device)[None, :]
    mask = tree_visible(key_start[:, None, None], q, k, prefix_len, num_new, block_size)
    return mask.expand(key_start.shape[0], n_q, n_k)[:, None].contiguous()


def tree_mask_additive(
    key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int, dtype: torch.dtype
) -> torch.Tensor:
    """Reference for spot::tree_mask_additive: [b, 1, Q, K] of `dtype`, 0 where visible, -inf elsewhere."""
    mask = tree_mask(key_start, prefix_len, num_new, num_nodes, block_size)
    zero = torch.zeros((), dtype=dtype, device=key_start.device)
    return torch.where(mask, zero, torch.full((), -math.inf, dtype=dtype, device=key_start.device))


def tree_mask_packed(
    key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int
) -> torch.Tensor:
    """Reference for spot::tree_mask_packed: int32 [b, Q, ceil(K / 32)], bit k % 32 of word k // 32."""
    mask = tree_mask(key_start, prefix_len, num_new, num_nodes, block_size)[:, 0]
    b, n_q, n_k = mask.shape
    n_words = (n_k + 31) // 32
    padded = torch.zeros((b, n_q, n_words * 32), dtype=torch.int64, device=mask.device)
    padded[..., :n_k] = mask.to(torch.int64)
    bits = torch.bitwise_left_shift(torch.ones((), dtype=torch.int64, device=mask.device),
                                    torch.arange(32, dtype=torch.int64, device=mask.device))
    words = (padded.view(b, n_q, n_words, 32) * bits).sum(-1)  # in [0, 2^32)
    words = words - ((words >> 31) & 1) * (1 << 32)  # reinterpret as two's-complement int32
    return words.to(torch.int32)


def tree_position_ids(
    key_start: torch.Tensor, prefix_len: int, num_new: int, num_nodes: int, block_size: int
) -> torch.Tensor:
    """Reference for spot::tree_position_ids: int64 [b, Q]. New token q -> max(kq - key_start, 0);
    node token at block position j -> prefix_len - key_start + j (every node repeats the block's positions)."""
    device = key_start.device
    ks = key_start[:, None]
    kq = prefix_len - num_new + torch.arange(num_new, dtype=torch.int64, device=device)
    new = torch.clamp(kq[None, :] - ks, min=0)
    j = torch.arange(block_size, dtype=torch.int64, device=device).repeat(num_nodes)
    node = prefix_len - ks + j[None, :]
    return torch.cat([new, node], dim=-1).contiguous()


def tree_attention(
    q: torch.Tensor,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
    k_nodes: torch.Tensor,
    v_nodes: torch.Tensor,
    key_start: torch.Tensor,
    scale: float | None,
) -> torch.Tensor:
    """Reference for spot::tree_attention (docs/ops.md, "Shared-prefix tree attention").

    q: [b, Hq, N, B, D]; k_prefix, v_prefix: [b, Hkv, P, D]; k_nodes, v_nodes: [b, Hkv, N, B, D]; key_start: [b].
    Every query (b, h, n, i) attends to prefix keys key_start[b] <= k < P and to the B keys of its own node n,
    with one softmax over both, in float32 (float64 for float64 inputs). Returns [b, Hq, N, B, D] in q's dtype.
    """
    b, hq, n, block, dim = q.shape
    hkv, prefix = k_prefix.shape[1], k_prefix.shape[2]
    group = hq // hkv
    cdtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    if scale is None:
        scale = 1.0 / math.sqrt(dim)
    # Grouped heads: query head h = kv * group + g reads kv head kv.
    qg = q.to(cdtype).reshape(b, hkv, group, n * block, dim)
    kp = k_prefix.to(cdtype)[:, :, None]  # [b, Hkv, 1, P, D]
    vp = v_prefix.to(cdtype)[:, :, None]
    s_prefix = torch.matmul(qg, kp.transpose(-1, -2)) * scale  # [b, Hkv, G, N*B, P]
    visible = torch.arange(prefix, device=q.device)[None, :] >= key_start[:, None]  # [b, P]
    s_prefix = s_prefix.masked_fill(~visible[:, None, None, None, :], -math.inf)
    qn = qg.reshape(b, hkv, group, n, block, dim)
    kn = k_nodes.to(cdtype)[:, :, None]  # [b, Hkv, 1, N, B, D]
    vn = v_nodes.to(cdtype)[:, :, None]
    s_node = torch.matmul(qn, kn.transpose(-1, -2)) * scale  # [b, Hkv, G, N, B, B]
    scores = torch.cat([s_prefix.reshape(b, hkv, group, n, block, prefix), s_node], dim=-1)
    probs = torch.softmax(scores, dim=-1)  # never an empty row: a node always sees its own B keys
    p_prefix, p_node = probs[..., :prefix], probs[..., prefix:]
    out = torch.matmul(p_prefix.reshape(b, hkv, group, n * block, prefix), vp).reshape(b, hkv, group, n, block, dim)
    out = out + torch.matmul(p_node, vn)
    return out.reshape(b, hq, n, block, dim).to(q.dtype).contiguous()


# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {
    "tree_mask": tree_mask,
    "tree_mask_additive": tree_mask_additive,
    "tree_mask_packed": tree_mask_packed,
    "tree_position_ids": tree_position_ids,
    "tree_attention": tree_attention,
}
