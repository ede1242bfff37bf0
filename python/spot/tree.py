"""Draft trees: candidate block states grown from a root by an order drafter (docs/design.md §2.4 step 3).

Growth is best-first by path probability and depth-synchronous (EAGLE-2 style): at each depth every frontier
node of every sequence is scored in ONE drafter call, each proposes its `branch` most likely next commits, and
the `width` most probable children form the next frontier. Finally the `budget - 1` most probable nodes are kept.
A child's path probability never exceeds its parent's and ties go to the older node, so the kept set always
contains its ancestors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import spot_kernels

from .drafters import Drafter, StaleFeatures, resampled_tokens

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


# A rule's trees also hold `probes` nodes: the root with ONE of its drafted next step's likeliest positions
# committed. A probe is no step of a rule whose steps commit several positions (verification accepts one only where
# it is the whole step: a block's last masked position); it is scored so that, when its commit is one of the step
# the target takes, the next round drafts from a node that has seen it (spot.round.freshest_node): over steps:16
# that ranks the next step's set better (docs/rules.md, "Probes").
PROBES = 2
NODES_PER_PROBE = 7  # the tree nodes a probe needs beside it: a budget of 8-14 gets one probe, 15 and more two


def default_probes(rule, budget: int) -> int:
    """The probes of a tree (TreeSettings.probes=None): PROBES for a rule whose steps commit several positions
    (`RuleTables.several_per_step`) and a budget that leaves NODES_PER_PROBE nodes per probe, fewer for smaller
    budgets, none otherwise (one commit per step, threshold rules: their steps commit one position or their
    drafted sizes already hold smaller sets)."""
    if rule is None or not rule.several_per_step:
        return 0
    return min(PROBES, (budget - 1) // NODES_PER_PROBE)


@dataclass
class Tree:
    """A batch of trees, node 0 the root, parents before children. All [batch, N] except states."""

    states: torch.Tensor  # [batch, N, B] block state of every node
    parents: torch.Tensor  # -1 for the root and for padding nodes
    positions: torch.Tensor | None  # the commit parent -> node (root/padding: -1); None in a rule's step tree,
    tokens: torch.Tensor | None  # whose nodes differ from their parents by a set of commits (read from `states`)
    depth: torch.Tensor

    @classmethod
    def root_only(cls, block: torch.Tensor) -> "Tree":
        none = torch.full((block.shape[0], 1), -1, dtype=torch.long, device=block.device)
        return cls(block[:, None].clone(), none, none.clone(), none.clone(), torch.zeros_like(none))


def tree_depths(budget: int, block_size: int) -> int:
    """The depths a tree of `budget` nodes may reach in a block of `block_size` positions: its static depth count."""
    return max(min(budget - 1, block_size), 0)


@torch.no_grad()
def grow_tree(root: torch.Tensor, step: torch.Tensor, stale: StaleFeatures, drafter: Drafter, cfg, *,
              rows: torch.Tensor, draft_rows: torch.Tensor | None = None, prune: bool = True) -> Tree:
    """root int64 [b, B]; step int64 [b] (commits already in the root's block); rows int64 [b], each row's noise row.
    cfg: the round's configuration, a spot.round.RoundConfig (not imported here: round.py imports this module): its
    budget, width, branch, seed, temperature, mask_id, backend and static fields.
    draft_rows: bool [b], the rows to grow (default all); the others keep their root alone (a row at its block's
    first pass has no stale features of that block to draft from).
    prune: frontier nodes with no child that could still be kept get no children (the same tree, for a drafter
    whose rows do not depend on each other; False expands every frontier node). The static tree never prunes: it
    gains nothing from it, as its drafter runs on every frontier node anyway.
    cfg.static: fixed shapes, no host synchronisation (the capturable round, docs/round.md): every one of the
    `tree_depths(budget, B)` depths is grown, the drafter runs on every frontier node and the tree has exactly
    min(budget, pool) node slots, unused ones padding. Otherwise (the CPU default) the host stops growing once the
    kept set can no longer change, calls the drafter on the open frontier nodes only and trims the padding every row
    shares: a few host syncs per depth that save drafter work on a CPU. Both keep the same nodes in the same order;
    the static tree only has more padding slots at the end.
    cfg.probes (a rule's trees): the last `probes` of the budget's nodes are probes (`_with_probes`), children of
    the root."""
    b, B = root.shape
    logprob = torch.zeros(b, 1, dtype=stale.topk_probs.dtype, device=root.device)
    if draft_rows is not None:  # a root of -inf path probability has no children worth keeping
        logprob = torch.where(draft_rows[:, None], logprob, float("-inf"))
    budget = cfg.budget - cfg.probes  # the drafted nodes'; the probes take the rest
    if cfg.static:
        tree, root_scores = _grow_static(root, step, stale, drafter, cfg, rows, logprob, budget)
    else:
        tree, root_scores = _grow_on_host(root, step, stale, drafter, cfg, rows, logprob, budget, prune)
    return _with_probes(tree, root, step, stale, drafter, cfg, rows, logprob, root_scores) if cfg.probes else tree


def _frontier_width(cfg, budget: int) -> int:
    """Only budget - 1 nodes are kept: a depth's frontier node past the first budget - 1 has budget - 1 older nodes
    at least as probable, and its descendants are no more probable and younger, so none of them could be kept.
    Capping the width there changes no tree, only the drafter work spent on it."""
    return min(cfg.width, max(budget - 1, 1))


def _grow_static(root, step, stale, drafter, cfg, rows, logprob, budget):
    """grow_tree with fixed shapes and no host sync: per depth, the drafter's op and one spot::expand_frontier (the
    children, their states and the next frontier), a few ops around them (per-pass code: counted in
    docs/round.md). No pruning: a frontier node that could not have a kept child only gets children that are not
    kept either (they are no more probable than it and younger than the budget - 1 nodes it trails), so the kept
    set is the pruned growth's. Returns the tree of `budget` node slots and the drafter's logits on the root
    ([b, B]; None when no depth is grown)."""
    b, B = root.shape
    node_rows = {}  # frontier width w -> [b * w] each frontier node's row (the drafter's node_row)
    f_states, f_logprob = root, logprob.view(b)  # the frontier, flat [b * w, ...] row by row: the root first
    w = 1
    # per depth, the children [b, w * branch, ...] (row by row: frontier slot, then child), and the frontier they
    # form ([b, W], each slot's index among that depth's children)
    states, logprobs, positions, tokens, frontiers = [], [], [], [], []
    root_scores = None
    for d in range(tree_depths(budget, B)):
        if w not in node_rows:
            node_rows[w] = torch.arange(b * w, device=root.device) // w  # fewer ops than repeat_interleave
        node_row = node_rows[w]
        scores = drafter.position_logits(stale, f_states == cfg.mask_id, node_row, torch.full_like(node_row, d))
        root_scores = scores if d == 0 else root_scores
        out = _expand(cfg, scores.to(f_logprob.dtype), f_states, f_logprob, stale, rows, step + d, node_row,
                      _frontier_width(cfg, budget))
        states.append(out.child_states)
        logprobs.append(out.child_logprob)
        positions.append(getattr(out, "child_pos", None))
        tokens.append(getattr(out, "child_tokens", None))
        frontiers.append(out.frontier)
        f_states, f_logprob, w = out.frontier_states, out.frontier_logprob, out.frontier.shape[1]
    return _keep_best(*_static_pool(root, logprob, states, logprobs, positions, tokens, frontiers, cfg.branch),
                      budget, True), root_scores


def _static_pool(root, logprob, states, logprobs, positions, tokens, frontiers, branch):
    """The pool of `_grow_static` in `_keep_best`'s layout [b, m, ...]: the root, then each depth's children (row
    by row: frontier slot, then child), with their parents' pool indices and their depths; a few ops per pass."""
    b, B = root.shape
    dev = root.device
    counts = [x.shape[1] for x in logprobs]  # children per row at each depth
    none = torch.full((b, 1), -1, dtype=torch.long, device=dev)
    zero = torch.zeros(b, 1, dtype=torch.long, device=dev)
    if not counts:
        return root[:, None], logprob, none, None, None, zero
    # the pool index of each depth's frontier slots: the root, then slot s of depth d >= 1 is child frontiers[d - 1]
    # [:, s] of depth d - 1, whose children start at pool index 1 + counts[0] + ... + counts[d - 2]
    firsts = [1 + sum(counts[:d]) for d in range(len(counts) - 1)]
    slots = torch.cat([zero] + [f + first for f, first in zip(frontiers, firsts)], 1)  # [b, sum(widths)]
    parents = slots[:, :, None].expand(b, slots.shape[1], branch).reshape(b, -1)
    # depths: counts[d] children at depth d + 1, built per run of depths with equal counts (the frontier widens to
    # `width`, then stays), on the device: no host-to-device copy inside a captured round
    runs, start = [], 0
    for d in range(1, len(counts) + 1):
        if d == len(counts) or counts[d] != counts[start]:
            runs.append(torch.arange((d - start) * counts[start], device=dev) // counts[start] + (start + 1))
            start = d
    depth = torch.cat([zero, torch.cat(runs)[None].expand(b, -1)], 1)
    return (torch.cat([root[:, None]] + states, 1), torch.cat([logprob] + logprobs, 1), torch.cat([none, parents], 1),
            _pool_column(none, positions), _pool_column(none, tokens), depth)


def _grow_on_host(root, step, stale, drafter, cfg, rows, logprob, budget, prune):
    """grow_tree on the CPU path: the host stops growth early and calls the drafter on open frontier nodes only.
    Per depth: the drafter's op, one spot::expand_frontier or spot::expand_steps (children, their states, the next
    frontier; `_expand`), a few ops
    for the pool and the stop test, and one host sync (whether to go on, and how many frontier nodes are open).
    Returns the tree of at most `budget` nodes and the drafter's logits on the root ([b, B]; None when no depth is
    grown)."""
    b, B = root.shape
    mask_id, branch = cfg.mask_id, cfg.branch
    keep = budget - 1
    root_scores = None
    # the pool of drafted nodes, root first, depth after depth: per-depth pieces, concatenated once at the end
    states, logprobs, parents, positions, tokens, depths = [root[:, None]], [logprob], [], [], [], []
    f_states, f_logprob, frontier = root, logprob.view(b), None  # the frontier, flat [b * w, ...] row by row
    best = None  # [b, <= keep] the most probable non-root path log-probabilities so far, descending
    m, w = 1, 1  # pool size, frontier width
    node_rows = {}  # frontier width w -> [b * w] each frontier node's row (the drafter's node_row)
    open_ = f_logprob > float("-inf")  # a root of -inf path probability has no children worth keeping
    # no deeper node than a row's masked positions: fewer depths to try (one sync, with the open roots' count)
    n_depths, n_open = torch.stack(((root == mask_id).sum(1).max(), open_.sum())).tolist() if b else (0, 0)
    n_depths = min(tree_depths(budget, B), n_depths)
    for d in range(n_depths):
        if w not in node_rows:
            node_rows[w] = torch.arange(b * w, device=root.device) // w
        scores = _open_rows_logits(drafter, stale, f_states == mask_id, node_rows[w], d, open_, n_open,
                                   logprob.dtype, n_depths)
        # a closed node's logits are all -inf: no eligible position, so no child (padding: position and token -1,
        # log-probability -inf), as select_children gives a node with nothing masked
        root_scores = scores if d == 0 else root_scores
        out = _expand(cfg, scores, f_states, f_logprob, stale, rows, step + d, node_rows[w],
                      _frontier_width(cfg, budget))
        c_logprob = out.child_logprob  # [b, w * branch], -inf where a child has no token
        states.append(out.child_states)
        logprobs.append(c_logprob)
        parents.append(torch.zeros(c_logprob.shape, dtype=torch.long, device=root.device) if frontier is None
                       else frontier.repeat_interleave(branch, 1))
        positions.append(getattr(out, "child_pos", None))
        tokens.append(getattr(out, "child_tokens", None))
        depths.append((d + 1, w * branch))
        # next frontier: the `width` most probable new children (ties to the lower index), flat
        f_states, f_logprob = out.frontier_states, out.frontier_logprob
        frontier, w = out.frontier + m, out.frontier.shape[1]
        m += c_logprob.shape[1]
        best = c_logprob if best is None else torch.cat((best, c_logprob), 1)
        if best.shape[1] > keep:
            best = best.topk(keep, dim=1).values  # sorted: the (budget - 1)-th largest is the last
        if d + 1 == n_depths:
            break
        # A frontier node is expanded only if one of its children could still be kept: fewer than budget - 1
        # nodes at least as probable as it (children are no more probable than it, and lose ties, being younger).
        f_row = f_logprob.view(b, w)
        open_ = f_row > float("-inf")
        if prune and best.shape[1] == keep:
            open_ = open_ & (f_row > best[:, -1:])
        open_ = open_.view(b * w)
        # Stop when no row can change its kept set: it has no child left, or already holds budget - 1 nodes at
        # least as probable as any deeper node could be (deeper nodes also lose ties, being younger).
        best_next = f_row[:, 0]
        done = (((best >= best_next[:, None]).sum(1) >= keep) | (best_next == float("-inf"))).all()
        done, n_open = torch.stack((done.long(), open_.sum())).tolist()  # the depth's one sync
        if done:
            break
    depth = torch.cat([torch.zeros(b, 1, dtype=torch.long, device=root.device)]
                      + [torch.full((b, n), d, dtype=torch.long, device=root.device) for d, n in depths], 1)
    none = torch.full((b, 1), -1, dtype=torch.long, device=root.device)
    return _keep_best(torch.cat(states, 1), torch.cat(logprobs, 1), torch.cat([none] + parents, 1),
                      _pool_column(none, positions), _pool_column(none, tokens), depth, budget, False), root_scores


def _pool_column(root: torch.Tensor, pieces: list) -> torch.Tensor | None:
    """The pool's per-node commits (positions or tokens), root first; None for a rule's step tree (no pieces)."""
    return None if any(p is None for p in pieces) else torch.cat([root] + pieces, 1)


def _with_probes(tree: Tree, root, step, stale, drafter, cfg, rows, logprob, root_scores) -> Tree:
    """`tree` with cfg.probes more nodes, children of the root (docs/rules.md, "Probes"): the root with the i-th
    position of the drafter's ranking on it committed alone, its token drawn as a drafted child's (the stale
    top-K with the root's step noise, `drafters.resampled_tokens`). Padding (the root's state, parent -1) where a
    row is not drafted or has no such position. Fixed shapes, no host sync: the static round's too."""
    b, B = root.shape
    masked = root == cfg.mask_id
    if root_scores is None:  # no depth was grown (a budget of probes alone, or nothing masked)
        every = torch.arange(b, device=root.device)
        root_scores = drafter.position_logits(stale, masked, every, torch.zeros_like(every))
    k = min(cfg.probes, B)
    scores = torch.where(masked, root_scores.to(stale.topk_probs.dtype), float("-inf"))
    ranked = torch.sort(scores, dim=1, descending=True, stable=True)  # ties: the lower position
    at, top = ranked.indices[:, :k], ranked.values[:, :k]
    tokens = resampled_tokens(stale.topk_probs, stale.topk_ids, cfg.seed, rows, stale.block_start, step,
                              cfg.temperature, cfg.backend).gather(1, at)
    valid = (top > float("-inf")) & (tokens >= 0) & (logprob > float("-inf"))
    states = torch.where(valid[..., None], root[:, None].expand(b, k, B).scatter(2, at[..., None],
                                                                                 tokens.clamp_min(0)[..., None]),
                         root[:, None])
    pad = cfg.probes - k  # a block smaller than the probes: the rest padding
    states = torch.cat((tree.states, states, root[:, None].expand(b, pad, B)), 1)
    parents = torch.cat((tree.parents, torch.where(valid, 0, -1), valid.new_full((b, pad), -1, dtype=torch.long)), 1)
    depth = torch.cat((tree.depth, valid.long(), tree.depth.new_zeros(b, pad)), 1)
    return Tree(states, parents, None, None, depth)


def _expand(cfg, scores, f_states, f_logprob, stale, rows, steps, node_row, width):
    """One depth's children: one commit each (spot::expand_frontier), or, with a commit rule (`cfg.rule`, a
    spot.rules.RuleTables), one whole step each (spot::expand_steps), sized by `step_sizes`; the next frontier's
    `width` nodes."""
    if cfg.rule is None:
        return spot_kernels.expand_frontier(
            scores, f_states, f_logprob, stale.topk_probs, stale.topk_ids, cfg.seed, rows, stale.block_start, steps,
            cfg.temperature, cfg.mask_id, cfg.branch, width, backend=cfg.backend)
    sizes = step_sizes(cfg.rule, stale, f_states == cfg.mask_id, node_row, steps, scores.dtype, cfg.backend)
    return spot_kernels.expand_steps(
        scores, f_states, f_logprob, sizes, stale.topk_probs, stale.topk_ids, cfg.seed, rows, stale.block_start,
        steps, cfg.temperature, cfg.mask_id, cfg.branch, width, backend=cfg.backend)


# With a threshold rule, how sure the drafted size of a step is: the size the stale confidences give gets this
# probability, one more or one fewer share the rest (docs/rules.md, "Drafting a step").
SIZE_CONFIDENCE = 0.9


def step_sizes(rule, stale: StaleFeatures, node_masked: torch.Tensor, node_row: torch.Tensor, steps: torch.Tensor,
               dtype: torch.dtype, backend: str = "auto") -> torch.Tensor:
    """log P(the step commits m positions) [F, B + 1] for frontier nodes (node_masked [F, B], node_row [F], steps
    [b] each row's step): the rule applied to the stale confidences of the node's masked positions gives the size
    (spot::commit_rule); exact for a rule without a threshold (its quota), else SIZE_CONFIDENCE on it and the rest
    on one more and one fewer, within the sizes the quota allows."""
    f, B = node_masked.shape
    conf = torch.where(node_masked, stale.confidence[node_row], float("nan"))
    node_steps = steps[node_row]
    drafted = spot_kernels.commit_rule(conf, node_masked, node_steps, rule.quota, rule.thresholds, rule.inclusive,
                                       backend=backend)
    size = drafted.sum(1, keepdim=True)  # [F, 1]
    m = torch.arange(B + 1, device=node_masked.device)[None]
    # a complete node (nothing masked) has no next step: no children, which would all be the node itself and take
    # the budget from real alternatives (each as probable as its parent)
    open_ = node_masked.any(1, keepdim=True)
    if not rule.has_threshold:
        return torch.where((m == size) & open_, 0.0, float("-inf")).to(dtype)
    n = node_masked.sum(1, keepdim=True)
    low = torch.minimum(rule.quota[node_steps.clamp_max(rule.quota.shape[0] - 1), n[:, 0]][:, None], n)
    near = (m - size).abs() == 1
    logp = torch.where(m == size, math.log(SIZE_CONFIDENCE),
                       torch.where(near & (m >= low) & (m <= n), math.log((1 - SIZE_CONFIDENCE) / 2), -math.inf))
    return torch.where(open_, logp, -math.inf).to(dtype)


def _open_rows_logits(drafter, stale, node_masked, node_row, d, open_, n_open, dtype, n_depths) -> torch.Tensor:
    """The drafter's logits [F, B] on the `n_open` open frontier nodes of depth `d` (`open_` [F]), -inf on the
    others: the CPU path's saving. A drafter that takes `depths` (the `Drafter` protocol) learns that the tree's
    depths stay below n_depths."""
    extra = {"depths": n_depths} if getattr(drafter, "takes_depths", False) else {}
    if n_open == len(open_):
        return drafter.position_logits(stale, node_masked, node_row, torch.full_like(node_row, d), **extra).to(dtype)
    scores = torch.full(node_masked.shape, float("-inf"), dtype=dtype, device=node_masked.device)
    if n_open:
        at = torch.nonzero(open_).flatten()
        scores[at] = drafter.position_logits(stale, node_masked[at], node_row[at],
                                             torch.full_like(at, d), **extra).to(dtype)
    return scores


def _keep_best(states, logprob, parents, positions, tokens, depth, budget, static) -> Tree:
    """The root and the budget - 1 most probable nodes (ties to the older), in pool order (parents before
    children), padding after them (the root's state; parent, position, token -1; depth 0): min(budget, pool) slots
    when `static`, else as many as the fullest row needs."""
    b, m, B = states.shape
    score = logprob.clone()
    score[:, 0] = float("inf")  # the root is always kept
    n_keep = min(budget, m)
    order = torch.sort(score, dim=1, descending=True, stable=True).indices[:, :n_keep]  # ties: the older first
    keep = torch.zeros(b, m, dtype=torch.bool, device=states.device)
    keep.scatter_(1, order, score.gather(1, order) > float("-inf"))
    n = n_keep if static else int(keep.sum(1).max())
    # Kept nodes in pool order (parents before children), padded at the end.
    slot = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :n]
    valid = keep.gather(1, slot)
    new_index = torch.cumsum(keep, 1) - 1  # pool index -> tree index for kept nodes
    par = parents.gather(1, slot)
    par = torch.where(par >= 0, new_index.gather(1, par.clamp_min(0)), -1)

    def pick(x, fill=-1):
        return None if x is None else torch.where(valid, x.gather(1, slot), fill)

    return Tree(
        # a padding slot holds the root's state (the target reads it; its outcome is never used)
        states=torch.where(valid[..., None], states.gather(1, slot[..., None].expand(b, n, B)), states[:, :1]),
        parents=torch.where(valid, par, -1),
        positions=pick(positions),
        tokens=pick(tokens),
        depth=pick(depth, 0),
    )
