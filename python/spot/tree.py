"""Draft trees: candidate block states grown from a root by an order drafter (docs/design.md §2.4 step 3).

Growth is best-first by path probability and depth-synchronous (EAGLE-2 style): at each depth every frontier
node of every sequence is scored in ONE drafter call, each proposes its `branch` most likely next commits, and
the `width` most probable children form the next frontier. Finally the `budget - 1` most probable nodes are kept.
A child's path probability never exceeds its parent's and ties go to the older node, so the kept set always
contains its ancestors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import spot_kernels

from .drafters import Drafter, StaleFeatures

# The default tree shape: `width` frontier nodes expanded per depth, `branch` children drafted per frontier node
# (measured against other shapes in docs/drafter.md). `budget` caps the nodes kept whatever the shape.
WIDTH = 4
BRANCH = 4


def tree_branch(drafter, branch: int | None = None) -> int:
    """The children drafted per frontier node: `branch` when given, else the drafter's own (`drafter.branch`, a
    learned drafter's `tree_branch` in its drafter.json), else BRANCH."""
    if branch is not None:
        return branch
    return getattr(drafter, "branch", None) or BRANCH


@dataclass
class Tree:
    """A batch of trees, node 0 the root, parents before children. All [batch, N] except states."""

    states: torch.Tensor  # [batch, N, B] block state of every node
    parents: torch.Tensor  # -1 for the root and for padding nodes
    positions: torch.Tensor  # the commit parent -> node (root/padding: -1)
    tokens: torch.Tensor
    depth: torch.Tensor

    @classmethod
    def root_only(cls, block: torch.Tensor) -> "Tree":
        none = torch.full((block.shape[0], 1), -1, dtype=torch.long, device=block.device)
        return cls(block[:, None].clone(), none, none.clone(), none.clone(), torch.zeros_like(none))


@torch.no_grad()
def grow_tree(root: torch.Tensor, step: torch.Tensor, stale: StaleFeatures, drafter: Drafter, *, budget: int,
              width: int, branch: int, seed: int, rows: torch.Tensor, temperature: float, mask_id: int,
              backend: str = "auto", draft_rows: torch.Tensor | None = None, prune: bool = True) -> Tree:
    """root int64 [b, B]; step int64 [b] (commits already in the root's block). Returns at most `budget` nodes.
    draft_rows: bool [b], the rows to grow (default all); the others keep their root alone (a row at its block's
    first pass has no stale features of that block to draft from).
    prune: call the drafter only on frontier nodes with a child that could still be kept (the same tree, for a
    drafter whose rows do not depend on each other; False expands every frontier node)."""
    b, B = root.shape
    dev = root.device
    # Only budget - 1 nodes are kept: a depth's frontier node past the first budget - 1 has budget - 1 older nodes
    # at least as probable, and its descendants are no more probable and younger, so none of them could be kept.
    # Capping the width there changes no tree, only the drafter work spent on it.
    width = min(width, max(budget - 1, 1))
    batch_idx = torch.arange(b, device=dev)
    # The pool of all drafted nodes, index 0 = root.
    states = root[:, None].clone()
    logprob = torch.zeros(b, 1, dtype=stale.topk_probs.dtype, device=dev)
    if draft_rows is not None:  # a root of -inf path probability has no children worth keeping
        logprob = torch.where(draft_rows[:, None], logprob, float("-inf"))
    parents = torch.full((b, 1), -1, dtype=torch.long, device=dev)
    positions, tokens, depth = parents.clone(), parents.clone(), torch.zeros_like(parents)
    frontier = torch.zeros(b, 1, dtype=torch.long, device=dev)
    max_depth = min(budget - 1, int((root == mask_id).sum(1).max().item()) if b else 0)
    for d in range(max_depth):
        w = frontier.shape[1]
        f_states = states.gather(1, frontier[..., None].expand(b, w, B))
        f_logprob = logprob.gather(1, frontier)
        node_row = batch_idx.repeat_interleave(w)
        # A frontier node is expanded only if one of its children could still be kept: fewer than budget - 1
        # nodes at least as probable as it (children are no more probable than it, and lose ties, being younger).
        # The drafter sees only those rows; the others get no children, as before, so the tree is the same.
        kth = logprob[:, 1:].topk(budget - 1, dim=1).values[:, -1:] if logprob.shape[1] > budget - 1 else \
            logprob.new_full((b, 1), float("-inf"))
        open_ = ((f_logprob > float("-inf")) & ((f_logprob > kth) | (not prune))).view(b * w)
        node_masked = (f_states == mask_id).view(b * w, B) & open_[:, None]
        n_open = int(open_.sum())  # one host sync for both cases below
        if n_open == b * w:
            scores = drafter.position_logits(stale, node_masked, node_row, torch.full_like(node_row, d))
        else:
            scores = torch.full((b * w, B), float("-inf"), dtype=logprob.dtype, device=dev)
            if n_open:
                at = torch.nonzero(open_).flatten()
                scores[at] = drafter.position_logits(stale, node_masked[at], node_row[at],
                                                     torch.full_like(at, d)).to(scores.dtype)
        c_pos, c_logprob, c_tok = spot_kernels.select_children(
            scores.to(logprob.dtype), node_masked, f_logprob.reshape(-1), stale.topk_probs[node_row],
            stale.topk_ids[node_row], seed, rows[node_row], stale.block_start[node_row], step[node_row] + d,
            temperature, branch, backend=backend)
        c_logprob = torch.where(c_tok >= 0, c_logprob, float("-inf"))
        # Children's states: the frontier state with one more commit.
        c_states = f_states.reshape(b * w, 1, B).repeat(1, branch, 1)
        ok = c_pos >= 0
        c_states.scatter_(2, c_pos.clamp_min(0)[..., None], torch.where(ok, c_tok, mask_id)[..., None])
        c_states = torch.where(ok[..., None], c_states, f_states.reshape(b * w, 1, B))
        m = states.shape[1]
        states = torch.cat((states, c_states.view(b, w * branch, B)), 1)
        logprob = torch.cat((logprob, c_logprob.view(b, -1)), 1)
        parents = torch.cat((parents, frontier.repeat_interleave(branch, 1)), 1)
        positions = torch.cat((positions, c_pos.view(b, -1)), 1)
        tokens = torch.cat((tokens, c_tok.view(b, -1)), 1)
        depth = torch.cat((depth, torch.full_like(c_pos.view(b, -1), d + 1)), 1)
        # Next frontier: the `width` most probable new children (stable sort: ties to the lower index).
        order = torch.sort(-logprob[:, m:], dim=1, stable=True).indices[:, :width]
        best_next = logprob[:, m:].gather(1, order).max(1).values  # no deeper node can beat this
        if not bool((best_next > float("-inf")).any()):
            break
        frontier = order + m
        # Stop when every row already holds budget - 1 nodes at least as probable as any deeper node could be
        # (deeper nodes also lose ties, being younger): the kept set can no longer change.
        if bool(((logprob[:, 1:] >= best_next[:, None]).sum(1) >= budget - 1).all()):
            break
    return _keep_best(states, logprob, parents, positions, tokens, depth, budget)


def _keep_best(states, logprob, parents, positions, tokens, depth, budget) -> Tree:
    b, m, B = states.shape
    score = logprob.clone()
    score[:, 0] = float("inf")  # the root is always kept
    order = torch.sort(-score, dim=1, stable=True).indices[:, :budget]
    keep = torch.zeros(b, m, dtype=torch.bool, device=states.device)
    keep.scatter_(1, order, score.gather(1, order) > float("-inf"))
    n = int(keep.sum(1).max().item())
    # Kept nodes in pool order (parents before children), padded at the end.
    slot = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :n]
    valid = keep.gather(1, slot)
    new_index = torch.cumsum(keep, 1) - 1  # pool index -> tree index for kept nodes
    par = parents.gather(1, slot)
    par = torch.where(par >= 0, new_index.gather(1, par.clamp_min(0)), -1)

    def pick(x, fill=-1):
        return torch.where(valid, x.gather(1, slot), fill)

    return Tree(
        states=states.gather(1, slot[..., None].expand(b, n, B)),
        parents=torch.where(valid, par, -1),
        positions=pick(positions),
        tokens=pick(tokens),
        depth=pick(depth, 0),
    )
