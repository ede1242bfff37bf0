"""spot.online.OnlineCalibrated: the drafter that recalibrates itself from the target's commits during decoding.
It must leave decoding exact (float64, tiny target), its weights must actually move, and on a synthetic case where
the target commits in confidence order it must learn that order from a base drafter that knows nothing."""

import pytest
import torch

import spot
from spot.decode import generate
from spot.settings import Batching
from spot.drafters import ConfidenceDrafter, StaleFeatures
from spot.online import FEATURE_SETS, OnlineCalibrated
from spot.order_model import SHIPPED_DRAFTERS, LearnedDrafter

from tiny import PROMPTS, sharp_target, small_model


@pytest.fixture(scope="module")
def target():
    return sharp_target()


class NoiseDrafter:
    """A drafter that knows nothing: fixed random logits per (row, position)."""

    def __init__(self, seed=0):
        self.table = torch.randn(256, 64, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)

    def position_logits(self, stale, node_masked, node_row, depth):
        return self.table[node_row, : node_masked.shape[1]].masked_fill(~node_masked, float("-inf"))


def _bases():
    return {"confidence": ConfidenceDrafter(), "learned": LearnedDrafter(small_model()), "noise": NoiseDrafter()}


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("base", ["confidence", "learned", "noise"])
def test_online_drafter_is_exact(target, block_size, temperature, base):
    """Token-identical to standard, unbatched and batched, with the weights carried across calls (so later calls
    draft with moved weights), and with continuous batching (rows leaving and joining the batch)."""
    drafter = OnlineCalibrated(_bases()[base], features="rich", refit_every=4)
    kw = dict(max_new_tokens=2 * block_size, block_size=block_size, temperature=temperature, eos_id=None, budget=8)
    for seed in (0, 1):
        ref = generate(target, PROMPTS, "standard", seed=seed, **kw)
        for i, p in enumerate(PROMPTS):
            out = generate(target, [p], "spot", drafter=drafter, seed=seed, rows=[i], **kw)
            assert out.tokens[0] == ref.tokens[i] and torch.equal(out.orders[0], ref.orders[i])
        out = generate(target, PROMPTS, "spot", drafter=drafter, seed=seed, **kw)
        assert out.tokens == ref.tokens and torch.equal(out.orders, ref.orders)
        out = generate(target, PROMPTS, "spot", drafter=drafter, seed=seed, batching=Batching(max_batch=3), **kw)
        assert out.tokens == ref.tokens and torch.equal(out.orders, ref.orders)
    assert drafter.observed > 0
    assert not torch.equal(drafter.weights, drafter.init.expand_as(drafter.weights))


def test_hidden_state_head_is_exact(target):
    """The "head" feature set reads the base OrderModel's last hidden states (a forward hook held only during
    each call, so the base drafter's model keeps none)."""
    drafter = OnlineCalibrated(LearnedDrafter(small_model()), features="head", refit_every=4)
    assert drafter.n_features == len(drafter.names) - 1 + small_model().cfg.d_model
    kw = dict(max_new_tokens=32, block_size=16, temperature=0.7, eos_id=None, budget=8)
    ref = generate(target, PROMPTS, "standard", **kw)
    for _ in range(2):
        out = generate(target, PROMPTS, "spot", drafter=drafter, **kw)
        assert out.tokens == ref.tokens and torch.equal(out.orders, ref.orders)
    assert drafter.observed > 0 and bool(drafter.weights[:, -1].ne(0).any())
    assert not drafter.base.model.norm._forward_hooks  # the hook lived only for each call


def test_weights_move_and_reset(target):
    drafter = OnlineCalibrated(ConfidenceDrafter())
    start = drafter.weights.clone()
    assert torch.equal(start[:, 0], torch.ones(4, dtype=torch.float64)) and not start[:, 1:].any()
    generate(target, PROMPTS, "spot", drafter=drafter, max_new_tokens=32, block_size=16, eos_id=None, budget=8)
    assert drafter.observed > 0 and not torch.equal(drafter.weights, start)
    drafter.reset()
    assert torch.equal(drafter.weights, start) and drafter.observed == 0


@pytest.mark.skipif(not (SHIPPED_DRAFTERS["portable"] / "drafter.safetensors").is_file(),
                    reason="no portable drafter in this checkout")
def test_load_drafter_spec():
    d = spot.load_drafter("portable+online")
    assert isinstance(d, OnlineCalibrated) and isinstance(d.base, LearnedDrafter) and d.names == FEATURE_SETS["rich2"]
    assert spot.load_drafter("portable+online-basic").names == ("base", "log_conf")
    with pytest.raises(ValueError, match="unknown online feature set 'nonesuch'"):  # named, not a KeyError
        spot.load_drafter("portable+online-nonesuch")
    assert (d.max_block, d.token_vocab) == (d.base.max_block, d.base.token_vocab)  # the Drafter protocol, from the base


def _synthetic_stale(n, B, seed):
    g = torch.Generator().manual_seed(seed)
    conf = torch.rand(n, B, generator=g, dtype=torch.float64)
    probs = torch.stack((conf, 1 - conf), -1).sort(-1, descending=True).values
    return StaleFeatures(topk_probs=probs, topk_ids=torch.zeros(n, B, 2, dtype=torch.long),
                         tokens=torch.zeros(n, B, dtype=torch.long), confidence=conf,
                         masked=torch.ones(n, B, dtype=torch.bool), block_start=torch.zeros(n, dtype=torch.long),
                         block_index=0)


def _top1(drafter, stale, masked):
    """Top-1 accuracy at depth 0 when the true next commit is the most confident masked position."""
    n = masked.shape[0]
    logits = drafter.position_logits(stale, masked, torch.arange(n), torch.zeros(n, dtype=torch.long))
    truth = stale.confidence.masked_fill(~masked, -1).argmax(1)
    return float((logits.argmax(1) == truth).double().mean())


@pytest.mark.parametrize("features", ["basic", "rich2"])
def test_learns_the_confidence_order_from_commits(features):
    """The target commits in stale-confidence order; the base drafter is noise. Observing a few passes' accepted
    chains (two commits each) lifts the held-out top-1 accuracy from chance to near 1."""
    B, n = 16, 64
    drafter = OnlineCalibrated(NoiseDrafter(), features=features, refit_every=8)
    test = _synthetic_stale(n, B, seed=99)
    test_masked = torch.rand(n, B, generator=torch.Generator().manual_seed(7)) < 0.6
    test_masked[:, 0] = True
    before = _top1(drafter, test, test_masked)
    for seed in range(8):
        stale = _synthetic_stale(n, B, seed)
        root = torch.rand(n, B, generator=torch.Generator().manual_seed(100 + seed)) < 0.7
        root[:, :2] = True
        order = stale.confidence.masked_fill(~root, -1).argsort(1, descending=True)[:, :2]  # the next two commits
        drafter.observe(stale, root, order, torch.full((n,), 2), torch.ones(n, dtype=torch.bool))
    after = _top1(drafter, test, test_masked)
    assert before < 0.3 and after > 0.9, (before, after)
    assert drafter.observed == 2 * 8 * n
    assert bool((drafter.weights[:2, 0] < 0.5).all())  # the noise's weight fell from 1
    if features == "basic":
        assert bool((drafter.weights[:2, 1] > 1.0).all())  # the log-confidence weight grew from 0
    assert drafter.accuracy(0) > 0.9 and drafter.accuracy(1) > 0.9
    seq = drafter.prequential_accuracy()  # every commit predicted before it was learned from
    assert seq["examples"][:2] == [8 * n, 8 * n] and seq["examples"][2:] == [0, 0]
    assert seq["base"][0] < 0.3 and 0.6 < seq["online"][0] < after  # the first pass's commits came before any fit
