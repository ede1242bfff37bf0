"""The learned order drafter (DESIGN §2.4): the order model, its weights I/O, trajectory collection, training data,
training, and exactness of method="spot" with a learned drafter (DESIGN §2.5, float64 on CPU)."""

import json
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file

import spot
from spot.cli import main
from spot.build.collect import collect
from spot.model import ModelConfig
from spot.build.prompts import TUNE_POOL, TUNE_RESERVE, build_prompts, training_prompts
import spot_kernels
from spot.order_model import (LearnedDrafter, OrderModel, OrderModelConfig, load_order_model, order_features,
                              resampled_confidence, save_order_model, with_resampled_inputs,
                              with_token_inputs)
from spot.target import Session, Target
from spot.build.train_drafter import (DrafterTrainConfig, Trajectories, evaluate, example_weights, format_evaluation,
                                order_loss, soft_targets, train_drafter)
from test_decode import sharp_target

SMALL = OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64)


def small_model(seed=0, cfg=SMALL):
    torch.manual_seed(seed)
    return OrderModel(cfg).eval()


def random_inputs(n, B, K=32, seed=0, dtype=torch.float32):
    """Stale features as the decoder hands them over: sorted top-K probabilities, the node a descendant of the
    stale state (its masked positions a subset of the stale ones), at least one masked position per node."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(n, B, K, generator=g, dtype=torch.float64) * 2, -1)
    probs = probs.sort(-1, descending=True).values.to(dtype)
    conf = probs[..., 0].float() * torch.rand(n, B, generator=g).add(0.5).clamp(max=1)
    stale = torch.rand(n, B, generator=g) < 0.8
    node = stale & (torch.rand(n, B, generator=g) < 0.7)
    if n:
        node[torch.arange(n), torch.randint(B, (n,), generator=g)] = True
        stale |= node
    depth = torch.randint(0, 20, (n,), generator=g)
    return probs, conf, stale, node, depth


# ---------------------------------------------------------------------------------------------------------------
# 1-2. The order model


def test_default_size_and_forward_shapes():
    """The base architecture (3 layers, d_model 128, 8 heads) has 630913 parameters (631169 reading the resampled
    confidence too, 668033 with the token embedding as well, as shipped); logits are [N, B] float32,
    -inf exactly on positions the node has committed and finite on its masked ones, for B = 16, 32, 64 and N = 0."""
    torch.manual_seed(0)
    model = OrderModel().eval()
    cfg = model.cfg
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.top_k, cfg.max_block) == (3, 128, 8, 32, 64)
    assert sum(p.numel() for p in model.parameters()) == 630913
    assert sum(p.numel() for p in OrderModel(OrderModelConfig(resampled=True)).parameters()) == 631169
    shipped = OrderModelConfig(resampled=True, token_buckets=1024)
    assert sum(p.numel() for p in OrderModel(shipped).parameters()) == 668033
    for B in (16, 32, 64):
        probs, conf, stale, node, depth = random_inputs(5, B, seed=B)
        with torch.no_grad():
            out = model(probs, conf, stale, node, depth)
        assert out.shape == (5, B) and out.dtype == torch.float32
        assert torch.equal(torch.isneginf(out), ~node)
        assert torch.isfinite(out[node]).all()
        with torch.no_grad():
            empty = model(*random_inputs(0, B))
        assert empty.shape == (0, B)


def test_block_larger_than_max_block_is_rejected():
    model = small_model()
    with pytest.raises(ValueError, match="max_block"):
        model(*random_inputs(2, 65))
    tiny = small_model(cfg=OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, max_block=8))
    tiny(*random_inputs(2, 8))
    with pytest.raises(ValueError, match="max_block"):
        tiny(*random_inputs(2, 9))


def test_features_layout():
    """order_features: 2K + 6 columns; probabilities beyond K are ignored, fewer than K are zero-padded."""
    probs, conf, stale, node, _ = random_inputs(3, 8, K=40)
    f = order_features(probs, conf, stale, node, 32)
    assert f.shape == (3, 8, SMALL.n_features) == (3, 8, 70) and f.dtype == torch.float32
    torch.testing.assert_close(f[..., :32], probs[..., :32])
    assert torch.equal(f[..., 64], conf)
    assert torch.equal(f[..., 66].bool(), stale) and torch.equal(f[..., 67].bool(), node)
    assert torch.equal(f[..., 68].bool(), stale & ~node)  # committed along the draft path
    torch.testing.assert_close(f[..., 69], node.float().mean(-1, keepdim=True).expand(3, 8))
    short = order_features(probs[..., :8], conf, stale, node, 32)
    padded = order_features(F.pad(probs[..., :8], (0, 24)), conf, stale, node, 32)
    assert short.shape == f.shape and torch.equal(short, padded)


def test_bidirectional_and_batch_independent():
    """A masked position's logit depends on the features of other (even committed, later) positions of its own node,
    and never on another node's; the depth matters up to max_depth, beyond which it is clamped."""
    model = small_model(1)
    probs, conf, stale, node, depth = random_inputs(3, 8, seed=3)
    node[:, -1] = False  # the last position committed in every node
    node[:, 1:4] = True
    with torch.no_grad():
        base = model(probs, conf, stale, node, depth)
        probs2, conf2 = probs.clone(), conf.clone()
        probs2[0, -1] = probs2[0, -1].flip(-1)
        conf2[0, -1] = 0.01
        moved = model(probs2, conf2, stale, node, depth)
        assert not torch.allclose(moved[0, node[0]], base[0, node[0]])
        assert torch.equal(moved[1:], base[1:])
        # the same inputs with row 0 swapped to the end give the same per-row logits
        perm = torch.tensor([1, 2, 0])
        swapped = model(probs[perm], conf[perm], stale[perm], node[perm], depth[perm])
        torch.testing.assert_close(swapped, base[perm], rtol=1e-5, atol=1e-5)
        top = model.cfg.max_depth - 1
        shallow = model(probs, conf, stale, node, torch.tensor([0, top - 1, top]))
        deep = model(probs, conf, stale, node, torch.tensor([1, top, top + 7]))
        for i in (0, 1):
            assert not torch.allclose(deep[i, node[i]], shallow[i, node[i]])
        torch.testing.assert_close(deep[2], shallow[2], rtol=1e-5, atol=1e-5)


def test_nan_inputs_are_sanitized():
    """NaN confidences and probabilities (e.g. of positions the target did not score) read as 0: masked logits stay
    finite and equal those of the zero-filled inputs; float16 probabilities (as collect stores them) work too."""
    model = small_model(2)
    probs, conf, stale, node, depth = random_inputs(4, 16, seed=5)
    bad_p, bad_c = probs.clone(), conf.clone()
    bad_p[0, :5] = float("nan")
    bad_p[1, 3, 7:] = float("nan")
    bad_c[:, ::3] = float("nan")
    bad_c[2, 1] = float("inf")
    with torch.no_grad():
        out = model(bad_p, bad_c, stale, node, depth)
        ref = model(bad_p.nan_to_num(0.0), bad_c.nan_to_num(0.0, 0.0, 0.0), stale, node, depth)
        clean = model(probs, conf, stale, node, depth)
        half = model(probs.half(), conf, stale, node, depth)
    assert torch.isfinite(out[node]).all() and torch.isneginf(out[~node]).all()
    assert torch.equal(out, ref)
    assert not torch.allclose(out[node], clean[node])
    torch.testing.assert_close(half, clean, rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------------------------------------------------------
# 3. Weights I/O and the Drafter


def test_save_load_round_trip(tmp_path):
    model = small_model(3, OrderModelConfig(d_model=32, n_layers=2, n_heads=4, d_ff=64, max_block=16, max_depth=5))
    save_order_model(model, tmp_path, extra={"note": "hello"})
    meta = json.loads((tmp_path / "drafter.json").read_text())
    assert meta["note"] == "hello" and meta["config"]["max_depth"] == 5 and meta["config"]["n_layers"] == 2
    loaded = load_order_model(tmp_path)
    assert loaded.cfg == model.cfg and not loaded.training
    inputs = random_inputs(6, 16, seed=7)
    with torch.no_grad():
        assert torch.equal(loaded(*inputs), model(*inputs))
    save_order_model(model, tmp_path, name="other")
    assert (tmp_path / "other.safetensors").is_file() and (tmp_path / "other.json").is_file()


def test_load_drafter_and_position_logits(tmp_path, monkeypatch):
    """spot.load_drafter(dir) wraps the saved model; position_logits gathers each frontier node's stale row."""
    model = small_model(4)
    save_order_model(model, tmp_path)
    drafter = spot.load_drafter(str(tmp_path))
    assert isinstance(drafter, LearnedDrafter) and isinstance(drafter, spot.Drafter)
    assert drafter.device == torch.device("cpu")

    b, B, K = 3, 8, 32
    probs, conf, stale_masked, _, _ = random_inputs(b, B, K, seed=11, dtype=torch.float64)
    stale = spot.StaleFeatures(topk_probs=probs, topk_ids=torch.randint(0, 90, (b, B, K)),
                               tokens=torch.randint(0, 90, (b, B)), confidence=conf.double(), masked=stale_masked,
                               block_start=torch.tensor([3, 10, 17]), block_index=0)
    node_row = torch.tensor([0, 2, 2, 1, 0])
    node_masked = stale_masked[node_row] & (torch.rand(5, B, generator=torch.Generator().manual_seed(1)) < 0.8)
    node_masked[torch.arange(5), stale_masked[node_row].to(torch.int8).argmax(1)] = True
    depth = torch.tensor([0, 1, 2, 0, 3])
    got = drafter.position_logits(stale, node_masked, node_row, depth)
    with torch.no_grad():
        want = model(probs[node_row], conf.double()[node_row], stale_masked[node_row], node_masked, depth)
    assert torch.equal(got, want) and not got.requires_grad
    # a different row mapping gives different logits (the gather is not a no-op)
    other = drafter.position_logits(stale, node_masked, torch.tensor([1, 0, 0, 2, 2]), depth)
    assert not torch.equal(other, got)

    monkeypatch.setattr(spot, "ORDER_WEIGHTS", tmp_path)  # "default" reads the package's weights directory
    with torch.no_grad():
        assert torch.equal(spot.load_drafter("default").model(*random_inputs(2, 8)), model(*random_inputs(2, 8)))


def test_load_drafter_missing(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="drafter"):
        spot.load_drafter(str(tmp_path))
    monkeypatch.setattr(spot, "ORDER_WEIGHTS", tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        spot.load_drafter("default")


# ---------------------------------------------------------------------------------------------------------------
# 4-5. Training data and training


def synthetic_shard(n, B, K=32, seed=0, rule="random", blocks_per_prompt=2):
    """A shard shaped like collect's. rule="random": random commit orders; rule="confidence": each block has a fixed
    per-position confidence and commits in descending order of it (so the stale confidence ranks the rest)."""
    g = torch.Generator().manual_seed(seed)
    conf = torch.rand(n, B, generator=g)
    if rule == "confidence":
        order = conf.argsort(1, descending=True)
    else:
        order = torch.stack([torch.randperm(B, generator=g) for _ in range(n)])
    conf_steps = conf[:, None].expand(n, B, B) if rule == "confidence" else torch.rand(n, B, B, generator=g)
    probs = torch.softmax(torch.randn(n, B, B, K, generator=g) * 2, -1).sort(-1, descending=True).values
    if rule == "confidence":
        probs = probs * 0.3  # keep the probabilities uninformative, but below the confidence
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(B).expand(n, B))
    masked = rank[:, None, :] >= torch.arange(B)[None, :, None]  # masked[b, k, j]: j not among order[b, :k]
    return {
        "topk_probs": probs.half(),
        "topk_ids": torch.randint(0, 1000, (n, B, B, K), generator=g).short(),
        "tokens": torch.randint(0, 1000, (n, B, B), generator=g).short(),
        "confidence": conf_steps.float().contiguous(),
        "masked": masked,
        "order": order.to(torch.int8),
        "prompt": (torch.arange(n) // blocks_per_prompt).int(),
        "block_index": (torch.arange(n) % blocks_per_prompt).int(),
        "block_start": (torch.arange(n) % blocks_per_prompt) * B + 3,
    }


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
    r3 = _train(shards, tmp_path, "three", **{**kw, "seed": 8})
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


# ---------------------------------------------------------------------------------------------------------------
# 6. Collection


COLLECT_CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=64)
COLLECT_PROMPTS = [[5, 9, 14], [7] * 6, [3, 50, 60, 11, 12]]


def _collect(target, out_dir):
    return collect(target, COLLECT_PROMPTS, out_dir, block_sizes=(4,), temperatures=(0.0, 1.0), max_new_tokens=8,
                   batch_size=2, seed=3, top_k=8, progress=False)


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
                  "masked": ((n, B, B), torch.bool), "order": ((n, B), torch.int8),
                  "prompt": ((n,), torch.int32), "block_index": ((n,), torch.int32),
                  "block_start": ((n,), torch.int64)}
        assert set(s) == set(shapes)
        for k, (shape, dtype) in shapes.items():
            assert tuple(s[k].shape) == shape and s[k].dtype == dtype, k
        assert s["prompt"].tolist() == [0, 0, 1, 1, 2, 2] and s["block_index"].tolist() == [0, 1] * 3
        assert s["block_start"].tolist() == [len(p) + B * i for p in COLLECT_PROMPTS for i in (0, 1)]
        ref = spot.generate(target, COLLECT_PROMPTS, "standard", max_new_tokens=8, block_size=B, temperature=T,
                            seed=3, eos_id=None, top_k=K, rows=[0, 1, 2])
        assert torch.equal(s["order"].long(), ref.orders.flatten(0, 1))
        order = s["order"].long()
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


def test_collect_rejects_large_vocabularies(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        collect(SimpleNamespace(vocab_size=2**15 + 1), [[1]], tmp_path, progress=False)


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


# ---------------------------------------------------------------------------------------------------------------
# 7. The resampled feature: the stale top-K re-sampled with the node step's coupled noise


class StateBlindTarget(Target):
    """Logits depend only on (sequence, absolute position), never on the block state: the stale top-K are the
    current ones, so the target's next commit at a node IS the argmax of resampled_confidence at that node's step
    (V <= K, so the top-K hold the whole vocabulary)."""

    def __init__(self, vocab=24, seed=0):
        self.vocab_size, self.mask_id, self.eos_id, self.device = vocab, vocab - 1, None, torch.device("cpu")
        self.table = torch.randn(4, 128, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2

    def start(self, prompts, max_new_tokens, block_size):
        return _BlindSession(self, prompts)


class _BlindSession(Session):
    def __init__(self, target, prompts):
        self.target, self.batch, self.passes = target, len(prompts), 0
        self._start = torch.tensor([len(p) for p in prompts])

    @property
    def block_start(self):
        return self._start.clone()

    def score(self, nodes):
        self.passes += 1
        b, n, B = nodes.shape
        logits = self.target.table[torch.arange(b)[:, None], self._start[:, None] + torch.arange(B)]
        return logits[:, None].expand(b, n, B, -1).clone()

    def append(self, block):
        self._start += block.shape[1]


class ResampledOrder(torch.nn.Module):
    """A stand-in order model that drafts by the resampled confidence alone: exact on a StateBlindTarget."""

    def __init__(self):
        super().__init__()
        self.cfg = OrderModelConfig(resampled=True)
        self.head = torch.nn.Linear(1, 1)

    def forward(self, probs, conf, stale_masked, node_masked, depth, resampled=None, top_ids=None):
        return resampled.float().log().masked_fill(~node_masked, float("-inf"))


def test_resampled_confidence_is_the_gumbel_max_of_the_stale_top_k():
    """Against the noise op directly: per position, argmax of log p + g(seed, row, block_start + j, step, id)."""
    g = torch.Generator().manual_seed(0)
    n, B, K = 3, 6, 5
    probs = torch.softmax(torch.randn(n, B, K, generator=g, dtype=torch.float64), -1).sort(-1, descending=True).values
    ids = torch.stack([torch.stack([torch.randperm(50, generator=g)[:K] for _ in range(B)]) for _ in range(n)])
    ids[0, 1, 3:] = -1  # padding never wins
    probs[0, 1, 3:] = 0
    rows, start, steps = torch.tensor([0, 4, 2]), torch.tensor([7, 0, 19]), torch.tensor([1, 5, 3])
    for T in (0.7, 1.0):
        got = resampled_confidence(probs, ids, 11, rows, start, steps, T)
        for i in range(n):
            for j in range(B):
                ok = ids[i, j] >= 0
                u = spot_kernels.noise_uniform(11, rows[i].expand(K), (start[i] + j).expand(K), steps[i].expand(K),
                                               ids[i, j].clamp_min(0)).double()
                key = torch.where(ok, probs[i, j].log() - (-u.log()).log(), -math.inf)
                assert got[i, j] == probs[i, j, key.argmax()]
    assert torch.equal(resampled_confidence(probs, ids, 11, rows, start, steps, 0.0), probs[..., 0])
    other = resampled_confidence(probs, ids, 11, rows, start, steps + 1, 1.0)
    assert not torch.equal(other, resampled_confidence(probs, ids, 11, rows, start, steps, 1.0))


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


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_decoder_resamples_at_the_nodes_step(temperature):
    """Decoder side: a drafter ranking by the resampled feature is as good as the true order on a state-blind
    target (same passes as `oracle`), and exact; shifting the step it reads by one costs passes."""
    target = StateBlindTarget(seed=1)
    prompts = [[1, 2, 3], [4] * 5]
    kw = dict(max_new_tokens=16, block_size=8, temperature=temperature, seed=3, eos_id=None, budget=5, width=1,
              branch=1)
    ref = spot.generate(target, prompts, "standard", **kw)
    oracle = spot.generate(target, prompts, "oracle", **kw)
    drafter = LearnedDrafter(ResampledOrder())
    out = spot.generate(target, prompts, "spot", drafter=drafter, **kw)
    assert out.tokens == ref.tokens and out.stats.target_passes == oracle.stats.target_passes < ref.stats.target_passes

    class OffByOne(ResampledOrder):
        def forward(self, probs, conf, stale_masked, node_masked, depth, resampled=None, top_ids=None):
            return super().forward(probs, conf, stale_masked, node_masked, depth, shifted.pop(0))

    shifted = []
    real = spot.order_model.resampled_confidence

    def capture(probs, ids, seed, rows, start, steps, T, backend="auto"):
        shifted.append(real(probs, ids, seed, rows, start, steps + 1, T))
        return real(probs, ids, seed, rows, start, steps, T)

    import unittest.mock
    with unittest.mock.patch.object(spot.order_model, "resampled_confidence", capture):
        off = spot.generate(target, prompts, "spot", drafter=LearnedDrafter(OffByOne()), **kw)
    assert off.tokens == ref.tokens and off.stats.target_passes > oracle.stats.target_passes


def test_widening_a_drafter_keeps_its_outputs():
    model = small_model(3)
    wide = with_resampled_inputs(model)
    assert wide.cfg.resampled and wide.cfg.n_features == model.cfg.n_features + 2
    inputs = random_inputs(5, 16, seed=2)
    resampled = torch.rand(5, 16)
    with torch.no_grad():
        assert torch.equal(wide(*inputs, resampled), model(*inputs))
        with pytest.raises(ValueError, match="resampled"):
            wide(*inputs)
    stale = spot.StaleFeatures(topk_probs=inputs[0], topk_ids=torch.zeros(5, 16, 32, dtype=torch.long),
                               tokens=torch.zeros(5, 16, dtype=torch.long), confidence=inputs[1], masked=inputs[2],
                               block_start=torch.zeros(5, dtype=torch.long), block_index=0)
    with pytest.raises(ValueError, match="noise"):
        LearnedDrafter(wide).position_logits(stale, inputs[3], torch.arange(5), inputs[4])


def test_token_inputs_widen_a_drafter_and_read_the_stale_top1_ids():
    model = small_model(3)
    wide = with_token_inputs(model, buckets=16)
    extra = 16 * SMALL.token_dim + SMALL.token_dim * SMALL.d_model
    assert sum(p.numel() for p in wide.parameters()) == sum(p.numel() for p in model.parameters()) + extra
    inputs = random_inputs(5, 16, seed=2)
    ids = torch.randint(-1, 40, (5, 16))
    with torch.no_grad():
        assert torch.equal(wide(*inputs, None, ids), model(*inputs))  # zero projection: unchanged until trained
        with pytest.raises(ValueError, match="top_ids"):
            wide(*inputs)
        torch.nn.init.normal_(wide.tok_proj.weight)
        out = wide(*inputs, None, ids)
        assert not torch.equal(out, model(*inputs))
        # ids 14 and up share the last bucket (15); -1 (none) has bucket 0
        assert torch.equal(wide(*inputs, None, torch.where(ids >= 14, 39, ids)), out)
        assert not torch.equal(wide(*inputs, None, torch.where(ids == 3, -1, ids)), out)
    # the decoder hands over each position's stale top-1 id
    topk_ids = torch.randint(0, 40, (5, 16, 32))
    stale = spot.StaleFeatures(topk_probs=inputs[0], topk_ids=topk_ids, tokens=torch.zeros(5, 16, dtype=torch.long),
                               confidence=inputs[1], masked=inputs[2], block_start=torch.zeros(5, dtype=torch.long),
                               block_index=0)
    rows = torch.tensor([4, 0, 0])
    got = LearnedDrafter(wide).position_logits(stale, inputs[3][rows], rows, inputs[4][rows])
    with torch.no_grad():
        want = wide(inputs[0][rows], inputs[1][rows], inputs[2][rows], inputs[3][rows], inputs[4][rows], None,
                    topk_ids[rows, :, 0])
    assert torch.equal(got, want)


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


# ---------------------------------------------------------------------------------------------------------------
# 8. Exactness of method="spot" with a learned drafter


@pytest.fixture(scope="module")
def target():
    return sharp_target()


PROMPTS = [[5, 9, 14], [7] * 11, [3, 50, 60, 70, 80, 90, 11]]


@pytest.mark.parametrize("block_size", [4, 8])
def test_spot_with_learned_drafter_equals_standard(target, block_size):
    """A random (untrained) order model drives the trees: tokens and orders equal `standard` for every prompt, seed
    and temperature, never with more passes, and some pass accepts drafted commits."""
    drafter = LearnedDrafter(small_model(5))
    accepted, saved = 0, 0
    for seed in (0, 1):
        for temperature in (0.0, 0.7, 1.0):
            kw = dict(max_new_tokens=block_size + block_size // 2, block_size=block_size, temperature=temperature,
                      seed=seed, eos_id=None, rows=[0, 1, 2], budget=6)
            ref = spot.generate(target, PROMPTS, "standard", **kw)
            out = spot.generate(target, PROMPTS, "spot", drafter=drafter, **kw)
            assert out.tokens == ref.tokens, (seed, temperature)
            assert torch.equal(out.orders, ref.orders)
            assert out.stats.target_passes <= ref.stats.target_passes
            # every position of both blocks of every row is committed exactly once
            assert sum(c * m for c, m in out.stats.commits_per_pass.items()) == 3 * 2 * block_size
            accepted += sum(m for c, m in out.stats.commits_per_pass.items() if c > 1)
            saved += ref.stats.target_passes - out.stats.target_passes
    assert accepted > 0 and saved > 0, "no drafted commit was accepted: verification went untested"
