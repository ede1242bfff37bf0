"""Issue #18 ("Trust"): what an adversarial user found, one group of tests per numbered item.

1. Weights writes are atomic (an interrupted save leaves the old files), and `spot build drafter` resumes.
4. block_size > max_new_tokens is refused unless asked for (a block is decoded whole).
5. `spot bench` refuses to benchmark nothing, and checks --json before decoding.
6. Weights and configs are checked at load time, errors naming the file and the field.
7. `verify_tree` refuses a tree whose path commits a block position twice (a draft repeating an ancestor's, or a
   target commit onto a drafted position).
8. Every bad input of `generate` and the command line gets a clear error naming the argument (or file).
"""

import json
import re

import numpy as np
import pytest
import spot
import torch
from safetensors.torch import load_file, save_file
from spot.bench import run_bench
from spot.build.collect import collect
from spot.build.train_drafter import DrafterTrainConfig, Trajectories, train_drafter
from spot.cli import main
from spot.decode import generate
from spot.loading import load_model, load_target, save_model
from spot.model import BlockDiffusionLM
from spot.order_model import OrderModel, load_order_model, save_order_model

from tiny import COLLECT_CFG, COLLECT_PROMPTS, SMALL, TINY, sharp_target, synthetic_shard


@pytest.fixture(scope="module")
def target():
    return sharp_target()


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
    monkeypatch.setattr("spot.build.collect.save_file", _interrupted_save_file)
    with pytest.raises(KeyboardInterrupt):
        collect(target, COLLECT_PROMPTS, tmp_path, **{**kw, "seed": 4})
    monkeypatch.undo()
    after = load_file(str(path))
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert _leftovers(tmp_path) == []


def test_item1_train_target_checkpoint_is_consistent_when_interrupted(tmp_path, monkeypatch):
    """`spot build target`'s checkpoint: a save interrupted after the weights were written (while writing the JSON)
    still resumes with the step that belongs to the weights it loads."""
    from pathlib import Path

    from spot.build.train_target import TrainConfig, _load_checkpoint, _save_checkpoint

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
    """Counts the training steps of spot.build.train_drafter (one loss call each) and, past `limit`, raises
    KeyboardInterrupt as a Ctrl-C would."""

    def __init__(self, monkeypatch, limit=None):
        import spot.build.train_drafter as td

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
    with pytest.raises(KeyboardInterrupt):
        main([*args, "--out", str(tmp_path / "resumed")])
    monkeypatch.undo()
    assert main([*args, "--out", str(tmp_path / "resumed")]) == 0
    a, b = load_order_model(tmp_path / "full"), load_order_model(tmp_path / "resumed")
    for k, v in a.state_dict().items():
        assert torch.equal(b.state_dict()[k], v), k


# ---- 4. block_size > max_new_tokens ---------------------------------------------------------------------------------

def test_item3_sizes_are_refused_before_allocating():
    """Sizes whose memory would exceed a documented limit are refused, naming the argument, before anything is
    allocated (each of these grew until the allocator failed, or built a model for minutes)."""
    import time

    import spot_kernels
    from spot.model import ModelConfig

    logits, masked, z = torch.randn(1, 4, 50), torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, dtype=torch.long)
    with pytest.raises(ValueError, match=r"top_k must lie in \[1, 65537\)"):
        spot_kernels.score(logits, masked, 0, z, z, z, 1.0, top_k=2**40)
    z2 = torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"k must lie in \[1, 65537\)"):
        spot_kernels.select_children(torch.randn(2, 8), torch.ones(2, 8, dtype=torch.bool), torch.zeros(2),
                                     torch.rand(2, 8, 4), torch.randint(0, 9, (2, 8, 4)), 0, z2, z2, z2, 1.0, 10**8)
    small = dict(vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=64)
    target = spot.load_target("random", config=ModelConfig(**small))
    with pytest.raises(ValueError, match="budget / width / branch.*SPOT_MEMORY_LIMIT_GB"):
        spot.generate(target, [[5, 6]], "confidence", max_new_tokens=8, block_size=4, width=10**6, branch=10**6)
    for field, value in (("n_layers", 10**6), ("d_model", 10**9)):
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match=f"'{field}' \\({value}\\).*SPOT_MEMORY_LIMIT_GB"):
            spot.load_target("random", config=ModelConfig(**{**small, field: value}))
        assert time.perf_counter() - t0 < 5, field  # refused from the estimate, not after building layers


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


# ---- 5. spot bench ---------------------------------------------------------------------------------------------------

BENCH = ["bench", "--target", "random", "--max-new-tokens", "4", "--block-size", "4", "--methods", "standard",
         "--quiet"]


@pytest.fixture
def no_decoding(monkeypatch):
    """Fail the test if anything is decoded."""
    def refuse(*a, **k):
        raise AssertionError("decoded before the arguments were checked")
    monkeypatch.setattr("spot.bench.generate", refuse)
    monkeypatch.setattr("spot.cli.generate", refuse)


def test_item5_bench_refuses_empty_prompts(tmp_path, no_decoding):
    (tmp_path / "p.txt").write_text("\n  \n\n")
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit, match=r"--prompts-file .*p\.txt.*no prompts"):
        main([*BENCH, "--prompts-file", str(tmp_path / "p.txt"), "--json", str(out)])
    assert not out.exists()
    with pytest.raises(ValueError, match="prompts"):
        run_bench(load_target("random", config=TINY), [], ["standard"], max_new_tokens=4, block_size=4)


@pytest.mark.parametrize("flag, value", [("--num-prompts", "0"), ("--num-prompts", "-1"), ("--batch-size", "0"),
                                         ("--batch-size", "-1"), ("--max-new-tokens", "0")])
def test_item5_bench_refuses_invalid_counts(flag, value, no_decoding):
    with pytest.raises(SystemExit, match=f"{flag}: expected >= 1"):
        main([*BENCH, flag, value])


def test_item5_bench_checks_json_before_decoding(tmp_path, no_decoding):
    for bad in (tmp_path / "missing" / "r.json", tmp_path):
        with pytest.raises(SystemExit, match=f"--json {re.escape(str(bad))}"):
            main([*BENCH, "--num-prompts", "1", "--json", str(bad)])
    assert _leftovers(tmp_path) == []


def test_item5_run_bench_refuses_bad_batch_size(target):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            run_bench(target, [[5, 6]], ["standard"], batch_size=bad, max_new_tokens=4, block_size=4)


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


# ---- 7. verify_tree: each position committed once on a path ---------------------------------------------------------

def test_item7_verify_tree_rejects_a_position_committed_twice():
    import spot_kernels

    def tree(draft_pos, target_pos):
        t = torch.tensor
        return (t([[-1, 0, 1]]), t([draft_pos]), t([[0, 10, 20]]), t([target_pos]), t([[10, 20, 30]]),
                torch.zeros(1, 4, dtype=torch.int64))

    # (a) node 2 drafts position 1 again, below node 1 which drafted it
    repeated_draft = tree([0, 1, 1], [1, 2, 3])
    # (b) node 1's target commits position 1 onto its own draft: accepted, it gave num_accepted = 2 and one entry
    onto_own = tree([0, 1, 2], [1, 1, 3])
    # (b) node 2's target commits position 1, drafted by its ancestor node 1
    onto_ancestor = tree([0, 1, 2], [1, 2, 1])
    for op in (spot_kernels.verify_tree, torch.ops.spot.verify_tree):
        for backend in ("auto", "reference"):
            with pytest.raises(ValueError, match=r"draft_pos .*node 2 .*ancestor node 1"):
                op(*repeated_draft, backend=backend)
            with pytest.raises(ValueError, match=r"target_pos .*node 1 has target_pos = 1, drafted by node 1 itself"):
                op(*onto_own, backend=backend)
            with pytest.raises(ValueError, match=r"target_pos .*node 2 .*ancestor node 1"):
                op(*onto_ancestor, backend=backend)
            out = op(*tree([0, 1, 2], [1, 2, 3]), backend=backend)  # every position once: accepted whole
            assert out[2].tolist() == [3] and out[3].tolist() == [[0, 10, 20, 30]]


# ---- 8. inputs of generate and the command line ---------------------------------------------------------------------

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


def test_item8_prompts_file_not_utf8_names_the_file(tmp_path, no_decoding):
    (tmp_path / "p.txt").write_bytes(b"def f():\n\xff\xfe bad\n")
    with pytest.raises(SystemExit, match=r"p\.txt.*UTF-8"):
        main([*BENCH, "--prompts-file", str(tmp_path / "p.txt")])
    with pytest.raises(SystemExit, match=r"missing\.txt"):
        main([*BENCH, "--prompts-file", str(tmp_path / "missing.txt")])


def test_item8_collect_refuses_zero_prompts_before_creating_anything(tmp_path):
    docs = [{"id": i, "source": "math", "text": f"Problem {i}: add {i} and 1.\nSolution:\n{i + 1}\n"}
            for i in range(100)]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "traj"
    for flag, value in (("--num-prompts", "0"), ("--batch-size", "0"), ("--max-new-tokens", "-1")):
        with pytest.raises(SystemExit, match=flag):
            main(["build", "collect", "--target", "random", "--corpus", str(tmp_path / "corpus"), "--out", str(out),
                  flag, value, "--quiet"])
        assert not out.exists()
    target = load_target("random", config=COLLECT_CFG, dtype="float64", seed=1)
    with pytest.raises(ValueError, match="prompts"):
        collect(target, [], out, block_sizes=(4,), temperatures=(0.0,), max_new_tokens=4, progress=False)
    with pytest.raises(ValueError, match="block_size"):  # B = 8 > 4 new tokens: refused before any folder
        collect(target, COLLECT_PROMPTS, out, block_sizes=(4, 8), temperatures=(0.0,), max_new_tokens=4,
                progress=False)
    assert not out.exists()
