"""The learned order drafter at run time (docs/design.md §2.4): the order model, its weights I/O, the resampled
feature, and exactness of method="spot" with a learned drafter (docs/design.md §2.5, float64 on CPU)."""

import json
import math
from dataclasses import replace

import pytest
import spot
import spot_kernels
import torch
import torch.nn.functional as F
from spot.order_model import (
    SHIPPED_DRAFTERS,
    LearnedDrafter,
    OrderModel,
    OrderModelConfig,
    load_order_model,
    order_features,
    resampled_confidence,
    save_order_model,
    token_bucket_counts,
    with_resampled_inputs,
    with_token_inputs,
    without_token_inputs,
)

from tiny import SMALL, ResampledOrder, StateBlindTarget, random_inputs, sharp_target, small_model


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

    monkeypatch.setitem(SHIPPED_DRAFTERS, "default", tmp_path)  # "default" reads the package's weights directory
    with torch.no_grad():
        assert torch.equal(spot.load_drafter("default").model(*random_inputs(2, 8)), model(*random_inputs(2, 8)))


def test_sharpness_scales_the_logits_and_is_read_from_drafter_json(tmp_path):
    """LearnedDrafter(model, s).position_logits = s x the model's logits (-inf stays -inf); load_drafter takes s from
    drafter.json's optional `tree_sharpness` (default 1) and refuses one that is not a finite number > 0."""
    model = small_model(4)
    save_order_model(model, tmp_path)
    assert spot.load_drafter(str(tmp_path)).sharpness == {"greedy": 1.0, "sampling": 1.0}
    b, B, K = 2, 8, 32
    probs, conf, stale_masked, _, _ = random_inputs(b, B, K, seed=3, dtype=torch.float64)
    stale = spot.StaleFeatures(topk_probs=probs, topk_ids=torch.randint(0, 90, (b, B, K)),
                               tokens=torch.randint(0, 90, (b, B)), confidence=conf.double(), masked=stale_masked,
                               block_start=torch.tensor([0, 8]), block_index=0)
    args = (stale, stale_masked, torch.tensor([0, 1]), torch.tensor([0, 0]))
    plain = LearnedDrafter(model).position_logits(*args)
    save_order_model(model, tmp_path, extra={"tree_sharpness": 2.5})
    sharp = spot.load_drafter(str(tmp_path))
    assert sharp.sharpness == {"greedy": 2.5, "sampling": 2.5}
    got = sharp.position_logits(*args)
    assert torch.equal(torch.isneginf(got), torch.isneginf(plain)) and torch.isfinite(plain[stale_masked]).all()
    assert torch.equal(got[stale_masked], 2.5 * plain[stale_masked])
    # greedy and sampling apart: the stale features' noise coordinates say which applies
    save_order_model(model, tmp_path, extra={"tree_sharpness": {"greedy": 2.0, "sampling": 0.5}})
    split = spot.load_drafter(str(tmp_path))
    for temperature, factor in ((0.0, 2.0), (0.7, 0.5)):
        noisy = replace(stale, noise=spot.NoiseCoordinates(0, torch.arange(b), torch.zeros(b, dtype=torch.long),
                                                           temperature))
        want = LearnedDrafter(model).position_logits(noisy, *args[1:])
        assert torch.equal(split.position_logits(noisy, *args[1:])[stale_masked], factor * want[stale_masked])
    for bad in (0, -1.0, float("inf"), True, "2", {"greedy": 2.0}, {"greedy": 1.0, "sampling": 0}):
        meta = json.loads((tmp_path / "drafter.json").read_text())
        (tmp_path / "drafter.json").write_text(json.dumps({**meta, "tree_sharpness": bad}))
        with pytest.raises(ValueError, match="drafter.json: tree_sharpness"):  # the file and the field named
            spot.load_drafter(str(tmp_path))
    with pytest.raises(ValueError, match="sharpness"):
        LearnedDrafter(model, float("nan"))


def test_a_drafter_carries_its_tree_branch(tmp_path, target, monkeypatch):
    """drafter.json's optional `tree_branch` becomes LearnedDrafter.branch (bad values refused, naming the file);
    `generate` grows spot's trees with it unless given a branch, `confidence` keeps its own (spot.tree.BRANCH for one
    commit per step, eight over a rule), and an
    online wrapper passes its base's on. The tokens are standard's whatever the branch."""
    model = small_model(4)
    save_order_model(model, tmp_path, extra={"tree_branch": 7})
    drafter = spot.load_drafter(str(tmp_path))
    assert drafter.branch == 7 and spot.OnlineCalibrated(drafter).branch == 7
    assert spot.tree.tree_branch(drafter) == 7 and spot.tree.tree_branch(drafter, 2) == 2
    assert spot.tree.tree_branch(LearnedDrafter(model)) == spot.tree.BRANCH == spot.tree.tree_branch(None)
    seen = []
    real = spot.round.grow_tree

    def recording(*args, **kw):
        seen.append(args[4].branch)  # grow_tree(root, step, stale, drafter, cfg, ...)
        return real(*args, **kw)

    monkeypatch.setattr(spot.round, "grow_tree", recording)
    kw = dict(max_new_tokens=8, block_size=4, eos_id=None, budget=6)
    ref = spot.generate(target, PROMPTS, "standard", **kw)
    for method, extra, want in (("spot", {"drafter": drafter}, 7),
                                ("spot", {"drafter": drafter, "tree": spot.TreeSettings(branch=3)}, 3),
                                ("spot", {"drafter": LearnedDrafter(model)}, spot.tree.BRANCH),
                                ("confidence", {}, spot.tree.BRANCH)):
        seen.clear()
        out = spot.generate(target, PROMPTS, method, **extra, **kw)
        assert out.tokens == ref.tokens and seen and set(seen) == {want}, (method, extra)
    # over a rule, `confidence` drafts its sets eight per node (ConfidenceDrafter(resampled=True).branch)
    ref = spot.generate(target, PROMPTS, "standard", rule="steps:2", **kw)
    seen.clear()
    out = spot.generate(target, PROMPTS, "confidence", rule="steps:2", **kw)
    assert out.tokens == ref.tokens and set(seen) == {spot.ConfidenceDrafter(resampled=True).branch} == {8}
    for bad in (0, 2.0, True, "4"):
        meta = json.loads((tmp_path / "drafter.json").read_text())
        (tmp_path / "drafter.json").write_text(json.dumps({**meta, "tree_branch": bad}))
        with pytest.raises(ValueError, match="drafter.json: tree_branch"):
            spot.load_drafter(str(tmp_path))


def test_load_drafter_missing(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="drafter"):
        spot.load_drafter(str(tmp_path))
    monkeypatch.setitem(SHIPPED_DRAFTERS, "default", tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        spot.load_drafter("default")


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


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_decoder_resamples_at_the_nodes_step(temperature):
    """Decoder side: a drafter ranking by the resampled feature is as good as the true order on a state-blind
    target (same passes as `oracle`), and exact; shifting the step it reads by one costs passes."""
    target = StateBlindTarget(seed=1)
    prompts = [[1, 2, 3], [4] * 5]
    kw = dict(max_new_tokens=16, block_size=8, temperature=temperature, seed=3, eos_id=None,
              tree=spot.TreeSettings(budget=5, width=1, branch=1))
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
    # the reference backend performs the model's operations, so bit for bit (the CPU kernel agrees with it to float32
    # rounding: tests/ops/test_order_logits.py)
    got = LearnedDrafter(wide, backend="reference").position_logits(stale, inputs[3][rows], rows, inputs[4][rows])
    with torch.no_grad():
        want = wide(inputs[0][rows], inputs[1][rows], inputs[2][rows], inputs[3][rows], inputs[4][rows], None,
                    topk_ids[rows, :, 0])
    assert torch.equal(got, want)


def test_dropping_token_inputs_folds_their_weighted_mean_into_the_bias():
    """without_token_inputs (how the portable drafter starts from a token-bucket one): the narrowed model reads no
    ids and computes what the wide one computes when every position's id falls in a bucket the weights single out
    (or, uniformly weighted, when every bucket embeds alike)."""
    wide = with_token_inputs(small_model(3), buckets=16)
    torch.nn.init.normal_(wide.tok_proj.weight, generator=torch.Generator().manual_seed(4))
    torch.nn.init.normal_(wide.tok.weight, generator=torch.Generator().manual_seed(5))
    inputs = random_inputs(5, 16, seed=2)
    weights = torch.zeros(16)
    weights[6] = 3.0  # bucket 6 = token id 5
    narrow = without_token_inputs(wide, weights)
    assert narrow.cfg.token_buckets == 0 and not any(k.startswith("tok") for k in narrow.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(narrow(*inputs), wide(*inputs, None, torch.full((5, 16), 5)))
        wide.tok.weight[:] = wide.tok.weight[0]
        any_ids = torch.randint(-1, 40, (5, 16))
        torch.testing.assert_close(without_token_inputs(wide)(*inputs), wide(*inputs, None, any_ids))
    assert torch.equal(token_bucket_counts(torch.tensor([[-1, 0, 0], [14, 99, 3]]), 16),
                       torch.tensor([1., 2, 0, 0, 1] + [0.] * 10 + [2]))
    with pytest.raises(ValueError, match="bucket_weights"):
        without_token_inputs(wide, torch.zeros(16))
    assert without_token_inputs(narrow) is narrow


@pytest.fixture(scope="module")
def target():
    return sharp_target()


PROMPTS = [[5, 9, 14], [7] * 11, [3, 50, 60, 70, 80, 90, 11]]


@pytest.mark.parametrize("block_size,sharpness", [(4, 1.0), (8, 1.0), (8, 3.0)])
def test_spot_with_learned_drafter_equals_standard(target, block_size, sharpness):
    """A random (untrained) order model drives the trees: tokens and orders equal `standard` for every prompt, seed
    and temperature, never with more passes, and some pass accepts drafted commits; whatever the drafter's
    sharpness (it reshapes the trees, never the tokens)."""
    drafter = LearnedDrafter(small_model(5), sharpness)
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


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_per_pass_inputs_give_the_per_node_logits_bit_for_bit(temperature):
    """LearnedDrafter computes what depends on the stale pass once per pass (and the resampled probabilities once
    per sequence and step), then gathers them per node: the logits equal the per-node `OrderModel.forward`'s, bit
    for bit, at every depth of a tree drafted from the same stale features, and a new StaleFeatures is re-read. The
    drafter runs the op's reference backend, which performs the model's operations (the CPU kernel agrees with it to
    float32 rounding: tests/ops/test_order_logits.py)."""
    torch.manual_seed(1)
    model = OrderModel(OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64, resampled=True,
                                       token_buckets=64)).eval()
    drafter = LearnedDrafter(model, backend="reference")
    b, B, K = 3, 16, 32

    def stale_of(seed):
        probs, conf, stale_masked, _, _ = random_inputs(b, B, K, seed=seed)
        ids = torch.randint(0, 200, (b, B, K), generator=torch.Generator().manual_seed(seed))
        noise = spot.NoiseCoordinates(7, torch.tensor([0, 5, 2]), torch.tensor([1, 0, 4]), temperature)
        return spot.StaleFeatures(probs, ids, ids[..., 0], conf, stale_masked, torch.tensor([10, 20, 30]), 0,
                                  noise=noise)

    for seed in (0, 1):
        stale = stale_of(seed)
        for d in range(3):  # depths of one tree: 2 frontier nodes per sequence
            node_row = torch.arange(b).repeat_interleave(2)
            node_masked = stale.masked[node_row] & (torch.rand(2 * b, B) < 0.8)
            node_masked[torch.arange(2 * b), stale.masked[node_row].to(torch.int8).argmax(1)] = True
            node_masked &= stale.masked[node_row]
            depth = torch.full_like(node_row, d)
            got = drafter.position_logits(stale, node_masked, node_row, depth)
            n = stale.noise
            resampled = resampled_confidence(stale.topk_probs[node_row], stale.topk_ids[node_row], n.seed,
                                             n.rows[node_row], stale.block_start[node_row], n.root_step[node_row] + d,
                                             n.temperature)
            with torch.no_grad():
                want = model(stale.topk_probs[node_row], stale.confidence[node_row], stale.masked[node_row],
                             node_masked, depth, resampled, stale.topk_ids[node_row, :, 0])
            assert torch.equal(got, want), (seed, d)
