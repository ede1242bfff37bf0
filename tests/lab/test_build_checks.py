"""Issue #31 ("Trust, round two"), the offline pipeline and the files the project writes:

1. Every write passes one check against the installed package (`spot.loading.check_output_path`): `spot build
   target --out` inside it, a weights save, a trajectory shard, `spot bench --json` are refused unless a `spot
   build` step was given --overwrite-shipped.
2. The commit order of a trajectory shard is stored wide enough for any block (int8 wrapped positions >= 128).
10. `spot build drafter`'s numeric flags are checked before anything is written; `spot build collect` takes as many
    prompts as asked (the per-source split of --num-prompts adds up).
12. A checkpoint save killed mid-write leaves a temporary file that the next resume removes.
"""

import json
from pathlib import Path

import pytest
import spot
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from spot.lab.pipeline.cli import main as build_main
from spot.lab.pipeline.collect import collect
from spot.lab.pipeline.prompts import build_prompts
from spot.lab.pipeline.train_drafter import DrafterTrainConfig, Trajectories, train_drafter
from spot.cli import main
from spot.loading import atomic_write_text
from spot.order_model import OrderModel, save_order_model

from tiny import COLLECT_CFG, SMALL, synthetic_shard

PACKAGE = Path(spot.__file__).resolve().parent


def _package_files():
    return {p: p.stat().st_mtime_ns for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


# ---- 1. one write guard --------------------------------------------------------------------------------------------

def test_item1_build_target_out_inside_the_package_is_refused(tmp_path):
    before = _package_files()
    with pytest.raises(SystemExit, match="--out: .*inside the installed spot package"):
        build_main(["target", "--out", str(PACKAGE / "weights"), "--corpus", str(tmp_path), "--export",
                    str(tmp_path / "export")])
    assert _package_files() == before


@pytest.mark.parametrize("write", ["atomic_write_text", "save_order_model", "collect"])
def test_item1_every_writer_refuses_the_package(write, tmp_path):
    before = _package_files()
    probe = PACKAGE / "weights" / "probe-item1"
    try:
        with pytest.raises(ValueError, match="inside the installed spot package.*--overwrite-shipped"):
            if write == "atomic_write_text":
                atomic_write_text(probe.with_suffix(".json"), "{}")
            elif write == "save_order_model":
                save_order_model(OrderModel(SMALL), probe)
            else:
                target = spot.load_target("random", config=COLLECT_CFG)
                collect(target, [[5, 6]], probe, block_sizes=(4,), temperatures=(0.0,), max_new_tokens=4,
                        progress=False)
    finally:  # the old code wrote there: leave the package as it was
        probe.with_suffix(".json").unlink(missing_ok=True)
        for p in sorted(probe.rglob("*"), reverse=True) if probe.is_dir() else []:
            p.unlink()
        if probe.is_dir():
            probe.rmdir()
    assert _package_files() == before


def test_item1_overwrite_shipped_lets_writes_through_only_inside_its_block():
    from spot.loading import check_output_path, overwriting_shipped

    path = PACKAGE / "weights" / "budgets.json"
    with overwriting_shipped():
        assert check_output_path(path) == path
    with pytest.raises(ValueError, match="inside the installed spot package"):
        check_output_path(path)


def test_item1_bench_json_inside_the_package_is_refused_before_decoding(capsys):
    before = _package_files()
    path = PACKAGE / "probe-item1.json"
    try:
        with pytest.raises(SystemExit, match="--json .*inside the installed spot package"):
            main(["bench", "--target", "random", "--methods", "standard", "--num-prompts", "1", "--max-new-tokens",
                  "4", "--block-size", "4", "--quiet", "--json", str(path)])
    finally:
        path.unlink(missing_ok=True)
    assert "passes" not in capsys.readouterr().out  # nothing was decoded
    assert _package_files() == before


# ---- 2. commit orders of blocks past 127 ---------------------------------------------------------------------------

def test_item2_commit_orders_of_a_160_block_are_stored_whole(tmp_path):
    target = spot.load_target("random", config=COLLECT_CFG)
    (path,) = collect(target, [[5, 9, 14]], tmp_path, block_sizes=(160,), temperatures=(0.0,), max_new_tokens=160,
                      progress=False)
    with safe_open(str(path), "pt") as f:
        order = f.get_tensor("order")
    assert order.shape == (1, 160)
    assert sorted(order[0].tolist()) == list(range(160))  # a permutation: no position wrapped to a negative
    data = Trajectories.load(path, heldout_every=2)
    assert int(data.order.max()) == 159 and torch.equal(data.rank[0][data.order[0]], torch.arange(160))


# ---- 10. build steps' numbers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [("--steps", "-5"), ("--steps", "0"), ("--batch-size", "0"),
                                        ("--max-depth", "0"), ("--heldout-every", "0"), ("--lr", "nan"),
                                        ("--lr", "0"), ("--checkpoint-every", "-1"), ("--soft-weight", "-1"),
                                        ("--token-buckets", "-2")])
def test_item10_build_drafter_refuses_bad_numbers_before_writing(flag, value, tmp_path):
    (tmp_path / "data").mkdir()
    save_file(synthetic_shard(6, 8, seed=4), str(tmp_path / "data" / "traj-B8-T0.safetensors"),
              metadata={"block_size": "8", "temperature": "0", "seed": "0"})
    with pytest.raises(SystemExit, match=f"^spot: error: {flag}: expected"):
        main(["build", "drafter", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"), "--quiet",
              "--steps", "2", "--batch-size", "4", "--eval-every", "1", flag, value])  # the last one counts
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field,value", [("steps", -5), ("batch_size", 0), ("max_depth", 0), ("lr", float("nan"))])
def test_item10_train_drafter_refuses_bad_settings(field, value, tmp_path):
    data = Trajectories(synthetic_shard(6, 8), heldout_every=3)
    with pytest.raises(ValueError, match=f"{field}: expected"):
        train_drafter([data], DrafterTrainConfig(**{field: value}), tmp_path / "out", progress=False, log=print)
    assert not (tmp_path / "out").exists()


def _corpus(folder: Path) -> Path:
    docs = []
    for i in range(12):
        docs.append({"id": f"m{i:02d}", "source": "math", "text": f"Question {i}?\nSolution:\n{i}"})
        docs.append({"id": f"c{i:02d}", "source": "code", "text": "".join(f"line {j} of {i}\n" for j in range(6))})
        docs.append({"id": f"d{i:02d}", "source": "docs", "text": "".join(f"doc {j} of {i}\n" for j in range(6))})
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return folder


def test_item10_collect_takes_as_many_prompts_as_asked(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    for count in (1, 2, 3, 5, 7, 10):
        assert len(build_prompts(corpus, count, split="train")) == count
    counts = [sum(p["source"] == s for p in build_prompts(corpus, 10, split="train")) for s in ("math", "code", "docs")]
    assert counts == [5, 4, 1]


@pytest.mark.parametrize("argv", [["--block-sizes", "abc"], ["--temperatures", "x"], ["--temperatures", "nan"],
                                  ["--num-prompts", "0"]])
def test_item10_collect_flags_are_one_line_errors(argv, tmp_path):
    with pytest.raises(SystemExit, match="^spot: error: --"):
        main(["build", "collect", "--target", "random", "--out", str(tmp_path / "out"), *argv])
    assert not (tmp_path / "out").exists()


# ---- 12. stale temporary files -------------------------------------------------------------------------------------

def test_item12_resume_removes_a_stale_checkpoint_temporary(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    stale = out / ".checkpoint.safetensors.k1ll3d.tmp"
    stale.write_bytes(b"")  # what SIGKILL during `save_file` leaves
    other = out / ".drafter.json.keep.tmp"  # not a checkpoint's: left alone
    other.write_bytes(b"")
    data = Trajectories(synthetic_shard(6, 8), heldout_every=3)
    train_drafter([data], DrafterTrainConfig(steps=2, batch_size=4, eval_every=2), out, model_cfg=SMALL,
                  progress=False, log=lambda line: None)
    assert not stale.exists() and other.exists()
    assert (out / "drafter.safetensors").is_file()
