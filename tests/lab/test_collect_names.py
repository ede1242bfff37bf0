"""Issue #46, row 8: `spot build collect`'s shard names never collide. Two different rules or temperatures never map
to one file, a run that would write one path twice refuses before it writes anything, and a shard another run wrote
is replaced only with `--overwrite` (`overwrite=True`)."""

from __future__ import annotations

import pytest
import spot
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from spot.cli import main
from spot.lab.pipeline.collect import collect

from tiny import COLLECT_CFG, COLLECT_PROMPTS

KW = dict(block_sizes=(4,), max_new_tokens=4, batch_size=3, top_k=8, progress=False)


@pytest.fixture(scope="module")
def target():
    return spot.load_target("random", config=COLLECT_CFG, dtype="float64", seed=1)


def _same(a, b) -> bool:
    a, b = load_file(str(a)), load_file(str(b))
    return set(a) == set(b) and all(torch.equal(a[k].nan_to_num(), b[k].nan_to_num()) for k in a)


def test_row8_two_rules_that_used_to_share_a_name_write_two_shards(target, tmp_path):
    (small,) = collect(target, COLLECT_PROMPTS, tmp_path, temperatures=(1.0,), rule="factor:2e-1", **KW)
    before = small.read_bytes()
    (large,) = collect(target, COLLECT_PROMPTS, tmp_path, temperatures=(1.0,), rule="factor:2e+1", **KW)
    assert small != large and small.exists() and large.exists()
    assert (small.name, large.name) == ("traj-B4-T1-factor_0.2.safetensors", "traj-B4-T1-factor_20.0.safetensors")
    assert small.read_bytes() == before  # the first run's shard is untouched
    with safe_open(str(large), "pt") as f:
        assert f.metadata()["rule"] == "factor:20.0"


def test_row8_temperatures_that_print_alike_write_two_shards(target, tmp_path):
    paths = collect(target, COLLECT_PROMPTS, tmp_path, temperatures=(0.7000001, 0.7000002), **KW)
    assert len(set(paths)) == 2 and all(p.exists() for p in paths)
    assert [p.name for p in paths] == ["traj-B4-T0.7000001.safetensors", "traj-B4-T0.7000002.safetensors"]
    assert not _same(*paths)  # each temperature's own trajectories
    for p, T in zip(paths, (0.7000001, 0.7000002)):
        with safe_open(str(p), "pt") as f:
            assert float(f.metadata()["temperature"]) == T
    # the names written before stay: T spelled :g where that spells it exactly, the canonical rule after it
    from spot.lab.pipeline.collect import shard_paths

    assert [p.name for p in shard_paths(tmp_path, (4, 16), (0.0, 1.0, 0.7), "threshold:0.90,steps:2",
                                        first_row=3).values()] == [
        f"traj-B{B}-T{T}-threshold_0.9_steps_2-r3.safetensors" for B in (4, 16) for T in ("0", "1", "0.7")]


def test_row8_a_run_that_would_write_one_path_twice_refuses_before_writing(target, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"would both write traj-B4-T1.safetensors"):
        collect(target, COLLECT_PROMPTS, out, temperatures=(1.0, 1), **KW)
    assert not out.exists()
    with pytest.raises(SystemExit, match="would both write"):
        main(["build", "collect", "--target", "random", "--out", str(out), "--num-prompts", "1", "--block-sizes", "4",
              "--temperatures", "1,1.0", "--max-new-tokens", "4"])
    assert not out.exists()


def test_row8_another_runs_shard_is_replaced_only_with_overwrite(target, tmp_path):
    (path,) = collect(target, COLLECT_PROMPTS, tmp_path, temperatures=(1.0,), seed=3, **KW)
    first = path.read_bytes()
    with pytest.raises(ValueError, match="a shard is already there.*--overwrite"):
        collect(target, COLLECT_PROMPTS, tmp_path, temperatures=(0.0, 1.0), seed=4, **KW)
    assert not (tmp_path / "traj-B4-T0.safetensors").exists()  # refused before the first pair was written
    assert path.read_bytes() == first
    (again,) = collect(target, COLLECT_PROMPTS, tmp_path, temperatures=(1.0,), seed=4, overwrite=True, **KW)
    assert again == path and path.read_bytes() != first  # seed 4's trajectories replaced seed 3's
