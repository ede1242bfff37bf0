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
