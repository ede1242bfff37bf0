"""Issue #31 ("Trust, round two"), item 11: errors that name the argument or the file where raw exceptions
(KeyError, IndexError, RecursionError, OverflowError) came out, and callbacks checked before the first pass."""

import json

import pytest
import spot
import torch
from spot.model import ModelConfig
from spot.order_model import OrderModel, load_order_model, save_order_model

from tiny import SMALL


@pytest.fixture(scope="module")
def target():
    return spot.load_target("random", config=ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4,
                                                         n_kv_heads=2, d_ff=64))


def test_an_unknown_online_feature_set_is_named():
    with pytest.raises(ValueError, match="unknown online feature set 'bogus'.*rich2"):
        spot.load_drafter("default+online-bogus")


@pytest.mark.parametrize("orders,error", [
    (torch.zeros(1, 2, 4, dtype=torch.long), "orders: expected shape \\[1, 1, 4\\]"),
    (torch.zeros(1, 1, 4), "orders: expected an int64 tensor"),
    (torch.full((1, 1, 4), 9, dtype=torch.long), "orders: entries must be -1 or a block position"),
    ([[0, 1, 2, 3]], "orders: expected an int64 tensor")])
def test_malformed_oracle_orders_are_named(target, orders, error):
    with pytest.raises((TypeError, ValueError), match=error):
        spot.generate(target, [[5, 6]], "oracle", max_new_tokens=4, block_size=4, orders=orders)


@pytest.mark.parametrize("name", ["progress", "on_pass"])
def test_callbacks_are_checked_before_the_first_pass(target, name):
    passes = []
    callbacks = {"progress": None, "on_pass": lambda *a: passes.append(1), name: 3}
    with pytest.raises(TypeError, match=f"{name}: expected None or a callable"):
        spot.generate(target, [[5, 6]], "standard", max_new_tokens=4, block_size=4, **callbacks)
    assert not passes


def _drafter_dir(tmp_path, config_text):
    save_order_model(OrderModel(SMALL), tmp_path)
    meta = json.loads((tmp_path / "drafter.json").read_text())
    (tmp_path / "drafter.json").write_text(config_text(meta))
    return tmp_path


def test_a_config_nested_too_deep_is_named(tmp_path):
    _drafter_dir(tmp_path, lambda meta: "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="drafter.json: not a config \\(nested too deeply"):
        load_order_model(tmp_path)


@pytest.mark.parametrize("field", ["d_model", "token_dim"])
def test_a_huge_integer_in_a_config_is_named(tmp_path, field):
    def huge(meta):
        text = json.dumps(meta)
        return text.replace(f'"{field}": {meta["config"][field]}', f'"{field}": 1{"0" * 400}')
    _drafter_dir(tmp_path, huge)
    with pytest.raises(ValueError, match=f"drafter.json: config field '{field}' must be an integer in"):
        load_order_model(tmp_path)


def test_a_huge_float_in_a_config_is_named(tmp_path):
    from spot.loading import check_model_config
    cfg = {**ModelConfig(vocab_size=64).__dict__, "rope_theta": 10**400}
    with pytest.raises(ValueError, match="t.json: config field 'rope_theta' must be a finite number"):
        check_model_config(cfg, "t.json")


def test_an_unreadable_weights_file_is_not_reported_missing(tmp_path):
    save_order_model(OrderModel(SMALL), tmp_path)
    (tmp_path / "drafter.safetensors").unlink()
    (tmp_path / "drafter.safetensors").mkdir()  # there, but not a file that can be read
    with pytest.raises(ValueError, match="drafter.safetensors: not a regular file"):
        spot.load_drafter(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no order drafter"):
        spot.load_drafter(str(tmp_path / "none"))
