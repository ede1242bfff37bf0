"""Draft-tree growth (spot.tree.grow_tree): expanding only the frontier nodes whose children could still be kept
gives the same tree as expanding every frontier node, with fewer drafter rows."""

import pytest
import torch

import spot
from spot.round import RoundConfig
from spot.tree import grow_tree

MASK = 2


class NodeHashDrafter:
    """Integer position logits that depend on each node's own state, row and depth only (so a node's logits do not
    depend on which other nodes share the call), with many ties. Counts the rows it is asked for."""

    def __init__(self, block: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.weights = torch.randint(0, 1000, (block, block), generator=g)
        self.rows = 0

    def position_logits(self, stale, node_masked, node_row, depth):
        self.rows += len(node_masked)
        mixed = node_masked.long() @ self.weights + 7 * node_row[:, None] + 13 * depth[:, None]
        return (mixed % 23).double()


def stale_features(b, B, K, seed):
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(b, B, K, generator=g, dtype=torch.float64).softmax(-1).sort(-1, descending=True).values
    ids = torch.randint(3, 60, (b, B, K), generator=g)
    return spot.StaleFeatures(topk_probs=probs, topk_ids=ids, tokens=ids[..., 0], confidence=probs[..., 0],
                              masked=torch.ones(b, B, dtype=torch.bool), block_start=torch.arange(b) * 100,
                              block_index=0)


@pytest.mark.parametrize("budget", [2, 3, 5, 8, 16, 33])
@pytest.mark.parametrize("width,branch", [(1, 1), (2, 3), (4, 4), (8, 2)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_pruned_growth_is_the_same_tree_with_fewer_drafter_rows(budget, width, branch, temperature):
    b, B, K = 3, 12, 4
    root = torch.full((b, B), MASK)
    root[0, :5] = 9  # rows with different numbers of masked positions
    root[2, 1::2] = 11
    step = (root != MASK).sum(1)
    stale = stale_features(b, B, K, seed=budget * 10 + width)
    trees, rows = [], []
    for prune in (True, False):
        drafter = NodeHashDrafter(B, seed=width * 7 + branch)
        cfg = RoundConfig(MASK, 5, temperature, budget=budget, width=width, branch=branch, static=False)
        trees.append(grow_tree(root, step, stale, drafter, cfg, rows=torch.arange(b), prune=prune))
        rows.append(drafter.rows)
    for name in ("states", "parents", "positions", "tokens", "depth"):
        assert torch.equal(getattr(trees[0], name), getattr(trees[1], name)), name
    assert rows[0] <= rows[1]
    assert trees[0].states.shape[1] <= budget


def test_pruning_saves_drafter_rows_on_deep_trees():
    """Where the best path runs deep (one dominant branch), most frontier nodes cannot enter the kept set: the
    pruned growth asks the drafter for far fewer rows."""
    b, B, K = 2, 16, 4
    root = torch.full((b, B), MASK)
    stale = stale_features(b, B, K, seed=1)
    counts = {}
    for prune in (True, False):
        drafter = NodeHashDrafter(B, seed=3)
        grow_tree(root, torch.zeros(b, dtype=torch.long), stale, drafter,
                  RoundConfig(MASK, 0, 0.0, budget=16, width=4, branch=4, static=False), rows=torch.arange(b),
                  prune=prune)
        counts[prune] = drafter.rows
    assert counts[True] < 0.8 * counts[False], counts


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_wider_branch_changes_no_tree_of_budget_up_to_branch_plus_one(temperature):
    """A node with r - 1 more probable siblings has r - 1 nodes besides its ancestors at least as probable (and
    older): past rank budget - 1 it cannot be kept. So budget <= branch + 1 keeps the same tree with any larger
    branch (why tree_branch 8 leaves the tuned budgets 1 and 2 unchanged); bigger budgets may differ."""
    b, B, K = 3, 12, 4
    root = torch.full((b, B), MASK)
    root[1, :3] = 9
    step = (root != MASK).sum(1)
    differs = False

    class Flat(NodeHashDrafter):  # flatter logits: later siblings compete with deeper nodes
        def position_logits(self, *args):
            return super().position_logits(*args) / 20

    for budget in (1, 2, 3, 5, 16):
        trees = [grow_tree(root, step, stale_features(b, B, K, seed=budget), Flat(B, seed=4),
                           RoundConfig(MASK, 5, temperature, budget=budget, width=4, branch=branch, static=False),
                           rows=torch.arange(b))
                 for branch in (4, 8)]
        same = all(torch.equal(getattr(trees[0], n), getattr(trees[1], n))
                   for n in ("states", "parents", "positions", "tokens", "depth"))
        assert same or budget > 5, budget
        differs |= not same
    assert differs, "branch 8 never changed a tree: the test cannot tell the two apart"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_expand_frontier_on_a_pruned_frontier_is_select_children_and_its_glue(temperature):
    """The CPU path gives a closed frontier node (pruned, or of -inf path probability) all -inf logits and lets
    spot::expand_frontier draft its children: the same children as select_children on that node with nothing
    masked (no child: position and token -1, log-probability -inf), the open nodes' children, their states and
    the next frontier as select_children, a scatter and a stable sort give them."""
    import spot_kernels

    b, w, B, K, branch, width = 3, 3, 10, 4, 4, 5
    g = torch.Generator().manual_seed(7)
    states = torch.where(torch.rand(b * w, B, generator=g) < 0.6, MASK, torch.randint(3, 60, (b * w, B), generator=g))
    states[4] = 9  # a node with nothing masked
    logits = torch.randint(0, 6, (b * w, B), generator=g).double()  # ties
    path = -torch.rand(b * w, generator=g, dtype=torch.float64)
    path[7] = float("-inf")
    open_ = torch.tensor([True, False, True, True, True, False, True, False, True])  # 7: -inf path, closed
    stale = stale_features(b, B, K, seed=3)
    step = torch.tensor([2, 0, 5])
    common = (stale.topk_probs, stale.topk_ids, 11, torch.arange(b), stale.block_start)
    out = spot_kernels.expand_frontier(torch.where(open_[:, None], logits, float("-inf")), states, path, *common,
                                       step, temperature, MASK, branch, width)
    # the glue the CPU path ran before: select_children on the open nodes' masked positions, then by hand
    node_row = torch.arange(b).repeat_interleave(w)
    masked = (states == MASK) & open_[:, None]
    pos, lp, tok = spot_kernels.select_children(
        torch.where(open_[:, None], logits, float("-inf")), masked, path, stale.topk_probs[node_row],
        stale.topk_ids[node_row], 11, node_row, stale.block_start[node_row], step[node_row], temperature, branch)
    ok = tok >= 0
    lp = torch.where(ok, lp, float("-inf")).view(b, w * branch)
    child_states = states[:, None].expand(b * w, branch, B).scatter(
        2, pos.clamp_min(0)[..., None], torch.where(ok, tok, MASK)[..., None]).view(b, w * branch, B)
    order = torch.sort(lp, dim=1, descending=True, stable=True).indices[:, :width]
    assert torch.equal(out.child_pos, pos.view(b, -1)) and torch.equal(out.child_tokens, tok.view(b, -1))
    assert torch.equal(out.child_logprob, lp)
    has = ok.view(b, -1)
    assert torch.equal(out.child_states[has], child_states[has])  # a child without a token is never kept
    assert torch.equal(out.frontier, order)
    assert torch.equal(out.frontier_logprob, lp.gather(1, order).view(-1))
    kept = lp.gather(1, order) > float("-inf")
    assert torch.equal(out.frontier_states.view(b, width, B)[kept],
                       child_states.gather(1, order[..., None].expand(b, width, B))[kept])
    assert bool((pos.view(b, w, branch)[:, 1] == -1).all())  # closed nodes (1, 4 has nothing masked, ...) no child
    assert bool(has.any()) and bool((~has).any())


def test_the_default_width_is_the_same_on_every_device():
    """One tree shape whatever the device: CPU runs count the passes a GPU's tree makes (spot demo and spot project
    read them), so the CPU path, whose CPU time favours width 1 at large budgets (docs/round.md), keeps WIDTH
    unless asked; an explicit width is kept everywhere."""
    from spot.tree import WIDTH

    for device in (torch.device("cpu"), torch.device("cuda")):
        for static in (None, True, False):
            assert spot.TreeSettings(static=static).resolved(None, device).width == WIDTH
            assert spot.TreeSettings(width=1, static=static).resolved(None, device).width == 1
