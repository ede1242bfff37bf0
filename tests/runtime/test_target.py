"""The target contract (docs/design.md §2.1) as the model session implements it, checked in float64."""

import pytest
import torch

import spot
from spot.loading import embedded_target_available
from spot.model import BlockDiffusionLM, KVCache
import helpers
from tiny import TINY, sharp_target, target_with_sessions

B = 4


def _dense_reference(model, prompt, block):
    """No cache, no tree: the prompt attends causally, the block bidirectionally to itself and the prompt."""
    ids = torch.tensor([prompt + block])
    n, p = len(prompt) + len(block), len(prompt)
    q, k = torch.arange(n)[:, None], torch.arange(n)[None, :]
    mask = (k <= q) | ((q >= p) & (k >= p))
    return model(ids, torch.arange(n)[None], mask[None, None])[0, p:]


def test_session_matches_dense_forward():
    target = sharp_target()
    prompt, block = [5, 6, 7, 8, 9], [2, 11, 2, 2]
    session = target.start([prompt], max_new_tokens=8, block_size=B)
    logits = session.score(torch.tensor([[block]]))[0, 0]
    torch.testing.assert_close(logits, _dense_reference(target.model, prompt, block), rtol=1e-10, atol=1e-10)
    # The next block sees the appended one through the cache, fused into the next pass.
    session.append(torch.tensor([[3, 4, 12, 13]]))
    nxt = session.score(torch.tensor([[[2, 2, 2, 2]]]))[0, 0]
    torch.testing.assert_close(nxt, _dense_reference(target.model, prompt + [3, 4, 12, 13], [2] * 4),
                               rtol=1e-10, atol=1e-10)
    assert session.passes == 2 and session.block_start.tolist() == [5 + 4]


def test_nodes_do_not_see_each_other():
    target = sharp_target()
    root = torch.tensor([2, 2, 2, 2])
    other = torch.tensor([[7, 2, 2, 2], [2, 8, 9, 2], [1, 1, 1, 1]])
    alone = target.start([[4, 5]], 8, B).score(root[None, None])[0, 0]
    together = target.start([[4, 5]], 8, B).score(torch.cat((root[None], other))[None])[0]
    torch.testing.assert_close(together[0], alone, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(together[1], alone)


def test_left_padding_is_invisible():
    target = sharp_target()
    prompts = [[4, 5, 6, 7, 8, 9, 10], [11, 12]]
    block = torch.tensor([2, 13, 2, 2])
    batched = target.start(prompts, 8, B).score(block.expand(2, 1, B).contiguous())
    for i, p in enumerate(prompts):
        single = target.start([p], 8, B).score(block[None, None])
        torch.testing.assert_close(batched[i], single[0], rtol=1e-10, atol=1e-10)


def test_cache_capacity_and_parameter_count():
    model = BlockDiffusionLM(TINY)
    cache = KVCache(TINY, batch=2, capacity=10, dtype=torch.float32, device="cpu")
    assert cache.k[0].shape == (2, TINY.n_kv_heads, 10, TINY.head_dim) and len(cache.k) == TINY.n_layers
    # Closed form for TINY (V 97, d 32, 2 layers, 4 heads of 8, 2 kv heads, d_ff 64), tied embeddings:
    attention = 32 * 32 + 2 * (32 * 16) + 32 * 32 + 2 * 8  # q, k, v, o projections; q/k norms
    mlp = 3 * (32 * 64)  # gate, up, down
    assert model.num_parameters() == 97 * 32 + 2 * (attention + mlp + 2 * 32) + 32


def test_float32_root_logits_do_not_depend_on_the_tree():
    """A node's logits are bit-identical whether it is scored alone or beside 15 others (float32): what keeps
    float32 speculative decoding token-identical to standard, not just close."""
    import spot
    from spot.model import ModelConfig

    cfg = ModelConfig(vocab_size=97, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, pad_id=0, eos_id=1,
                      mask_id=2)
    target = spot.load_target("random", config=cfg, seed=3)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]
    block = torch.full((2, 8), 2)
    drafted = block.clone()
    drafted[:, :3] = torch.tensor([20, 21, 22])
    nodes = drafted[:, None].repeat(1, 16, 1)
    nodes[:, 1:, 5] = torch.arange(30, 45)
    for threads in (1, 2):
        saved = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            alone, together = target.start(prompts, 16, 8), target.start(prompts, 16, 8)
            for s in (alone, together):
                s.score(block[:, None])  # first pass also appends the prompts: identical for both
            a, t = alone.score(drafted[:, None])[:, 0], together.score(nodes)
        finally:
            torch.set_num_threads(saved)
        assert torch.equal(a, t[:, 0]), f"{threads} threads: max diff {(a - t[:, 0]).abs().max()}"
        assert not torch.equal(t[:, 1], t[:, 2])  # the other nodes really are other states


def test_cache_grows_by_doubling_and_keeps_its_contents():
    """The buffer grows only when the longest row needs it: at least doubling, up to the session's maximum, its
    held keys copied to the end of the new buffer (rows stay right-aligned at the end)."""
    cache = KVCache(TINY, batch=1, capacity=4, dtype=torch.float64, device="cpu", max_capacity=100)
    cache.k[0][:, :, 1:] = 7.0
    cache.hold(3)
    assert cache.length == 3 and cache.starts == [1]
    cache.reserve(4)
    assert cache.capacity == 4 and cache.starts == [1]  # room enough: nothing moves
    cache.reserve(5)
    assert cache.capacity == 8 and cache.k[0].shape[2] == 8 and cache.starts == [5]
    assert cache.k[0][0, 0, :, 0].tolist() == [0.0] * 5 + [7.0] * 3  # free slots are zeros, the keys at the end
    assert cache.row_lengths.tolist() == [3]
    cache.reserve(60)
    assert cache.capacity == 60 and cache.starts == [57]
    cache.reserve(100)
    assert cache.capacity == 100  # doubling stops at the session's maximum
    with pytest.raises(RuntimeError, match="maximum of 100"):
        cache.reserve(101)


def test_session_cache_grows_with_the_prefix_not_max_new_tokens():
    """A session asked for 10**5 new tokens holds a cache for the positions it has used, and scores exactly as a
    session sized for the tokens it decodes."""
    target = sharp_target()
    big, small = target.start([[4, 5]], 10**5, B), target.start([[4, 5]], 12, B)
    for i in range(3):
        block = torch.tensor([[[2, 10 + i, 2, 20 + i]]])
        assert torch.equal(big.score(block), small.score(block))
        big.append(block[:, 0])
        small.append(block[:, 0])
    # at most the prompt and answer, plus one pass's appended tokens on top of another row's prefix (per-row
    # progress right-aligns rows); the buffers hold only what was used
    assert big.cache.max_capacity == 2 + 10**5 + max(2, B) and big.cache.capacity <= 2 * (2 + 3 * B)
    # decoding through generate, stopped early by end-of-sequence, leaves the cache far below max_new_tokens
    eos = spot.generate(target, [[4, 5]], max_new_tokens=8, block_size=B, eos_id=None).tokens[0][5]
    sessions, start = [], target.start
    target.start = lambda *args, **kw: sessions.append(start(*args, **kw)) or sessions[-1]
    out = spot.generate(target, [[4, 5]], "confidence", max_new_tokens=10**5, block_size=B, eos_id=eos)
    assert out.tokens[0][-1] == eos and len(out.tokens[0]) <= 2 * B
    assert sessions[0].cache.capacity <= 2 * (2 + 2 * B) < 10**5


def test_cache_larger_than_the_limit_is_refused(monkeypatch):
    target = sharp_target()
    # TINY in float64: 2 layers x (k, v) x 2 kv heads x 8 dims x 8 bytes = 512 bytes per position and prompt
    with pytest.raises(ValueError, match="max_new_tokens: .*SPOT_KV_CACHE_LIMIT_GB"):
        spot.generate(target, [[4, 5]], max_new_tokens=10**9)  # 512 GB > the default 16 GB
    monkeypatch.setenv("SPOT_KV_CACHE_LIMIT_GB", "0.001")  # 1 MB: 1953 positions
    target.start([[4, 5]], 1900, B)
    with pytest.raises(ValueError, match="max_new_tokens"):
        target.start([[4, 5]], 2000, B)
    monkeypatch.setenv("SPOT_KV_CACHE_LIMIT_GB", "lots")
    with pytest.raises(ValueError, match="SPOT_KV_CACHE_LIMIT_GB"):
        target.start([[4, 5]], 8, B)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lazy_logits_equal_scored_logits_bit_for_bit(dtype):
    """score_lazily is the same pass as score (one pass each, prompts appended the same way), and the LM head run
    for any subset of (row, node) pairs gives exactly score's logits for them: full() and of(rows, nodes)."""
    target = sharp_target(dtype=dtype)
    prompts = [[4, 5, 6, 7, 8, 9, 10], [11, 12]]
    g = torch.Generator().manual_seed(0)
    nodes = torch.randint(3, TINY.vocab_size, (2, 5, B), generator=g)
    nodes[nodes % 3 == 0] = target.mask_id
    eager, lazy = target.start(prompts, 8, B), target.start(prompts, 8, B)
    for _ in range(2):  # the first pass appends the prompts, the second appends nothing
        want = eager.score(nodes)
        got = lazy.score_lazily(nodes)
        assert got.dtype == want.dtype == dtype and torch.equal(got.full(), want)
        rows, at = torch.tensor([1, 0, 1]), torch.tensor([4, 2, 0])
        assert torch.equal(got.of(rows, at), want[rows, at])
        assert torch.equal(got.of(rows[:1], at[:1]), want[1, 4][None])  # one node alone
        for s in (eager, lazy):
            s.append(nodes[:, 0].clamp_min(3))
    assert eager.passes == lazy.passes == 2


def test_pass_builds_only_the_mask_block_the_model_reads(monkeypatch):
    """A pass builds the mask of its appended prefix tokens alone (no node rows, no node keys), none when it
    appends nothing; its logits equal those of a pass handed the whole dense tree mask."""
    import spot_kernels
    target = sharp_target()
    built = []
    real = spot_kernels.tree_mask

    def spy(key_start, **shape):
        built.append(shape)
        return real(key_start, **shape)

    nodes = torch.tensor([[[2, 2, 2, 2], [7, 2, 2, 2], [2, 8, 9, 2]]])
    monkeypatch.setattr(spot_kernels, "tree_mask", spy)
    session = target.start([[4, 5, 6]], 8, B)
    first = session.score(nodes)
    session.append(torch.tensor([[7, 8, 9, 10]]))
    second = session.score(nodes)
    assert [s["num_nodes"] for s in built] == [0, 0] and [s["num_new"] for s in built] == [3, 4]
    monkeypatch.setattr(spot_kernels, "tree_mask", lambda key_start, **shape: real(
        key_start, **{**shape, "num_nodes": nodes.shape[1]}))  # the dense mask of before, every row and key
    dense = target.start([[4, 5, 6]], 8, B)
    assert torch.equal(dense.score(nodes), first)
    dense.append(torch.tensor([[7, 8, 9, 10]]))
    assert torch.equal(dense.score(nodes), second)


def test_the_pass_settings_travel_as_arguments_not_hidden_state():
    """The kernels and backend of a pass reach the norms, projections, attention and LM head as arguments: no
    context variable carries them, and neither module sets an attribute on another object (a cache's `held`
    flag set by the session, say): every attribute assignment in model.py and target.py is to `self`."""
    import ast
    import pathlib

    import spot.model
    import spot.target

    for module in (spot.model, spot.target):
        source = pathlib.Path(module.__file__).read_text()
        assert "contextvars" not in source and "ContextVar" not in source, module.__name__
        foreign = []
        for node in ast.walk(ast.parse(source)):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for part in ast.walk(t):
                    if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store) and not (
                            isinstance(part.value, ast.Name) and part.value.id == "self"):
                        foreign.append(f"line {part.lineno}: {ast.unparse(part)}")
        assert not foreign, f"{module.__name__} sets attributes of other objects: {foreign}"


def test_generate_backend_reaches_the_target_pass(monkeypatch):
    """generate(backend=...) is the backend of the embedded target's tree ops too (tree_mask, tree_position_ids,
    tree_attention), not only of the round's; "cpu", which has no tree-op kernels, covers them with the reference
    (as SPOT_BACKEND=cpu does); the tokens are the same under every backend, and an unknown one is refused."""
    helpers.assert_backend_reaches_tree_ops(monkeypatch, sharp_target(), [[4, 5, 6], [7, 8]],
                                            {"tree_mask", "tree_position_ids", "tree_attention"},
                                            max_new_tokens=8, block_size=B)


def test_the_cache_right_aligns_rows_from_host_integers():
    """KVCache.right_align for a pass appending 1 token to row 0 and 3 to row 1: both rows move left by 3 (the most
    any row appends), then row 0's keys move back right by 2, into two new slots the pass keeps (`Append.held`);
    row 1 (joined with no keys) starts where its tokens will; the decisions read host integers only. Every row
    ends at the end of the buffer, rows leave and free their slots."""
    from spot.model import Append

    def kv(values):  # [1 or 2 rows, kv heads, len(values), head_dim] holding `values` along the positions
        return torch.tensor(values, dtype=torch.float64)[None, None, :, None].expand(
            1, TINY.n_kv_heads, len(values), TINY.head_dim)

    cache = KVCache(TINY, batch=1, capacity=4, dtype=torch.float64, device="cpu", max_capacity=16)
    append = cache.right_align([3])
    assert append == Append(1, 3, None)
    for layer in range(TINY.n_layers):
        cache.update(layer, kv([1.0, 2.0, 3.0]), kv([1.0, 2.0, 3.0]), append)
    cache.add_rows(1, max_capacity=16)
    assert cache.length == 3 and cache.starts == [1, 4] and cache.key_start.tolist() == [1, 4]
    append = cache.right_align([1, 3])  # 3 + 3 slots needed: the buffer doubles to 8, the keys at its end
    assert cache.capacity == 8 and (append.start, append.count) == (5, 3)
    assert append.held.tolist() == [[True, True, False], [False, False, False]]
    assert cache.starts == [4, 5] and cache.key_start.tolist() == [4, 5]
    for t in cache.k + cache.v:
        assert t[0, 0, 4:7, 0].tolist() == [1.0, 2.0, 3.0]
    new = torch.full((2, TINY.n_kv_heads, 3, TINY.head_dim), -1.0, dtype=torch.float64)
    keys, _ = cache.update(0, new, new.clone(), append)
    assert keys.shape[2] == cache.capacity  # the whole buffer: a pass's shape does not follow the rows' lengths
    assert keys[0, 0, 4:, 0].tolist() == [1.0, 2.0, 3.0, -1.0]  # the held slots keep row 0's keys
    assert keys[1, 0, 5:, 0].tolist() == [-1.0, -1.0, -1.0]
    assert cache.length == 4 and cache.row_lengths.tolist() == [4, 3]
    assert cache.right_align([0, 0]) == Append(8, 0, None) and cache.starts == [4, 5]  # nothing moves
    cache.keep_rows([1])
    assert cache.length == 3 and cache.starts == [5] and cache.k[0].shape[0] == 1
    assert cache.k[0][0, 0, 5:, 0].tolist() == [-1.0, -1.0, -1.0]


class _Graphs:
    """A torch.compile backend that counts the graphs it traces and the calls run through them (eagerly)."""

    def __init__(self):
        self.graphs = self.calls = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1

        def run(*args):
            self.calls += 1
            return gm.forward(*args)
        return run


def _decode_eager_and(other_target, method, eager_tree=None, other_tree=None, **kw):
    """The same decode by sharp_target() and by `other_target` (dynamo reset, recompiles capped): the two outputs,
    after checking their tokens and commit orders are equal."""
    import torch._dynamo

    prompts = [[4, 5, 6], [7, 8, 9, 10, 11]]
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=64, fail_on_recompile_limit_hit=True):
        eager = spot.generate(sharp_target(), prompts, method, **({"tree": eager_tree} if eager_tree else {}), **kw)
        other = spot.generate(other_target, prompts, method, **({"tree": other_tree} if other_tree else {}), **kw)
    assert other.tokens == eager.tokens and torch.equal(other.orders, eager.orders)
    return eager, other


@pytest.mark.parametrize("method", ["standard", "spot"])
def test_the_embedded_pass_traces_whole_with_the_eager_tokens(method):
    """torch.compile(fullgraph=True) traces the embedded target's whole pass (KV-cache alignment, masks, positions,
    tree attention, LM head) with no graph break, and decoding through it gives eager's tokens and passes. Its
    host part and the CPU's per-row key slicing read the rows' starts, so the graph is traced again when they
    change (after a pass that appends) and reused by the passes within a block (the capturable pass, below, is
    not)."""
    from spot.order_model import LearnedDrafter
    from spot.target import ModelSession, NodeLogits
    from tiny import small_model

    graphs = _Graphs()

    class CompiledSession(ModelSession):
        def __init__(self, *args):
            super().__init__(*args)
            self._score = torch.compile(super().score, fullgraph=True, backend=graphs)

        def score_lazily(self, nodes):
            return NodeLogits(self._score(nodes))

    kw = dict(max_new_tokens=12, block_size=B, temperature=0.0)
    if method == "spot":
        kw.update(drafter=LearnedDrafter(small_model()), budget=4)
    eager, compiled = _decode_eager_and(target_with_sessions(CompiledSession), method, **kw)
    assert compiled.stats.target_passes == eager.stats.target_passes == graphs.calls
    assert 0 < graphs.graphs < graphs.calls  # passes within a block reuse their graph


@pytest.mark.parametrize("method", ["standard", "spot"])
def test_the_capturable_pass_keeps_one_graph_until_the_cache_grows(method):
    """With `Kernels(capturable=True)` (the shapes a GPU runs) the embedded pass's tensor work
    (`ModelSession.forward`), traced whole with fixed shapes (fullgraph, dynamic=False), is traced once per bucket
    (rows, cache capacity, tokens appended, node slots): never again because a block ended or rows moved in the
    cache, so a CUDA graph captured for a bucket stays valid across blocks. Decoding through the graphs gives
    eager's tokens and passes (float64: the same tokens as the CPU's row-sliced path too)."""
    from spot.order_model import LearnedDrafter
    from spot.target import ModelSession
    from tiny import small_model

    graphs, buckets = _Graphs(), set()

    class CapturedSession(ModelSession):
        def __init__(self, *args):
            super().__init__(*args)
            self._forward = torch.compile(super().forward, fullgraph=True, dynamic=False, backend=graphs)

        def forward(self, ids, append, n, B, head):
            buckets.add((self.batch, self.cache.capacity, append.start, append.count, append.held is not None, n,
                         head))
            return self._forward(ids, append, n, B, head)

    kw = dict(max_new_tokens=6 * B, block_size=B, temperature=0.0)
    if method == "spot":
        kw.update(drafter=LearnedDrafter(small_model()))
    static = spot.TreeSettings(budget=4, static=True)
    eager, captured = _decode_eager_and(target_with_sessions(CapturedSession, capturable=True), method,
                                        eager_tree=static, other_tree=static, **kw)
    assert captured.stats.target_passes == eager.stats.target_passes == graphs.calls
    assert graphs.graphs == len(buckets) < graphs.calls
    # the six blocks outnumber the buckets of passes that append nothing: a graph outlives its block
    assert len({b for b in buckets if b[3] == 0}) < 6


class _WholePassGraphs(_Graphs):
    """_Graphs that also counts the graphs holding a target forward (a tree attention): the whole round's."""

    def __init__(self):
        super().__init__()
        self.whole = 0

    def __call__(self, gm, example_inputs):
        if any(node.target in (torch.ops.spot.tree_attention, torch.ops.spot.tree_attention.default)
               for node in gm.graph.nodes):
            self.whole += 1
        return super().__call__(gm, example_inputs)


@pytest.mark.parametrize("method", ["standard", "spot"])
def test_a_compiled_round_runs_the_embedded_forward_inside_its_graph(method):
    """generate with a compiled round (`TreeSettings(compile=...)`) and a session whose pass is capturable runs
    every pass that appends nothing as one graph, draft -> the embedded forward -> settle (`round.run_round`):
    what a GPU captures and replays (on CUDA with "inductor": mode="reduce-overhead", CUDA graphs). The tokens and
    passes are eager's, and the whole-round graphs are fewer than the blocks: they outlive their block."""
    from spot.order_model import LearnedDrafter
    from tiny import recording_capturable_target, small_model

    recorded, whole_calls = recording_capturable_target()
    blocks = 6
    kw = dict(max_new_tokens=blocks * B, block_size=B, temperature=0.7)
    if method == "spot":
        kw.update(drafter=LearnedDrafter(small_model()))
    graphs = _WholePassGraphs()
    eager, compiled = _decode_eager_and(recorded, method,
                                        eager_tree=spot.TreeSettings(budget=4, static=True),
                                        other_tree=spot.TreeSettings(budget=4, compile=graphs), **kw)
    assert compiled.stats.target_passes == eager.stats.target_passes == len(whole_calls)
    whole = sum(whole_calls)
    assert whole >= compiled.stats.target_passes - 2 * blocks  # all but a row's first pass of each block
    assert 0 < graphs.whole < blocks


@pytest.mark.parametrize("k, n", [(256, 256), (256, 128), (768, 256), (256, 4096), (32, 97)])
def test_a_linear_rows_result_does_not_depend_on_the_call(k, n):
    """model.linear (every projection and the LM head on a CPU): a row's float32 result is the same bits alone (one
    row, padded to 16), beside up to 599 others and at other places among them, on this machine's matrix-multiply
    path (MKL's AVX-512 or AVX2 kernels: model._call_rows checks each row count, and the AVX2 ones need 16-row
    blocks). The shapes: the embedded model's projections and LM head, the tiny test model's LM head."""
    from spot.model import linear

    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(640, k, generator=g), torch.randn(n, k, generator=g)
    picked = list(range(0, 640, 37))
    alone = {i: linear(x[i:i + 1], w)[0] for i in picked}
    for start in (0, 1, 5, 13):
        for m in (2, 16, 31, 32, 48, 64, 100, 256, 257, 600):
            out = linear(x[start:start + m], w)
            for i in picked:
                if start <= i < start + m:
                    assert torch.equal(out[i - start], alone[i]), (start, m, i)


@pytest.mark.skipif(not embedded_target_available(), reason="no embedded weights in this checkout")
@pytest.mark.parametrize("threads", [1, 2])
def test_a_nodes_prefix_rows_do_not_depend_on_the_other_nodes(threads, monkeypatch):
    """The CPU node attention: a drafted node's float32 logits on the embedded model are the same bits alone and
    first among 15 others at B 32, for two sequences. Where this machine's BLAS sums a row of the prefix products
    otherwise with the call's row count (MKL's AVX2 sgemm: `make test` runs this under MKL_ENABLE_INSTRUCTIONS=AVX2),
    model.prefix_rows_depend_on_count says so and the attention takes one call per node; the batched call alone then
    fails this test."""
    from spot import model

    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        target = spot.load_target()
        B, prompt = 32, [[5, 6, 7, 8, 9], [10, 11]]
        block = torch.full((2, B), target.mask_id)
        drafted = block.clone()
        drafted[:, :2] = torch.tensor([20, 21])
        nodes = drafted[:, None].repeat(1, 16, 1)
        nodes[:, 1:, B - 1] = 30 + torch.arange(15)

        def alone_and_together():
            alone, together = (target.start(prompt, 2 * B, B) for _ in range(2))
            for s in (alone, together):
                s.score(block[:, None])  # appends the prompt: the same for both
            return alone.score(drafted[:, None])[:, 0], together.score(nodes)[:, 0]

        a, t = alone_and_together()
        assert torch.equal(a, t)
        hd = target.model.cfg.head_dim
        if model.prefix_rows_depend_on_count(hd, B, torch.float32, threads, "auto"):
            monkeypatch.setattr(model, "prefix_rows_depend_on_count", lambda *args: False)  # the batched call
            a, t = alone_and_together()
            assert not torch.equal(a, t), "the check found a dependence the batched call does not show"
    finally:
        torch.set_num_threads(saved)
