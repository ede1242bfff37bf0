"""LearnedDrafter through spot::order_logits (tests/ops/test_order_logits.py holds the op): the same trees as the
drafter run module by module, weights re-packed when the model changes, and a hooked model run as modules."""

from dataclasses import replace

import pytest
import torch

import spot_kernels
from spot.drafters import NoiseCoordinates
from spot.order_model import LearnedDrafter, OrderModel, OrderModelConfig
from spot.round import RoundConfig
from spot.tree import grow_tree

from test_tree import MASK, stale_features


def model(tokens: bool, resampled: bool, seed: int = 0) -> OrderModel:
    """A small order model (weights twice the init's, so that the logits spread out and differ per node)."""
    torch.manual_seed(seed)
    cfg = OrderModelConfig(d_model=32, n_layers=2, n_heads=2, d_ff=48, top_k=8, max_block=64, max_depth=4,
                           resampled=resampled, token_buckets=16 if tokens else 0, token_dim=8)
    m = OrderModel(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(2.0)
    return m


class ModuleDrafter(LearnedDrafter):
    """The same drafter run module by module (what LearnedDrafter did before the fused op)."""

    def _per_pass(self, modules=None):
        return False


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("static", [False, True])
def test_learned_drafter_through_the_op_grows_the_same_trees(temperature, static, monkeypatch):
    b, B, K = 3, 12, 8
    root = torch.full((b, B), MASK)
    root[0, :5] = 9
    step = (root != MASK).sum(1)
    stale = replace(stale_features(b, B, K, seed=4), noise=NoiseCoordinates(5, torch.arange(b), step, temperature))
    m = model(True, True, seed=5)
    settings = RoundConfig(MASK, 5, temperature, budget=9, width=3, branch=3, static=static)
    fused, modules = LearnedDrafter(m), ModuleDrafter(m)
    calls = []
    real = spot_kernels.order_logits
    monkeypatch.setattr(spot_kernels, "order_logits", lambda *a, **k: calls.append(1) or real(*a, **k))
    a = grow_tree(root, step, stale, fused, settings, rows=torch.arange(b))
    monkeypatch.undo()
    r = grow_tree(root, step, stale, modules, settings, rows=torch.arange(b))
    assert calls  # the fused op ran
    for name in ("states", "parents", "positions", "tokens", "depth"):
        assert torch.equal(getattr(a, name), getattr(r, name)), name
    assert bool((a.parents[:, 1:] >= 0).any())  # a tree was grown


def test_the_drafter_repacks_changed_weights():
    m = model(False, False)
    drafter = LearnedDrafter(m)
    stale = stale_features(2, 8, 8, seed=1)
    args = (stale, torch.ones(2, 8, dtype=torch.bool), torch.arange(2), torch.zeros(2, dtype=torch.long))
    before = drafter.position_logits(*args)
    with torch.no_grad():
        m.head.bias.add_(1.0)
    again = (stale_features(2, 8, 8, seed=1),) + args[1:]  # the same features, a new pass
    assert torch.allclose(drafter.position_logits(*again), before + 1.0)


def test_a_hooked_model_runs_its_modules():
    """A forward hook (OnlineCalibrated's hidden-state feature) must see the modules run: no fused op then."""
    m = model(False, False)
    seen = []
    handle = m.norm.register_forward_hook(lambda mod, i, o: seen.append(o.shape))
    try:
        LearnedDrafter(m).position_logits(stale_features(2, 8, 8, seed=1), torch.ones(2, 8, dtype=torch.bool),
                                          torch.arange(2), torch.zeros(2, dtype=torch.long))
    finally:
        handle.remove()
    assert seen == [(2, 8, m.cfg.d_model)]


def test_the_cpu_path_resamples_only_the_depths_its_tree_can_reach():
    """At T > 0 the resampled inputs depend on the depth: the static round reads them for every depth of a block
    ([R, B, B]), the host-stopped growth for the depths it can reach only (tree_depths(budget, B) at most); the
    trees are the same."""
    b, B, K = 3, 12, 8
    root = torch.full((b, B), MASK)
    root[0, :5] = 9
    step = (root != MASK).sum(1)
    stale = replace(stale_features(b, B, K, seed=4), noise=NoiseCoordinates(5, torch.arange(b), step, 1.0))
    m = model(True, True, seed=5)
    cfg = RoundConfig(MASK, 5, 1.0, budget=5, width=2, branch=3, static=False)
    host_drafter, static_drafter = LearnedDrafter(m), LearnedDrafter(m)
    host = grow_tree(root, step, stale, host_drafter, cfg, rows=torch.arange(b))
    static = grow_tree(root, step, stale, static_drafter, replace(cfg, static=True), rows=torch.arange(b))
    n = host.parents.shape[1]
    for name in ("states", "parents", "positions", "tokens", "depth"):
        assert torch.equal(getattr(static, name)[:, :n], getattr(host, name)), name
    assert static_drafter._resampled.shape == (b, B, B)
    assert host_drafter._resampled.shape == (b, 4, B)  # budget 5: depths 0 .. 3
    assert int(host.depth.max()) > 1  # the tree did grow deeper than one depth
