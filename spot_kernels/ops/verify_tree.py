"""spot::verify_tree and spot::verify_steps: parallel accept/reject of a drafted tree, one commit per node or a
whole rule step per node (docs/ops.md, "Parallel verification"); schemas, wrappers, checks and fakes."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .. import checks
from ..opdef import OpDef, call

SCHEMA = ('verify_tree(Tensor parents, Tensor draft_pos, Tensor draft_tokens, Tensor target_pos, '
          'Tensor target_tokens, Tensor block, str backend="auto") -> (Tensor accepted_pos, '
          'Tensor accepted_tokens, Tensor num_accepted, Tensor new_block, Tensor last_node)')


class VerifyOutput(NamedTuple):
    accepted_pos: torch.Tensor  # [b, N] int64
    accepted_tokens: torch.Tensor  # [b, N] int64
    num_accepted: torch.Tensor  # [b] int64
    new_block: torch.Tensor  # [b, B] int64
    last_node: torch.Tensor  # [b] int64


def verify_tree(
    parents: torch.Tensor,
    draft_pos: torch.Tensor,
    draft_tokens: torch.Tensor,
    target_pos: torch.Tensor,
    target_tokens: torch.Tensor,
    block: torch.Tensor,
    backend: str = "auto",
) -> VerifyOutput:
    """Accept the longest drafted chain that matches the target's own commits, on device, without host sync.

    Args:
        parents: [b, N] int64, N >= 1; parents[:, 0] = -1 (root); for i > 0, 0 <= parents[:, i] < i, or -1 for
            an inactive (padding) node.
        draft_pos, draft_tokens: [b, N] int64, the commit that turns the parent's state into node i's state.
        target_pos, target_tokens: [b, N] int64, the target's own commit from node i's state (score's commit_pos
            and its token); -1 = none.
        block: [b, B] int64, the root's block state.
        backend: see spot_kernels.ops.

    Each block position is committed at most once on a path: a node's draft_pos must not repeat a position drafted
    by an ancestor, and its target_pos must not be a position drafted on its path (by the node itself or an
    ancestor); either raises ValueError (value checks: CPU always, CUDA with SPOT_CHECK_VALUES=1). The op has no
    mask, so positions committed before the root (not masked in `block`) are invisible to it: the caller drafts and
    scores masked positions only (the decoder does).
    Returns:
        VerifyOutput(accepted_pos [b, N], accepted_tokens [b, N] (commits in order, -1 padded),
        num_accepted [b], new_block [b, B] (block with the commits written in), last_node [b] (deepest accepted
        node, ties lowest index)); all int64.
    """
    return VerifyOutput(*call("verify_tree", parents, draft_pos, draft_tokens, target_pos, target_tokens, block,
                              backend))


def check(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, *, values: bool) -> torch.device:
    op = "verify_tree"
    checks.tensor(op, "parents", parents, checks.I64, ndim=2)
    b, n = parents.shape
    if n < 1:
        raise ValueError(f"spot.{op}: parents must have N >= 1 nodes (node 0 is the root), got shape {[b, n]}")
    named = {"draft_pos": draft_pos, "draft_tokens": draft_tokens, "target_pos": target_pos,
             "target_tokens": target_tokens}
    for name, t in named.items():
        checks.tensor(op, name, t, checks.I64)
        checks.shape(op, name, t, (b, n), "parents.shape")
    checks.tensor(op, "block", block, checks.I64, ndim=2)
    if block.shape[0] != b:
        raise ValueError(f"spot.{op}: block must have shape [b, B] with b = {b} (from parents), "
                         f"got {list(block.shape)}")
    device = checks.same_device(op, parents=parents, **named, block=block)
    checks.footprint(op, 8 * b * (2 * n + block.shape[1] + 2), parents=parents, **named, block=block)
    if values and checks.values_enabled(device):
        width = block.shape[1]
        _check_parents(op, parents)
        node = torch.arange(n, device=device).expand(b, n)
        child = (node > 0) & (parents >= 0)
        active = child | (node == 0)
        checks.in_range(op, "draft_pos", draft_pos, 0, width, child,
                        "a block position, for every non-root active node")
        checks.at_least(op, "draft_tokens", torch.where(child, draft_tokens, 0), 0, "a token id, for every non-root "
                        "active node")
        checks.in_range(op, "target_pos", target_pos, -1, width, active,
                        "a block position or -1, for every active node")
        checks.at_least(op, "target_tokens", torch.where(active & (target_pos >= 0), target_tokens, 0), 0,
                        "a token id wherever target_pos >= 0")
        _check_each_position_committed_once(op, parents, draft_pos, target_pos, node, child, active, width)
    return device


def _check_each_position_committed_once(op, parents, draft_pos, target_pos, node, child, active, width) -> None:
    """No path commits a block position twice: a node's draft_pos is not drafted by an ancestor on its path, and its
    target_pos is not drafted on its path (by the node itself or an ancestor).

    drafted[r, i] = the positions drafted on the root -> i path (i included; none for inactive nodes) as a bit set of
    ceil(B / 64) int64 words, by pointer jumping over the parents: ceil(log2 N) rounds of O(b N ceil(B / 64)), a
    fixed op count and no host synchronisation unless a position is committed twice.
    """
    b, n = parents.shape
    if width == 0 or b == 0:
        return  # no node can draft (the range checks passed), so nothing is committed twice
    commits = active & (target_pos >= 0)
    up = torch.where(child, parents, node)  # node = arange(N) per row; a path's top node points to itself
    if width <= 64:  # one word; draft_pos is a position wherever child, target_pos wherever commits
        bit_d = torch.where(child, 1 << draft_pos, 0)  # node i's draft as a bit set (0: none)
        bit_t = torch.where(commits, 1 << target_pos, 0)
    else:  # ceil(B / 64) words: row r * words + w holds word w of row r
        words = (width + 63) // 64
        word = torch.arange(words, device=parents.device)

        def bits(pos, where):
            pos = pos.clamp(0, width - 1)[..., None]
            one = torch.where(where[..., None] & (pos >> 6 == word), 1 << (pos & 63), 0)
            return one.permute(0, 2, 1).reshape(b * words, n)

        bit_d, bit_t = bits(draft_pos, child), bits(target_pos, commits)
        up = up.repeat_interleave(words, 0)
    parent_of = up
    drafted = bit_d  # drafted[:, i] covers i and its ancestors below up[:, i] (a top node's bits are 0)
    rounds = max(n - 1, 1).bit_length()
    for k in range(rounds):
        drafted = drafted | drafted.gather(1, up)
        if k + 1 < rounds:
            up = up.gather(1, up)
    again = drafted.gather(1, parent_of) & bit_d  # drafted by a strict ancestor, and again by the node
    onto = drafted & bit_t
    if not bool(((again | onto) != 0).any()):  # (an int64 .any() is a slow reduction)
        return
    for name, bad, pos in (("draft_pos", again, draft_pos), ("target_pos", onto, target_pos)):
        bad = (bad != 0).reshape(b, -1, n).any(1)
        if bool(bad.any()):
            r, i = (int(x) for x in torch.nonzero(bad)[0].tolist())
            p = int(pos[r, i])
            a = int(parents[r, i]) if name == "draft_pos" else i
            while int(draft_pos[r, a]) != p:
                a = int(parents[r, a])
            who = f"its ancestor node {a}" if a != i else f"node {i} itself"
            what = ("repeats a position already drafted on the node's path" if name == "draft_pos" else
                    "is a position already committed on the node's path")
            raise ValueError(f"spot.{op}: {name} {what} (each block position is committed at most once on a path): "
                             f"row {r}, node {i} has {name} = {p}, drafted by {who}")


def fake(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, backend="auto"):
    check(parents, draft_pos, draft_tokens, target_pos, target_tokens, block, values=False)
    b = parents.shape[0]
    return (
        parents.new_empty(parents.shape),
        parents.new_empty(parents.shape),
        parents.new_empty((b,)),
        block.new_empty(block.shape),
        parents.new_empty((b,)),
    )


STEPS_SCHEMA = ('verify_steps(Tensor parents, Tensor states, Tensor commit, Tensor tokens, str backend="auto") -> '
                '(Tensor accepted_pos, Tensor num_accepted, Tensor num_steps, Tensor new_block, Tensor last_node)')


class StepsOutput(NamedTuple):
    accepted_pos: torch.Tensor  # [b, B] int64
    num_accepted: torch.Tensor  # [b] int64
    num_steps: torch.Tensor  # [b] int64
    new_block: torch.Tensor  # [b, B] int64
    last_node: torch.Tensor  # [b] int64


def verify_steps(
    parents: torch.Tensor,
    states: torch.Tensor,
    commit: torch.Tensor,
    tokens: torch.Tensor,
    backend: str = "auto",
) -> StepsOutput:
    """Accept the longest drafted chain of whole rule steps that the target itself takes (docs/design.md §2.6),
    on device, without host sync: verify_tree for set transitions.

    Args:
        parents: [b, N] int64 as verify_tree's (node 0 the root; -1 for padding nodes).
        states: [b, N, B] int64, every node's block state (node 0: the root's block).
        commit: [b, N, B] bool, the positions the rule commits from each node's scored outputs (commit_rule).
        tokens: [b, N, B] int64, the target's token at each position of each node (score's tokens; >= 0 where
            committed).
        backend: see spot_kernels.ops.

    A node's successor is its state with `tokens` written where `commit` holds. A non-root node is accepted iff its
    parent is accepted and its state equals the parent's successor at every position. The deepest accepted node
    (ties: the lowest index) ends the chain, and its own successor is the new block: a pass accepting depth d
    takes d + 1 steps.
    Returns:
        StepsOutput(accepted_pos [b, B]: the positions committed along the chain, step by step, each step's
        positions ascending, -1 padded; num_accepted [b]: their count; num_steps [b]: the steps taken, the deepest
        accepted node's depth + 1; new_block [b, B]: that node's successor; last_node [b]); all int64.
    """
    return StepsOutput(*call("verify_steps", parents, states, commit, tokens, backend))


def check_steps(parents, states, commit, tokens, *, values: bool) -> torch.device:
    op = "verify_steps"
    checks.tensor(op, "parents", parents, checks.I64, ndim=2)
    b, n = parents.shape
    if n < 1:
        raise ValueError(f"spot.{op}: parents must have N >= 1 nodes (node 0 is the root), got shape {[b, n]}")
    checks.tensor(op, "states", states, checks.I64, ndim=3)
    if tuple(states.shape[:2]) != (b, n):
        raise ValueError(f"spot.{op}: states must have shape [b, N, B] with [b, N] = {[b, n]} (from parents), got "
                         f"{list(states.shape)}")
    checks.tensor(op, "commit", commit, checks.BOOL)
    checks.shape(op, "commit", commit, states.shape, "states.shape")
    checks.tensor(op, "tokens", tokens, checks.I64)
    checks.shape(op, "tokens", tokens, states.shape, "states.shape")
    device = checks.same_device(op, parents=parents, states=states, commit=commit, tokens=tokens)
    if values and checks.values_enabled(device):
        _check_parents(op, parents)
        checks.at_least(op, "tokens", torch.where(commit, tokens, 0), 0, "a token id wherever commit is True")
    return device


def _check_parents(op: str, parents: torch.Tensor) -> None:
    b, n = parents.shape
    node = torch.arange(n, device=parents.device).expand(b, n)
    if bool((parents[:, 0] != -1).any()):
        raise ValueError(f"spot.{op}: parents[:, 0] must be -1 (node 0 is the root); got {parents[:, 0].tolist()[:8]}")
    bad = (node > 0) & ((parents < -1) | (parents >= node))
    if bool(bad.any()):
        raise ValueError(f"spot.{op}: parents must satisfy -1 <= parents[:, i] < i (parents precede children); "
                         f"got {parents[bad][0].item()} {checks.first_bad(bad)}")


def fake_steps(parents, states, commit, tokens, backend="auto"):
    check_steps(parents, states, commit, tokens, values=False)
    b = parents.shape[0]
    return (states.new_empty((b, states.shape[2])), parents.new_empty((b,)), parents.new_empty((b,)),
            states.new_empty((b, states.shape[2])), parents.new_empty((b,)))


OPS = [OpDef(SCHEMA, check, fake), OpDef(STEPS_SCHEMA, check_steps, fake_steps)]
