"""Building the order drafter (spot.lab.pipeline): trajectory collection, training data, training, evaluation, the
`spot build collect|drafter|evaluate` commands and the prompts they take."""

import json
import math

import pytest
import spot
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file
from spot.lab.pipeline.collect import collect
from spot.lab.pipeline.prompts import TUNE_POOL, TUNE_RESERVE, build_prompts, training_prompts
from spot.lab.pipeline.train_drafter import (
    DrafterTrainConfig,
    Trajectories,
    evaluate,
    example_weights,
    format_evaluation,
    order_loss,
    soft_targets,
    train_drafter,
)
from spot.cli import main
from spot.order_model import (
    OrderModel,
    OrderModelConfig,
    load_order_model,
)

from tiny import COLLECT_CFG, COLLECT_PROMPTS, SMALL, StateBlindTarget, small_model, synthetic_shard




def test_synthetic_shard_is_consistent():
    """The hand-made shard obeys collect's invariants (else the tests below would prove nothing)."""
    s = synthetic_shard(6, 8)
    for b in range(6):
        assert sorted(s["order"][b].tolist()) == list(range(8))
        for k in range(8):
            assert set(torch.nonzero(s["masked"][b, k]).flatten().tolist()) == set(range(8)) - set(
                s["order"][b, :k].tolist())


def test_trajectories_batch_labels_and_split():
    B, n = 8, 12
    shard = synthetic_shard(n, B, seed=1, blocks_per_prompt=2)  # prompts 0..5, two blocks each
    data = Trajectories(shard, heldout_every=3)
    assert data.B == B
    assert data.heldout_blocks.tolist() == [0, 1, 6, 7]  # prompts 0 and 3
    assert data.train_blocks.tolist() == [2, 3, 4, 5, 8, 9, 10, 11]
    order = shard["order"].long()
    blocks = torch.tensor([0, 3, 5, 5, 11, 2])
    k = torch.tensor([0, 2, 6, 0, 3, 1])
    d = torch.tensor([0, 1, 0, 6, 2, 0])
    (probs, conf, stale, node, depth, resampled, _), labels = data.batch(blocks, k, d)
    assert torch.equal(resampled, probs[..., 0])  # T = 0: the stale top-1 probability
    assert probs.dtype == torch.float32 and torch.equal(probs, shard["topk_probs"][blocks, k].float())
    assert torch.equal(conf, shard["confidence"][blocks, k]) and torch.equal(stale, shard["masked"][blocks, k])
    assert torch.equal(depth, d)
    for i in range(len(blocks)):
        t = int(k[i] + 1 + d[i])
        done = set(order[blocks[i], :t].tolist())
        assert set(torch.nonzero(node[i]).flatten().tolist()) == set(range(B)) - done
        assert labels[i] == order[blocks[i], t]
        assert node[i, labels[i]]


def test_examples_at_depth_enumerates_heldout():
    """One example per held-out (block, k) with k + 1 + d < B, and nothing from training prompts."""
    B, n = 6, 10
    shard = synthetic_shard(n, B, seed=2, blocks_per_prompt=1)
    data = Trajectories(shard, heldout_every=4)  # prompts 0, 4, 8 held out
    order = shard["order"].long()
    for d in range(B + 1):
        (probs, conf, stale, node, depth, *_), labels = data.examples_at_depth(d)
        want = [(b, k) for b in (0, 4, 8) for k in range(B) if k + 1 + d < B]
        assert len(labels) == len(want) and len(conf) == len(want)
        assert (depth == d).all()
        got = []
        for i in range(len(labels)):
            # identify (block, k) by its (unique, random) confidence row
            (b, k), = [(b, k) for b in range(n) for k in range(B) if torch.equal(shard["confidence"][b, k], conf[i])]
            got.append((b, k))
            assert labels[i] == order[b, k + 1 + d]
            assert torch.equal(node[i], ~torch.isin(torch.arange(B), order[b, :k + 1 + d]))
        assert sorted(got) == want
    (_, conf_train, *_), labels = data.examples_at_depth(1, heldout=False)
    assert len(labels) == 7 * (B - 2)


def test_sample_draws_valid_training_examples():
    B = 8
    shard = synthetic_shard(16, B, seed=3, blocks_per_prompt=1)
    data = Trajectories(shard, heldout_every=2)
    gen = torch.Generator().manual_seed(0)
    (probs, conf, stale, node, depth, *_), labels, node_conf = data.sample(300, max_depth=3, gen=gen)
    assert len(labels) == 300 and depth.min() >= 0 and depth.max() <= 3 and len(set(depth.tolist())) == 4
    held = set(data.heldout_blocks.tolist())
    for i in range(300):
        (b, k), = [(b, k) for b in range(16) for k in range(B) if torch.equal(shard["confidence"][b, k], conf[i])]
        assert b not in held
        t = k + 1 + int(depth[i])
        assert t < B and labels[i] == shard["order"][b, t]
        assert int(node[i].sum()) == B - t
        assert torch.equal(node_conf[i], shard["confidence"][b, t])  # the node's own pass, not the stale one


def test_soft_targets_rank_the_nodes_masked_positions():
    conf = torch.tensor([[0.9, 0.2, 0.8, float("nan"), 0.4], [0.1, 0.1, 0.7, 0.05, 0.0]])
    node = torch.tensor([[False, True, True, False, True], [True, True, False, True, True]])
    q = soft_targets(conf, node, temperature=0.25)
    assert torch.allclose(q.sum(1), torch.ones(2)) and (q[~node] == 0).all()
    assert q.argmax(1).tolist() == [2, 0]  # the most confident masked position; the unmasked 0.9 does not count
    want = torch.tensor([0.2, 0.8, 0.4]) ** 4
    assert torch.allclose(q[0, [1, 2, 4]], want / want.sum())
    assert q[1, 0] == q[1, 1] and q[1, 4] == 0  # ties share; zero confidence gets nothing
    sharper = soft_targets(conf, node, temperature=0.05)
    assert sharper[0, 2] > q[0, 2]


def test_order_loss_adds_the_soft_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 6, generator=g).masked_fill(torch.eye(5, 6, dtype=torch.bool).flip(1), -math.inf)
    labels = torch.tensor([0, 1, 2, 3, 4])
    ce = F.cross_entropy(logits, labels)
    assert torch.equal(order_loss(logits, labels), ce)
    one_hot = F.one_hot(labels, 6).float()
    assert torch.allclose(order_loss(logits, labels, one_hot, 0.5), 1.5 * ce)
    soft = torch.softmax(torch.randn(5, 6, generator=g).masked_fill(logits == -math.inf, -math.inf), 1)
    want = ce - 2.0 * (soft * torch.log_softmax(logits, 1).nan_to_num(neginf=0.0)).sum(1).mean()
    got = order_loss(logits, labels, soft, 2.0)
    assert torch.isfinite(got) and torch.allclose(got, want)


def _train(shards, tmp_path, name, **kw):
    cfg = DrafterTrainConfig(**kw)
    return train_drafter(shards, cfg, tmp_path / name, model_cfg=SMALL, progress=False, log=lambda *a: None)


def test_shards_are_drawn_in_proportion_to_their_examples():
    big = Trajectories(synthetic_shard(12, 8, seed=4), 3, "big")  # B = 8
    small = Trajectories(synthetic_shard(8, 4, seed=5), 3, "small")
    w = example_weights([big, small])
    assert w.tolist() == [len(big.train_blocks) * 8.0, len(small.train_blocks) * 4.0]


def test_training_is_deterministic(tmp_path):
    shards = [Trajectories(synthetic_shard(12, 8, seed=4), 3, "a"), Trajectories(synthetic_shard(8, 4, seed=5), 3, "b")]
    kw = dict(steps=20, batch_size=16, eval_every=10, seed=7)
    r1 = _train(shards, tmp_path, "one", **kw)
    r2 = _train(shards, tmp_path, "two", **kw)
    _train(shards, tmp_path, "three", **{**kw, "seed": 8})
    w1, w2, w3 = (load_file(str(tmp_path / n / "drafter.safetensors")) for n in ("one", "two", "three"))
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)
    assert any(not torch.equal(w1[k], w3[k]) for k in w1)
    assert r1["history"] == [{**h, "minutes": r1["history"][i]["minutes"]} for i, h in enumerate(r2["history"])]
    assert [h["step"] for h in r1["history"]] == [10, 20] and set(r1["history"][0]["heldout"]) == {"a", "b"}
    assert r1["parameters"] == sum(p.numel() for p in OrderModel(SMALL).parameters())
    meta = json.loads((tmp_path / "one" / "drafter.json").read_text())
    assert meta["config"]["d_model"] == 32 and meta["train"]["steps"] == 20
    assert load_order_model(tmp_path / "one").cfg == SMALL


@pytest.mark.parametrize("soft_weight", [0.0, 1.0])
def test_training_learns_a_confidence_order(tmp_path, soft_weight):
    """Blocks commit in descending order of a stale confidence: a few hundred tiny steps must rank held-out
    positions far better than chance (and the confidence baseline of `evaluate` is exact on this rule), with or
    without the soft target."""
    B = 16
    data = Trajectories(synthetic_shard(64, B, seed=6, rule="confidence", blocks_per_prompt=1), 4, "conf")
    before = evaluate(small_model(0), data, depths=(0, 2))
    _train([data], tmp_path, "m", steps=250, batch_size=64, lr=1e-2, max_depth=3, eval_every=1000, seed=0,
           soft_weight=soft_weight)
    model = load_order_model(tmp_path / "m")
    after = evaluate(model, data, depths=(0, 2))
    for d in (0, 2):
        _, labels = data.examples_at_depth(d)
        remaining = torch.arange(B - 1 - d)  # k -> B - (k + 1 + d) masked positions
        chance = (1.0 / (B - 1 - d - remaining).double()).mean().item()
        assert after[d]["examples"] == len(labels) == 16 * (B - 1 - d)
        assert after[d]["confidence_top1"] == 1.0 and after[d]["confidence_top4"] == 1.0
        assert after[d]["top1"] > max(2 * chance, 0.6), (d, after[d], chance)
        assert after[d]["top4"] >= after[d]["top1"]
        assert after[d]["top1"] > before[d]["top1"] + 0.2






def _collect(target, out_dir):
    return collect(target, COLLECT_PROMPTS, out_dir, block_sizes=(4,), temperatures=(0.0, 1.0), max_new_tokens=8,
                   batch_size=2, seed=3, top_k=8, progress=False)


def test_collect_a_commit_rule(tmp_path):
    """`collect(rule=...)`: a block's passes are the rule's steps (fewer than B, padded), `step_of` the step that
    committed each position, and a training example's label is its step's most confident committed position."""
    target = spot.load_target("random", config=COLLECT_CFG, dtype="float64", seed=1)
    (path,) = collect(target, COLLECT_PROMPTS, tmp_path, block_sizes=(4,), temperatures=(1.0,), max_new_tokens=8,
                      batch_size=2, seed=3, top_k=8, progress=False, rule="steps:2")
    assert path.name == "traj-B4-T1-steps_2.safetensors"
    with safe_open(str(path), "pt") as f:
        assert f.metadata()["rule"] == "steps:2"
        s = {k: f.get_tensor(k) for k in f.keys()}
    ref = spot.generate(target, COLLECT_PROMPTS, "standard", max_new_tokens=8, block_size=4, temperature=1.0, seed=3,
                        eos_id=None, top_k=8, rows=[0, 1, 2], rule="steps:2")
    assert torch.equal(s["order"].long(), ref.orders.flatten(0, 1))
    assert s["steps"].tolist() == [2] * 6
    assert sorted(s["step_of"][0].tolist()) == [0, 0, 1, 1]
    assert not s["masked"][:, 2:].any()  # the padding steps
    data = Trajectories.load(path, heldout_every=2)
    _, labels = data.examples_at_depth(0)  # stale step 0, node = the state after step 0: step 1's set
    blocks = data.heldout_blocks
    for b, label in zip(blocks.tolist(), labels.tolist()):
        step1 = [j for j in range(4) if s["step_of"][b, j] == 1]
        conf = s["confidence"][b, 1]
        assert label in step1 and conf[label] == max(conf[j] for j in step1)


def test_collect_shards(tmp_path):
    """Shapes/dtypes as documented; orders are those of plain standard decoding with rows = prompt index; the
    stored masks, confidences and tokens are those of each pass; the shard loads as training data."""
    target = spot.load_target("random", config=COLLECT_CFG, dtype="float64", seed=1)
    paths = _collect(target, tmp_path / "a")
    assert [p.name for p in paths] == ["traj-B4-T0.safetensors", "traj-B4-T1.safetensors"]
    B, K, n = 4, 8, 3 * 2  # 3 prompts x 2 blocks
    for path, T in zip(paths, (0.0, 1.0)):
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
            s = {k: f.get_tensor(k) for k in f.keys()}
        assert meta["block_size"] == "4" and meta["num_prompts"] == "3" and meta["seed"] == "3"
        shapes = {"topk_probs": ((n, B, B, K), torch.float16), "topk_ids": ((n, B, B, K), torch.int16),
                  "tokens": ((n, B, B), torch.int16), "confidence": ((n, B, B), torch.float32),
                  "masked": ((n, B, B), torch.bool), "order": ((n, B), torch.int32),
                  "prompt": ((n,), torch.int32), "block_index": ((n,), torch.int32),
                  "block_start": ((n,), torch.int64), "steps": ((n,), torch.int32), "step_of": ((n, B), torch.int32)}
        assert set(s) == set(shapes)
        for k, (shape, dtype) in shapes.items():
            assert tuple(s[k].shape) == shape and s[k].dtype == dtype, k
        assert s["prompt"].tolist() == [0, 0, 1, 1, 2, 2] and s["block_index"].tolist() == [0, 1] * 3
        assert s["block_start"].tolist() == [len(p) + B * i for p in COLLECT_PROMPTS for i in (0, 1)]
        ref = spot.generate(target, COLLECT_PROMPTS, "standard", max_new_tokens=8, block_size=B, temperature=T,
                            seed=3, eos_id=None, top_k=K, rows=[0, 1, 2])
        assert torch.equal(s["order"].long(), ref.orders.flatten(0, 1))
        order = s["order"].long()
        assert s["steps"].tolist() == [B] * n  # one commit per step: step k commits order[k]
        assert torch.equal(s["step_of"].long().gather(1, order), torch.arange(B).expand(n, B))
        for b in range(n):
            assert sorted(order[b].tolist()) == list(range(B))
            generated = ref.tokens[b // 2][B * (b % 2):B * (b % 2 + 1)]
            for k in range(B):
                masked = s["masked"][b, k]
                assert set(torch.nonzero(masked).flatten().tolist()) == set(range(B)) - set(order[b, :k].tolist())
                j = int(order[b, k])
                # the pass on s_k committed its most confident masked position, with the token it sampled there
                assert s["confidence"][b, k, j] >= s["confidence"][b, k][masked].max() - 1e-6
                assert s["tokens"][b, k, j] == generated[j]
                assert (s["topk_probs"][b, k, :, :-1] >= s["topk_probs"][b, k, :, 1:]).all()
            if T == 0.0:  # greedy: the committed token is the top-1 id
                assert all(s["topk_ids"][b, k, order[b, k], 0] == generated[order[b, k]] for k in range(B))
        data = Trajectories.load(path, heldout_every=2)
        assert data.heldout_blocks.tolist() == [0, 1, 4, 5] and data.name == path.stem
        (_, _, stale, node, _, _, top_ids), labels = data.examples_at_depth(0)
        assert torch.equal(labels, torch.stack([order[b, 1:] for b in (0, 1, 4, 5)]).flatten())
        # every shard keeps the stale top-1 ids (a T = 0 shard loads no more of the top-K ids)
        assert torch.equal(top_ids, torch.cat([s["topk_ids"][b, :B - 1, :, 0] for b in (0, 1, 4, 5)]).long())
        assert data.topk_ids.shape[-1] == (1 if T == 0 else K)
    # deterministic: a second collection writes the same tensors
    again = _collect(target, tmp_path / "b")
    for p, q in zip(paths, again):
        x, y = load_file(str(p)), load_file(str(q))
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_collect_further_prompts_merge(tmp_path):
    """A later run on further prompts (first_row = the earlier run's count) records exactly the blocks one run on
    all the prompts would have, noise rows included; loading both runs merges them into that shard."""
    target = spot.load_target("random", config=COLLECT_CFG, dtype="float64", seed=1)
    prompts = COLLECT_PROMPTS + [[8, 8, 2]]
    kw = dict(block_sizes=(4,), temperatures=(1.0,), max_new_tokens=8, batch_size=2, seed=3, top_k=8,
              progress=False)
    whole, = collect(target, prompts, tmp_path / "whole", **kw)
    first, = collect(target, prompts[:2], tmp_path / "runs", **kw)
    later, = collect(target, prompts[2:], tmp_path / "runs", first_row=2, **kw)
    assert (first.name, later.name) == ("traj-B4-T1.safetensors", "traj-B4-T1-r2.safetensors")
    x, y = load_file(str(whole)), load_file(str(later))
    assert all(torch.equal(x[k][4:], y[k]) for k in x), "the later run differs from the same prompts' blocks"
    merged, ref = Trajectories.load([first, later], heldout_every=2), Trajectories.load(whole, heldout_every=2)
    assert merged.name == "traj-B4-T1" and merged.heldout_blocks.tolist() == ref.heldout_blocks.tolist()
    (a, _), (b, _) = merged.examples_at_depth(1), ref.examples_at_depth(1)
    assert all(torch.equal(u, v) for u, v in zip(a, b) if torch.is_tensor(u))
    with pytest.raises(ValueError, match="repeat prompt numbers"):
        Trajectories.load([first, first], heldout_every=2)
    t0, = collect(target, prompts[2:], tmp_path / "t0", **{**kw, "temperatures": (0.0,)}, first_row=2)
    with pytest.raises(ValueError, match="different temperature"):
        Trajectories.load([first, t0], heldout_every=2)


def test_cli_merges_runs_for_training_and_evaluation(tmp_path, capsys):
    """train-drafter and evaluate-drafter read a folder's runs of one pair as one shard; evaluate-drafter prints
    what `evaluate` measures, on either split."""
    target = spot.load_target("random", config=COLLECT_CFG, dtype="float64", seed=1)
    kw = dict(block_sizes=(4,), temperatures=(1.0,), max_new_tokens=8, batch_size=2, seed=3, top_k=8,
              progress=False)
    collect(target, COLLECT_PROMPTS[:2], tmp_path / "runs", **kw)
    collect(target, COLLECT_PROMPTS[2:], tmp_path / "runs", first_row=2, **kw)
    data = ["--data", str(tmp_path / "runs"), "--heldout-every", "2"]
    assert main(["build", "drafter", *data, "--steps", "2", "--batch-size", "4", "--eval-every", "1",
                 "--out", str(tmp_path / "drafter"), "--quiet"]) == 0
    assert "traj-B4-T1 (2 train / 4 held-out blocks)" in capsys.readouterr().out
    model, shard = load_order_model(tmp_path / "drafter"), Trajectories.load(sorted((tmp_path / "runs").iterdir()), 2)
    for split in ("heldout", "train"):
        assert main(["build", "evaluate", "--drafter", str(tmp_path / "drafter"), *data, "--split", split]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        ev = evaluate(model, shard, heldout=split == "heldout")
        assert lines == [f"traj-B4-T1 ({'held-out' if split == 'heldout' else 'training'} blocks): "
                         + format_evaluation(ev)]


def test_training_prompts_skip_earlier_runs(tmp_path):
    """Further prompts leave out every skipped run's prompts and `spot tune`'s reserve, and number from the
    largest skipped count; without a skip they are build_prompts'."""
    docs = [{"id": i, "source": "math", "text": f"Problem {i}: add {i} and 1.\nSolution:\n{i + 1}\n"}
            for i in range(200)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    assert training_prompts(tmp_path, 12) == ([p["text"] for p in build_prompts(tmp_path, 12, "train")], 0)
    texts, first_row = training_prompts(tmp_path, 100, (16, 8))
    skipped = {p["text"] for k in (16, 8) for p in build_prompts(tmp_path, k, "train")}
    reserve = {p["text"] for p in build_prompts(tmp_path, TUNE_POOL, "train")[-TUNE_RESERVE:]}
    assert first_row == 16 and len(set(texts)) == 100 and not set(texts) & (skipped | reserve)
    with pytest.raises(ValueError, match="training prompts are left"):
        training_prompts(tmp_path, 200 - TUNE_RESERVE, (16,))
    # A third run after the second: none of either run's prompts, rows after the second's.
    more, more_row = training_prompts(tmp_path, 20, (16, 8), skip_fresh=100)
    assert more_row == 116 and len(set(more)) == 20 and not set(more) & (set(texts) | skipped | reserve)
    with pytest.raises(ValueError, match="name those runs"):
        training_prompts(tmp_path, 20, skip_fresh=100)


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_trajectories_resample_at_the_nodes_step(tmp_path, temperature):
    """Training side: on a state-blind target the feature's argmax over the node's masked positions is the label
    at every depth (an off-by-one step would make it wrong most of the time at T > 0)."""
    target = StateBlindTarget()
    path, = collect(target, [[1, 2, 3], [4] * 5, [6, 7], [8] * 9], tmp_path, block_sizes=(8,),
                    temperatures=(temperature,), max_new_tokens=16, batch_size=3, seed=5, progress=False)
    data = Trajectories.load(path, heldout_every=2)
    assert data.temperature == temperature and data.seed == 5
    for d in range(4):
        (_, _, _, node, _, resampled, _), labels = data.examples_at_depth(d)
        assert torch.equal(resampled.masked_fill(~node, -1).argmax(1), labels), d
    ev = evaluate(small_model(), data, depths=(0, 3))
    assert ev[0]["resampled_top1"] == ev[3]["resampled_top1"] == 1.0
    if temperature > 0:  # the stale confidences carry the stale step's noise: a worse ordering
        assert ev[3]["confidence_top1"] < 0.9


def test_trajectories_without_noise_coordinates_give_no_resampled_feature():
    shard = synthetic_shard(4, 8)
    del shard["block_start"]
    data = Trajectories(shard, 2, temperature=1.0)
    (*_, resampled, _), _ = data.examples_at_depth(0)
    assert resampled is None and "resampled_top1" not in evaluate(small_model(), data, depths=(0,))[0]
    (*_, resampled, _), _ = Trajectories(shard, 2, temperature=0.0).examples_at_depth(0)
    assert resampled is not None


def test_training_learns_a_token_order(tmp_path):
    """Blocks commit in ascending order of their positions' stale top-1 ids, the probabilities saying nothing: a
    drafter reading the ids learns it, one without them cannot."""
    B, n = 16, 64
    shard = synthetic_shard(n, B, seed=9, blocks_per_prompt=1)
    g = torch.Generator().manual_seed(3)
    ids = torch.stack([torch.randperm(60, generator=g)[:B] for _ in range(n)])  # [n, B], distinct per block
    shard["order"] = ids.argsort(1).to(torch.int8)
    rank = torch.empty_like(ids).scatter_(1, ids.argsort(1), torch.arange(B).expand(n, B))
    shard["masked"] = rank[:, None, :] >= torch.arange(B)[None, :, None]
    shard["topk_ids"][..., 0] = ids[:, None, :].expand(n, B, B).short()
    data = Trajectories(shard, 4, "tokens")
    tokens_cfg = OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, token_buckets=64, token_dim=16)
    acc = {}
    for name, cfg in (("with", tokens_cfg), ("without", SMALL)):
        train_drafter([data], DrafterTrainConfig(steps=250, batch_size=64, lr=1e-2, max_depth=3, eval_every=1000),
                      tmp_path / name, model_cfg=cfg, progress=False, log=lambda *a: None)
        acc[name] = evaluate(load_order_model(tmp_path / name), data, depths=(0,))[0]["top1"]
    assert acc["with"] > 0.6 and acc["without"] < 0.3, acc
