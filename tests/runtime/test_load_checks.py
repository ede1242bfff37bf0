"""Weights, configs and drafter specs are checked at load time, errors naming the file and the field: integer
weights, wrong types or sizes, unknown or missing fields, a config that does not match its weights, one nested too
deeply or holding a huge number, a weights file that is not a regular file, an unknown online feature set; the
shipped weights pass (issue #18, item 6; issue #31, item 11)."""

import json

import pytest
import spot
import torch
from safetensors.torch import load_file, save_file
from spot.decode import generate
from spot.loading import load_model, load_target, save_model
from spot.model import BlockDiffusionLM, ModelConfig
from spot.order_model import OrderModel, load_order_model, save_order_model

from tiny import SMALL, TINY, sharp_target


@pytest.fixture(scope="module")
def target():
    return sharp_target()


# ---- 6. checks at load time -----------------------------------------------------------------------------------------

@pytest.fixture
def saved_target(tmp_path):
    torch.manual_seed(0)
    save_model(BlockDiffusionLM(TINY), tmp_path)
    return tmp_path


def _edit_json(path, **changes):
    meta = json.loads(path.read_text())
    for k, v in changes.items():
        if v is _DROP:
            del meta[k]
        else:
            meta[k] = v
    path.write_text(json.dumps(meta))


_DROP = object()


def test_item6_integer_weights_are_refused(saved_target):
    path = saved_target / "target.safetensors"
    state = load_file(str(path))
    state["embed.weight"] = state["embed.weight"].long()
    save_file(state, str(path))
    with pytest.raises(ValueError, match=r"target\.safetensors.*'embed\.weight'.*int64"):
        load_target(str(saved_target))


@pytest.mark.parametrize("changes, words", [
    (dict(n_heads=0), r"json: .*'n_heads'"), (dict(n_heads=3), r"json: .*'n_heads'"),
    (dict(d_model="32"), r"json: .*'d_model'"), (dict(d_model=32.0), r"json: .*'d_model'"),
    (dict(vocab_size=True), r"json: .*'vocab_size'"), (dict(rope_theta=_DROP), r"json: .*lacks .*'rope_theta'"),
    (dict(mask_id=1, eos_id=1), r"json: .*'mask_id' and 'eos_id'"), (dict(eos_id=97), r"json: .*'eos_id'"),
    (dict(norm_eps="tiny"), r"json: .*'norm_eps'"), (dict(colour=1), r"json: .*unknown .*'colour'"),
    (dict(n_layers=3), r"safetensors: .*missing \['layers\.2"), (dict(d_ff=65), r"safetensors: .*shape"),
])
def test_item6_target_config_is_checked_at_load(saved_target, changes, words):
    """Wrong types, sizes, unknown or missing fields fail at load with the file and field named; a config that does
    not match its weights names the weights file and the tensor."""
    _edit_json(saved_target / "target.json", **changes)
    with pytest.raises(ValueError, match=r"target\." + words):
        load_model(saved_target)


@pytest.mark.parametrize("changes, field", [
    (dict(n_heads=7), "n_heads"), (dict(n_heads=0), "n_heads"), (dict(d_model="32"), "d_model"),
    (dict(d_ff=64.0), "d_ff"), (dict(top_k=_DROP), "top_k"), (dict(resampled=1), "resampled"),
    (dict(max_block=16), "pos"),
])
def test_item6_drafter_config_is_checked_at_load(tmp_path, changes, field):
    torch.manual_seed(0)
    save_order_model(OrderModel(SMALL), tmp_path)
    meta = json.loads((tmp_path / "drafter.json").read_text())
    for k, v in changes.items():
        if v is _DROP:
            del meta["config"][k]
        else:
            meta["config"][k] = v
    (tmp_path / "drafter.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"drafter\.(json|safetensors).*{field}"):
        spot.load_drafter(str(tmp_path))


def test_item6_random_target_config_is_checked(target):
    """The same checks for a config handed to load_target("random"), and a drafter too small for the block is
    refused before decoding."""
    from dataclasses import replace

    with pytest.raises(ValueError, match=r"config=\.\.\.\): config field 'n_heads'"):
        load_target("random", config=replace(TINY, n_heads=3))
    torch.manual_seed(0)
    small = spot.LearnedDrafter(OrderModel(replace(SMALL, max_block=4)))
    with pytest.raises(ValueError, match="block_size: 8 exceeds the drafter's max_block 4"):
        generate(target, [[5, 6]], "spot", drafter=small, max_new_tokens=8, block_size=8)


def test_shipped_weights_pass_the_load_checks():
    assert load_target().vocab_size > 0 and spot.load_drafter().model.cfg.n_heads > 0


# ---- errors that name the file where raw exceptions came out -------------------------------------------------------

def test_an_unknown_online_feature_set_is_named():
    with pytest.raises(ValueError, match="unknown online feature set 'bogus'.*rich2"):
        spot.load_drafter("default+online-bogus")


def _drafter_dir(tmp_path, config_text):
    save_order_model(OrderModel(SMALL), tmp_path)
    meta = json.loads((tmp_path / "drafter.json").read_text())
    (tmp_path / "drafter.json").write_text(config_text(meta))
    return tmp_path


def test_a_config_nested_too_deep_is_named(tmp_path):
    _drafter_dir(tmp_path, lambda meta: "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="drafter.json: .*nested too deeply"):
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
