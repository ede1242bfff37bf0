"""The target contract (docs/design.md §2.1) as the model session implements it, checked in float64."""

import torch

from spot.model import BlockDiffusionLM, KVCache
from tiny import TINY, sharp_target

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
