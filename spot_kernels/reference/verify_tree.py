"""Parallel tree verification reference (docs/ops.md, "Parallel verification").

No host synchronisation and a fixed amount of work for a given N: acceptance and depth are ancestor-chain
reductions by pointer jumping (ceil(log2 N) rounds), and the accepted chain is read back by binary lifting.
"""

from __future__ import annotations

import torch


def _rounds(n: int) -> int:
    """Pointer-jumping rounds that cover any chain of up to n - 1 edges."""
    return max(1, (n - 1).bit_length())


def verify_tree(
    parents: torch.Tensor,
    draft_pos: torch.Tensor,
    draft_tokens: torch.Tensor,
    target_pos: torch.Tensor,
    target_tokens: torch.Tensor,
    block: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference for spot::verify_tree. Arguments are validated by the router; see docs/ops.md for shapes."""
    b, n = parents.shape
    device = parents.device
    node = torch.arange(n, dtype=torch.int64, device=device).expand(b, n)
    has_parent = (parents >= 0) & (node > 0)
    # Root and inactive nodes point at themselves, so jumping past them changes nothing.
    up = torch.where(has_parent, parents, node)

    # Edge parent -> i holds when the drafted commit is the target's own commit from the parent's state.
    parent_pos = target_pos.gather(1, up)
    parent_tok = target_tokens.gather(1, up)
    edge = has_parent & (parent_pos >= 0) & (draft_pos == parent_pos) & (draft_tokens == parent_tok)
    ok = edge | (node == 0)
    depth = has_parent.to(torch.int64)

    jumps = [up]  # jumps[r][i] = the 2^r-th ancestor of i (clamped at the root / a self-loop)
    for _ in range(_rounds(n)):
        ptr = jumps[-1]
        ok = ok & ok.gather(1, ptr)
        depth = depth + depth.gather(1, ptr)
        jumps.append(ptr.gather(1, ptr))
    accepted = ok  # every edge up to the root holds

    # Deepest accepted node, ties lowest index: a unique key per node makes argmax exact.
    rank = torch.where(accepted, depth * n + (n - 1 - node), -1)
    last = torch.argmax(rank, dim=1)
    last_depth = depth.gather(1, last[:, None])  # [b, 1]

    # chain[:, t] = ancestor of `last` at depth t (t <= last_depth), by lifting `last` by last_depth - t.
    t = torch.arange(n, dtype=torch.int64, device=device)[None, :]
    lift = (last_depth - t).clamp(min=0)
    chain = last[:, None].expand(b, n).contiguous()
    for r, ptr in enumerate(jumps[:-1]):
        bit = ((lift >> r) & 1).bool()
        chain = torch.where(bit, ptr.gather(1, chain), chain)

    commit_pos = target_pos.gather(1, chain)
    commit_tok = target_tokens.gather(1, chain)
    # Commits t < depth are the accepted edges; commit t = depth is the last node's own commit if it has one.
    real = (t <= last_depth) & (commit_pos >= 0)
    accepted_pos = torch.where(real, commit_pos, -1)
    accepted_tokens = torch.where(real, commit_tok, -1)
    num_accepted = real.sum(dim=1)

    width = block.shape[1]
    scratch = torch.cat([block, block.new_zeros(b, 1)], dim=1)  # column `width` swallows the padding
    scratch.scatter_(1, torch.where(real, commit_pos, width), torch.where(real, commit_tok, 0))
    new_block = scratch[:, :width].contiguous()
    return accepted_pos, accepted_tokens, num_accepted, new_block, last



def verify_steps(
    parents: torch.Tensor,
    states: torch.Tensor,
    commit: torch.Tensor,
    tokens: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference for spot::verify_steps. Arguments are validated by the router; see docs/ops.md."""
    b, n, width = states.shape
    device = states.device
    successor = torch.where(commit, tokens, states)  # each node's state after the target's own step
    node = torch.arange(n, dtype=torch.int64, device=device).expand(b, n)
    has_parent = (parents >= 0) & (node > 0)
    up = torch.where(has_parent, parents, node)
    # Edge parent -> i holds when node i's state is the parent's successor, position for position.
    parent_successor = successor.gather(1, up[..., None].expand(b, n, width))
    ok = (has_parent & (states == parent_successor).all(-1)) | (node == 0)
    depth = has_parent.to(torch.int64)
    jumps = [up]
    for _ in range(_rounds(n)):
        ptr = jumps[-1]
        ok = ok & ok.gather(1, ptr)
        depth = depth + depth.gather(1, ptr)
        jumps.append(ptr.gather(1, ptr))
    rank = torch.where(ok, depth * n + (n - 1 - node), -1)  # deepest accepted, ties lowest index
    last = torch.argmax(rank, dim=1)
    last_depth = depth.gather(1, last[:, None])  # [b, 1]
    t = torch.arange(n, dtype=torch.int64, device=device)[None, :]
    lift = (last_depth - t).clamp(min=0)
    chain = last[:, None].expand(b, n).contiguous()  # chain[:, t]: the ancestor of `last` at depth t
    for r, ptr in enumerate(jumps[:-1]):
        chain = torch.where(((lift >> r) & 1).bool(), ptr.gather(1, chain), chain)
    # The step at which each position is committed along the chain (the last node's own step included), then the
    # positions in commit order: by step, then by position.
    on_chain = commit.gather(1, chain[..., None].expand(b, n, width)) & (t <= last_depth)[..., None]
    committed = on_chain.any(1)
    step_of = on_chain.to(torch.int8).argmax(1)  # first step committing the position
    key = torch.where(committed, step_of * width + torch.arange(width, device=device), n * width)
    order = torch.sort(key, dim=1, stable=True).indices
    accepted_pos = torch.where(committed.gather(1, order), order, -1)
    new_block = successor.gather(1, last[:, None, None].expand(b, 1, width))[:, 0]
    return accepted_pos, committed.sum(1), last_depth[:, 0] + 1, new_block.contiguous(), last



# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {"verify_tree": verify_tree, "verify_steps": verify_steps}
