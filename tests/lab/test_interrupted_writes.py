"""Interrupted writes and resumed training (the offline pipeline, `spot build`): weights, bench JSON and trajectory
shards are written atomically (an interrupted save leaves the old files; a written file gets a plain write's mode),
the target's training checkpoint stays consistent, and `spot build drafter` resumes to the weights of an
uninterrupted run and refuses another run's checkpoint (issue #18, item 1)."""

import pytest
import torch
from safetensors.torch import load_file, save_file
from spot.lab.pipeline.collect import collect
from spot.lab.pipeline.train_drafter import DrafterTrainConfig, Trajectories, train_drafter
from spot.cli import main
from spot.loading import load_target
from spot.model import BlockDiffusionLM
from spot.order_model import OrderModel, load_order_model, save_order_model

from tiny import COLLECT_CFG, COLLECT_PROMPTS, SMALL, TINY, synthetic_shard


def _interrupted_save_file(tensors, path, metadata=None):
    """A `save_file` killed halfway: half a file on disk, then the interrupt."""
    with open(path, "wb") as f:
        f.write(b"\x00" * 16)
    raise KeyboardInterrupt


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---- 1. atomic weights writes, resumable drafter training ----------------------------------------------------------

def test_item1_save_weights_is_atomic(tmp_path, monkeypatch):
    """A save interrupted while writing leaves the previous drafter loadable and unchanged, and no temporary file."""
    torch.manual_seed(0)
    old = OrderModel(SMALL)
    save_order_model(old, tmp_path)
    torch.manual_seed(1)
    new = OrderModel(SMALL)
    monkeypatch.setattr("spot.loading.save_file", _interrupted_save_file)
    with pytest.raises(KeyboardInterrupt):
        save_order_model(new, tmp_path)
    monkeypatch.undo()
    loaded = load_order_model(tmp_path)
    for k, v in old.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    assert _leftovers(tmp_path) == []


def test_item1_atomic_writes_get_the_mode_of_a_plain_write(tmp_path):
    """Files written through a temporary file (bench JSON, weights) get the mode `open` would give them (0666 less
    the umask), not the temporary file's private 0600."""
    import os
    import stat

    from spot.loading import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "report.json", "{}")
        save_order_model(OrderModel(SMALL), tmp_path)
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    plain = stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
    assert plain == 0o644
    for name in ("report.json", "drafter.json", "drafter.safetensors"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == plain, name


def test_item1_collect_shard_write_is_atomic(tmp_path, monkeypatch):
    """A collect run interrupted while writing its shard leaves the earlier shard whole."""
    target = load_target("random", config=COLLECT_CFG, dtype="float64", seed=1)
    kw = dict(block_sizes=(4,), temperatures=(0.0,), max_new_tokens=4, batch_size=3, seed=3, top_k=8, progress=False)
    (path,) = collect(target, COLLECT_PROMPTS, tmp_path, **kw)
    before = load_file(str(path))
    monkeypatch.setattr("spot.lab.pipeline.collect.save_file", _interrupted_save_file)
    with pytest.raises(KeyboardInterrupt):
        collect(target, COLLECT_PROMPTS, tmp_path, **{**kw, "seed": 4}, overwrite=True)  # a replacement, cut short
    monkeypatch.undo()
    after = load_file(str(path))
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert _leftovers(tmp_path) == []


def test_item1_train_target_checkpoint_is_consistent_when_interrupted(tmp_path, monkeypatch):
    """`spot build target`'s checkpoint: a save interrupted after the weights were written (while writing the JSON)
    still resumes with the step that belongs to the weights it loads."""
    from pathlib import Path

    from spot.lab.pipeline.train_target import TrainConfig, _load_checkpoint, _save_checkpoint

    def model_and_opt(seed):
        torch.manual_seed(seed)
        model = BlockDiffusionLM(TINY)
        return model, torch.optim.AdamW(model.parameters())

    cfg = TrainConfig()
    m1, o1 = model_and_opt(1)
    _save_checkpoint(tmp_path, m1, o1, 1, cfg, TINY, [])
    m2, o2 = model_and_opt(2)
    real = Path.write_text

    def interrupted(self, *a, **k):
        if self.name.startswith("checkpoint.json") or self.name.startswith(".checkpoint.json"):
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _save_checkpoint(tmp_path, m2, o2, 2, cfg, TINY, [])
    monkeypatch.undo()
    m, o = model_and_opt(3)
    step, _ = _load_checkpoint(tmp_path, m, o)
    want = {1: m1, 2: m2}[step]
    for k, v in want.state_dict().items():
        assert torch.equal(m.state_dict()[k], v), (step, k)


def _drafter_shards():
    return [Trajectories(synthetic_shard(12, 8, seed=4), 3, "a"), Trajectories(synthetic_shard(8, 4, seed=5), 3, "b")]


def _train(out, **kw):
    cfg = DrafterTrainConfig(**{**dict(steps=12, batch_size=16, eval_every=5, checkpoint_every=4), **kw})
    return train_drafter(_drafter_shards(), cfg, out, model_cfg=SMALL, progress=False, log=lambda *a: None)


class _LossSpy:
    """Counts the training steps of spot.lab.pipeline.train_drafter (one loss call each) and, past `limit`, raises
    KeyboardInterrupt as a Ctrl-C would."""

    def __init__(self, monkeypatch, limit=None):
        import spot.lab.pipeline.train_drafter as td

        self.calls, self.limit, real = 0, limit, td.order_loss

        def loss(*a, **k):
            self.calls += 1
            if self.limit is not None and self.calls > self.limit:
                raise KeyboardInterrupt
            return real(*a, **k)

        monkeypatch.setattr(td, "order_loss", loss)


def test_item1_drafter_training_resumes_to_the_same_weights(tmp_path, monkeypatch):
    """Interrupted at step 7, a run has checkpointed step 4 into --out; the same call again resumes there (8 more
    steps, not 12) and ends with exactly the weights and history of an uninterrupted run; the checkpoint is gone."""
    full = _train(tmp_path / "full")
    spy = _LossSpy(monkeypatch, limit=7)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "resumed")
    assert (tmp_path / "resumed" / "checkpoint.safetensors").is_file()
    assert not (tmp_path / "resumed" / "drafter.safetensors").exists()
    spy.calls, spy.limit = 0, None
    resumed = _train(tmp_path / "resumed")
    assert spy.calls == 12 - 4
    a, b = load_order_model(tmp_path / "full"), load_order_model(tmp_path / "resumed")
    for k, v in a.state_dict().items():
        assert torch.equal(b.state_dict()[k], v), k
    strip = [{k: v for k, v in h.items() if k != "minutes"} for h in full["history"]]
    assert [{k: v for k, v in h.items() if k != "minutes"} for h in resumed["history"]] == strip
    assert not (tmp_path / "resumed" / "checkpoint.safetensors").exists()


def test_item1_drafter_refuses_another_runs_checkpoint(tmp_path, monkeypatch):
    """A checkpoint left by a run with other settings is not silently mixed into this one."""
    _LossSpy(monkeypatch, limit=5)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "d")
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"checkpoint of another run \(its train\.lr differ"):
        _train(tmp_path / "d", lr=1e-2)


def test_item1_build_drafter_command_resumes(tmp_path, monkeypatch):
    """`spot build drafter`, interrupted and run again with the same arguments, writes the weights of an
    uninterrupted run."""
    (tmp_path / "data").mkdir()
    save_file(synthetic_shard(12, 8, seed=4), str(tmp_path / "data" / "traj-B8-T0.safetensors"),
              metadata={"block_size": "8", "temperature": "0", "seed": "0"})
    args = ["build", "drafter", "--data", str(tmp_path / "data"), "--steps", "10", "--batch-size", "8",
            "--eval-every", "5", "--checkpoint-every", "3", "--heldout-every", "3", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "full")]) == 0
    _LossSpy(monkeypatch, limit=7)
    with pytest.raises(SystemExit) as interrupted:  # the CLI ends a SIGINT with one line and exit status 130
        main([*args, "--out", str(tmp_path / "resumed")])
    assert interrupted.value.code == 130
    monkeypatch.undo()
    assert main([*args, "--out", str(tmp_path / "resumed")]) == 0
    a, b = load_order_model(tmp_path / "full"), load_order_model(tmp_path / "resumed")
    for k, v in a.state_dict().items():
        assert torch.equal(b.state_dict()[k], v), k
