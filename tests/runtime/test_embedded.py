"""The shipped target: it loads, it is exact in float64, and its weights/tokenizer/decoding have not drifted."""

import pytest
import torch

import spot
from spot.loading import embedded_target_available
from spot.prompts import held_out_prompts

pytestmark = pytest.mark.skipif(not embedded_target_available(), reason="no embedded weights in this checkout")

PROMPT = "Question: Tom has 12 apples. He buys 5 more. How many apples does he have now?\nSolution:\n"
# Recorded when the weights were made (float64, standard decoding, B = 8, 16 new tokens, seed 0).
EXPECTED = {
    0.0: [587, 749, 1200, 313, 18, 310, 275, 412, 313, 271, 313, 18, 821, 16, 201, 587],
    1.0: [587, 749, 1200, 307, 23, 310, 275, 412, 313, 271, 275, 24, 821, 16, 201, 587],
}


@pytest.fixture(scope="module")
def target():
    return spot.load_target(dtype="float64")


def test_loads_with_tokenizer_and_config(target):
    assert target.tokenizer is not None and target.tokenizer.vocab_size == target.vocab_size
    assert (target.mask_id, target.eos_id) == (target.tokenizer.mask_id, target.tokenizer.eos_id)
    assert target.dtype == torch.float64
    assert 4_000_000 < target.model.num_parameters() < 20_000_000


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_fixed_generation(target, temperature):
    ids = target.tokenizer.encode(PROMPT)
    out = spot.generate(target, [ids], "standard", max_new_tokens=16, block_size=8, temperature=temperature,
                        seed=0, eos_id=None)
    assert out.tokens[0] == EXPECTED[temperature], target.tokenizer.decode(out.tokens[0])


@pytest.mark.parametrize("block_size,temperature", [(4, 1.0), (16, 0.7), (32, 0.0), (32, 1.0)])
def test_confidence_is_exact_on_the_trained_model(target, block_size, temperature):
    prompts = [target.tokenizer.encode(t) for t in held_out_prompts(2)]
    kw = dict(max_new_tokens=block_size, block_size=block_size, temperature=temperature, seed=1, eos_id=None)
    ref = spot.generate(target, prompts, "standard", **kw)
    out = spot.generate(target, prompts, "confidence", **kw)
    assert out.tokens == ref.tokens
    assert out.stats.target_passes < ref.stats.target_passes


def test_shipped_drafter_loads():
    drafter = spot.load_drafter()
    assert isinstance(drafter, spot.LearnedDrafter) and isinstance(drafter, spot.Drafter)
    cfg = drafter.model.cfg
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads) == (3, 128, 8)
    assert cfg.resampled  # reads the coupled noise of each node's step
    assert cfg.token_buckets == 1024  # and the stale top-1 token ids
    assert sum(p.numel() for p in drafter.model.parameters()) == 668_033


@pytest.mark.parametrize("dtype,block_size,temperature", [("float64", 16, 1.0), ("float64", 32, 0.0),
                                                           ("float32", 32, 0.0), ("float32", 16, 0.7)])
def test_spot_is_exact_on_the_trained_model(dtype, block_size, temperature):
    """The shipped drafter on the shipped target: the tokens of standard, in fewer passes. float32 too, since a
    node's logits do not depend on the rest of the tree (tests/runtime/test_target.py)."""
    target = spot.load_target(dtype=dtype)
    prompts = [target.tokenizer.encode(t) for t in held_out_prompts(2)]
    kw = dict(max_new_tokens=block_size, block_size=block_size, temperature=temperature, seed=2, eos_id=None)
    ref = spot.generate(target, prompts, "standard", **kw)
    out = spot.generate(target, prompts, "spot", drafter=spot.load_drafter(), **kw)
    assert out.tokens == ref.tokens and torch.equal(out.orders, ref.orders)
    assert out.stats.target_passes < ref.stats.target_passes


def test_an_unknown_target_name_lists_the_shipped_ones():
    from spot.loading import SHIPPED_TARGETS

    with pytest.raises(ValueError, match="weights directory") as info:
        spot.load_target("no-such-target")
    assert all(repr(name) in str(info.value) for name in (*SHIPPED_TARGETS, "random"))
