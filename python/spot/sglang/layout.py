"""The tree batch: how one SGLang forward scores every node of every request's draft tree (docs/serving.md).

SGLang's dLLM path gives each request exactly one block of B tokens per forward (`DLLM_EXTEND`) over its cached
prefix. A SPOT round replaces that block by the request's N tree nodes, N x B tokens:

- tokens: node 0 (the root, the block as the scheduler holds it), then nodes 1..N-1, each a full block state;
- positions: the block's absolute positions, repeated once per node;
- attention: every node token sees the whole cached prefix and the B tokens of its own node, never another node
  (the block-diagonal-plus-prefix rule of docs/design.md §2.1). The Triton backend takes this as one flat bool
  mask per request, `[q_len x (prefix + q_len)]` row-major with q_len = N x B, concatenated over the batch, and
  `mask_indptr [bs + 1]` its offsets (the layout EAGLE's tree verification uses);
- K/V writes: the root's tokens go to the block's reserved slots (what the next forward after the block is full
  reads as prefix is written by a root-only forward, docs/serving.md), every other node's to the padding slot;
  current-token K/V are read densely from the forward's own k/v, so nothing of a node stays in the cache;
- requests follow each other in whole nodes, so every node starts at a multiple of B in the flattened batch: the
  B-aligned segments that LLaDA2's block MoE routing (`token_index // B`) needs.

Pure torch, no SGLang import: the functions here are tested on a CPU without SGLang (tests/integrations/test_sglang.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TreeLayout:
    """Where every request's nodes sit in a tree batch. Host lists are what the forward batch's `*_cpu` fields take."""

    block_size: int
    num_nodes: list[int]  # N_r: nodes scored for request r (root included)
    prefix_lens: list[int]  # P_r: cached keys before the block
    token_indptr: torch.Tensor  # int64 [bs + 1]: request r's tokens are [token_indptr[r], token_indptr[r + 1])
    positions: torch.Tensor  # int64 [sum N_r B]: absolute position of every token
    custom_mask: torch.Tensor  # bool [sum N_r B (P_r + N_r B)]: flat, row-major per request, True = attend
    mask_indptr: torch.Tensor  # int64 [bs + 1]: request r's mask is custom_mask[mask_indptr[r]:mask_indptr[r + 1]]

    @property
    def extend_lens(self) -> list[int]:
        return [n * self.block_size for n in self.num_nodes]

    @property
    def num_tokens(self) -> int:
        return sum(self.extend_lens)


def active_nodes(parents: torch.Tensor) -> list[int]:
    """parents int64 [bs, N] of a padded `spot.tree.Tree` -> the number of active nodes per request.

    `grow_tree` keeps a request's nodes first and pads at the end (parent -1), so the active nodes are the prefix
    0..N_r-1: the root plus every node with a parent."""
    if parents.dim() != 2 or parents.shape[1] == 0:
        raise ValueError(f"parents: expected [bs, N] with N >= 1, got shape {tuple(parents.shape)}")
    return (1 + (parents[:, 1:] >= 0).sum(1)).tolist()


def flat_tree_mask(prefix_lens: list[int], num_nodes: list[int], block_size: int, device=None) -> tuple:
    """The flat custom mask of a tree batch and its `mask_indptr` (see the module docstring).

    Request r contributes N_r B rows of P_r + N_r B entries: row q (node q // B) attends key k iff k < P_r or
    (k - P_r) // B == q // B."""
    _check_sizes(prefix_lens, num_nodes, block_size)
    parts, sizes = [], []
    for p, n in zip(prefix_lens, num_nodes):
        q = torch.arange(n * block_size, device=device)
        k = torch.arange(p + n * block_size, device=device)
        own = (k[None, :] - p).div(block_size, rounding_mode="floor") == q[:, None].div(block_size,
                                                                                         rounding_mode="floor")
        parts.append(((k[None, :] < p) | own).reshape(-1))
        sizes.append(n * block_size * (p + n * block_size))
    mask = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.bool, device=device)
    indptr = torch.zeros(len(sizes) + 1, dtype=torch.int64, device=device)
    if sizes:
        indptr[1:] = torch.cumsum(torch.tensor(sizes, dtype=torch.int64, device=device), 0)
    return mask, indptr


def tree_positions(block_starts: list[int], num_nodes: list[int], block_size: int, device=None) -> torch.Tensor:
    """int64 [sum N_r B]: request r's block positions block_starts[r] + 0..B-1, once per node."""
    _check_sizes([0] * len(num_nodes), num_nodes, block_size)
    if len(block_starts) != len(num_nodes):
        raise ValueError(f"block_starts: expected {len(num_nodes)} entries, got {len(block_starts)}")
    j = torch.arange(block_size, device=device)
    parts = [(s + j).repeat(n) for s, n in zip(block_starts, num_nodes)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=device)


def tree_layout(prefix_lens: list[int], block_starts: list[int], num_nodes: list[int], block_size: int,
                device=None) -> TreeLayout:
    """Everything a tree batch needs besides its tokens and K/V slots."""
    mask, mask_indptr = flat_tree_mask(prefix_lens, num_nodes, block_size, device)
    token_indptr = torch.zeros(len(num_nodes) + 1, dtype=torch.int64, device=device)
    if num_nodes:
        token_indptr[1:] = torch.cumsum(torch.tensor(num_nodes, device=device) * block_size, 0)
    return TreeLayout(block_size, list(num_nodes), list(prefix_lens), token_indptr,
                      tree_positions(block_starts, num_nodes, block_size, device), mask, mask_indptr)


def tree_tokens(states: torch.Tensor, num_nodes: list[int]) -> torch.Tensor:
    """states [bs, N_max, B] (node 0 = root) -> the flat input ids [sum N_r B], request after request."""
    if states.dim() != 3 or states.shape[0] != len(num_nodes) or max(num_nodes, default=0) > states.shape[1]:
        raise ValueError(f"states: expected [{len(num_nodes)}, >= {max(num_nodes, default=0)}, B], got "
                         f"{tuple(states.shape)}")
    parts = [states[r, :n].reshape(-1) for r, n in enumerate(num_nodes)]
    return torch.cat(parts) if parts else states.new_zeros(0)


def tree_cache_loc(block_loc: torch.Tensor, num_nodes: list[int], pad_slot: int = 0) -> torch.Tensor:
    """block_loc [bs, B] (the block's reserved K/V slots) -> the tree batch's write slots [sum N_r B]: the root's
    tokens to the block's slots, every other node's to `pad_slot` (SGLang's padding slot 0)."""
    if block_loc.dim() != 2 or block_loc.shape[0] != len(num_nodes):
        raise ValueError(f"block_loc: expected [{len(num_nodes)}, B], got {tuple(block_loc.shape)}")
    parts = []
    for r, n in enumerate(num_nodes):
        parts.append(block_loc[r])
        if n > 1:
            parts.append(block_loc.new_full(((n - 1) * block_loc.shape[1],), pad_slot))
    return torch.cat(parts) if parts else block_loc.new_zeros(0)


def node_logits(full_logits: torch.Tensor, num_nodes: list[int], block_size: int, n_max: int | None = None,
                fill: float = 0.0) -> torch.Tensor:
    """full_logits [sum N_r B, V] of a tree forward -> [bs, n_max, B, V]; node slots past N_r hold `fill`.

    Padding nodes are inactive in `verify_tree` (parent -1), so whatever they hold is never accepted."""
    n_max = max(num_nodes, default=1) if n_max is None else n_max
    total = sum(num_nodes) * block_size
    if full_logits.dim() != 2 or full_logits.shape[0] != total:
        raise ValueError(f"full_logits: expected [{total}, V] for nodes {num_nodes} of {block_size} tokens, got "
                         f"{tuple(full_logits.shape)}")
    V = full_logits.shape[1]
    out = full_logits.new_full((len(num_nodes), n_max, block_size, V), fill)
    offset = 0
    for r, n in enumerate(num_nodes):
        out[r, :n] = full_logits[offset:offset + n * block_size].view(n, block_size, V)
        offset += n * block_size
    return out


def _check_sizes(prefix_lens, num_nodes, block_size) -> None:
    if block_size < 1:
        raise ValueError(f"block_size: expected >= 1, got {block_size}")
    if len(prefix_lens) != len(num_nodes):
        raise ValueError(f"prefix_lens / num_nodes: {len(prefix_lens)} vs {len(num_nodes)} requests")
    if any(n < 1 for n in num_nodes) or any(p < 0 for p in prefix_lens):
        raise ValueError(f"num_nodes must be >= 1 and prefix_lens >= 0, got {num_nodes} and {prefix_lens}")
