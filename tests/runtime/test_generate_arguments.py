"""generate's arguments: a block larger than max_new_tokens is refused unless a partial block is asked for (the
command line names its flags), and every bad input (prompts, ids, seeds, temperatures, rows, oracle orders,
callbacks) is refused before the first pass with an error naming the argument; NumPy integers are integers
(issue #18, items 4 and 8; issue #31, item 11)."""

import numpy as np
import pytest
import spot
import torch
from spot.cli import main
from spot.decode import generate
from spot.model import ModelConfig

from tiny import sharp_target


@pytest.fixture(scope="module")
def target():
    return sharp_target()


@pytest.fixture(scope="module")
def small_random_target():
    return spot.load_target("random", config=ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4,
                                                         n_kv_heads=2, d_ff=64))


# ---- a block larger than max_new_tokens -----------------------------------------------------------------------------

def test_item4_block_larger_than_max_new_tokens_is_refused(target):
    with pytest.raises(ValueError, match="block_size .*max_new_tokens.*allow_partial_block"):
        generate(target, [[5, 6]], "standard", max_new_tokens=1, block_size=2048)
    for method in ("standard", "confidence"):
        with pytest.raises(ValueError, match="block_size"):
            generate(target, [[5, 6]], method, max_new_tokens=3, block_size=4)


def test_item4_partial_block_when_asked(target):
    """allow_partial_block=True decodes the block whole and keeps the tokens asked for: the first tokens of the
    full block, for every method."""
    whole = generate(target, [[5, 6]], "standard", max_new_tokens=4, block_size=4, eos_id=None).tokens[0]
    for method in ("standard", "confidence", "oracle"):
        out = generate(target, [[5, 6]], method, max_new_tokens=3, block_size=4, eos_id=None, allow_partial_block=True)
        assert out.tokens == [whole[:3]]
    assert generate(target, [[5, 6]], "standard", max_new_tokens=0, block_size=4).tokens == [[]]  # nothing to do


def test_item4_cli_names_the_flags(capsys):
    with pytest.raises(SystemExit, match="--block-size.*--max-new-tokens.*--allow-partial-block"):
        main(["generate", "--target", "random", "--max-new-tokens", "2", "--block-size", "4", "--prompt", "x",
              "--methods", "standard"])


# ---- inputs of generate ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(temperature=1e-38), ValueError, "temperature"),
    (dict(temperature=5e-7), ValueError, "temperature"),
    (dict(temperature=True), ValueError, "temperature"),
    (dict(eos_id=97), ValueError, "eos_id"),
    (dict(eos_id=-2), ValueError, "eos_id"),
    (dict(eos_id=1.0), TypeError, "eos_id"),
    (dict(rows=[2**70]), ValueError, "rows"),
    (dict(rows=[2**32]), ValueError, "rows"),
    (dict(rows=[-1]), ValueError, "rows"),
    (dict(rows=[1.5]), TypeError, "rows"),
    (dict(rows=[True]), TypeError, "rows"),
    (dict(rows=torch.tensor([0.5])), TypeError, "rows"),
    (dict(prompts=[[True, 5]]), TypeError, r"prompts\[0\]"),
    (dict(prompts=[{5: 1, 6: 2}]), TypeError, r"prompts\[0\]"),
    (dict(seed=2.0), TypeError, "seed"),
])
def test_item8_bad_inputs_name_the_argument(target, kwargs, exc, word):
    _refused(target, kwargs, exc, word)


@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(prompts=[[5], "ab"]), TypeError, r"prompts\[1\]"),
    (dict(seed=True), TypeError, "seed"),  # was refused by the kernel, after the first pass
    (dict(max_new_tokens=True), TypeError, "max_new_tokens"),
])
def test_inputs_refused_before_stay_refused(target, kwargs, exc, word):
    """Not regressions of item 8: cases the base code already refused (the seed one only once decoding began)."""
    _refused(target, kwargs, exc, word)


def _refused(target, kwargs, exc, word):
    args = dict(prompts=[[5, 6]], max_new_tokens=4, block_size=4)
    args.update(kwargs)
    with pytest.raises(exc, match=word):
        generate(target, args.pop("prompts"), "standard", **args)


def test_item8_numpy_integers_are_integers(target):
    ref = generate(target, [[5, 6]], "standard", max_new_tokens=4, block_size=4, seed=3, temperature=1.0, rows=[7])
    out = generate(target, [np.array([5, 6])], "standard", max_new_tokens=np.int64(4), block_size=np.int32(4),
                   seed=np.int64(3), temperature=np.float32(1.0), rows=np.array([7]), eos_id=np.int64(-1))
    assert out.tokens == ref.tokens
    big = generate(target, [[5, 6]], "standard", max_new_tokens=4, block_size=4, rows=[2**32 - 1])
    assert len(big.tokens[0]) >= 1


@pytest.mark.parametrize("orders,error", [
    (torch.zeros(1, 2, 4, dtype=torch.long), "orders: expected shape \\[1, 1, 4\\]"),
    (torch.zeros(1, 1, 4), "orders: expected an int64 tensor"),
    (torch.full((1, 1, 4), 9, dtype=torch.long), "orders: entries must be -1 or a block position"),
    ([[0, 1, 2, 3]], "orders: expected an int64 tensor")])
def test_malformed_oracle_orders_are_named(small_random_target, orders, error):
    with pytest.raises((TypeError, ValueError), match=error):
        spot.generate(small_random_target, [[5, 6]], "oracle", max_new_tokens=4, block_size=4, orders=orders)


@pytest.mark.parametrize("name", ["progress", "on_pass"])
def test_callbacks_are_checked_before_the_first_pass(small_random_target, name):
    passes = []
    callbacks = {"progress": None, "on_pass": lambda *a: passes.append(1), name: 3}
    with pytest.raises(TypeError, match=f"{name}: expected None or a callable"):
        spot.generate(small_random_target, [[5, 6]], "standard", max_new_tokens=4, block_size=4, **callbacks)
    assert not passes
