"""Small valid arguments for every op (schema order, without `backend`), for tests that sweep all ops."""

import torch

I64 = torch.int64


def sample_args(op: str) -> tuple:
    g = torch.Generator().manual_seed(0)
    if op == "noise_uniform":
        return (5, torch.arange(3)[:, None], torch.tensor(7), torch.tensor(1), torch.arange(4))
    if op == "score":
        return (torch.randn(2, 3, 11, generator=g), torch.rand(2, 3, generator=g) < 0.6, 3, torch.zeros(2, dtype=I64),
                torch.tensor([0, 8]), torch.tensor([0, 2]), 0.7, "prob", 4)
    if op == "select_children":
        probs = torch.softmax(torch.randn(2, 4, 3, generator=g), -1)
        return (torch.randn(2, 4, generator=g), torch.ones(2, 4, dtype=torch.bool), torch.zeros(2), probs,
                torch.randint(0, 9, (2, 4, 3), generator=g), 1, torch.arange(2), torch.zeros(2, dtype=I64),
                torch.tensor([1, 3]), 1.0, 2)
    if op == "expand_frontier":  # 2 rows, 2 frontier nodes each, B 4, mask id 9
        probs = torch.softmax(torch.randn(2, 4, 3, generator=g), -1)
        states = torch.tensor([[9, 9, 1, 9], [9, 2, 9, 9], [9, 9, 9, 9], [3, 9, 9, 1]])  # flat [b * w, B]
        return (torch.randn(4, 4, generator=g), states, torch.zeros(4), probs,
                torch.randint(0, 9, (2, 4, 3), generator=g), 1, torch.arange(2), torch.zeros(2, dtype=I64),
                torch.tensor([1, 3]), 1.0, 9, 2, 3)
    if op == "verify_tree":
        t = torch.tensor
        return (t([[-1, 0, 1]]), t([[0, 1, 2]]), t([[0, 10, 20]]), t([[1, 2, 3]]), t([[10, 20, 30]]),
                torch.zeros(1, 4, dtype=I64))
    if op == "commit_rule":  # 2 x 3 nodes, B 5: threshold 0.3 with a quota of 2 at step 1 (spot.rules' layout)
        quota = torch.tensor([[1] * 6, [2] * 6])
        thresholds = torch.full((6, 5), 0.3, dtype=torch.float64)
        return (torch.rand(2, 3, 5, generator=g), torch.rand(2, 3, 5, generator=g) < 0.7,
                torch.tensor([[0, 1, 2], [1, 0, 3]]), quota, thresholds, False)
    if op == "verify_steps":  # 1 row, 4 nodes, B 4: node 1 is the root's successor, node 3 node 1's, node 2 not
        m = 9
        states = torch.tensor([[[m, m, m, m], [5, m, 6, m], [5, m, m, 7], [5, 8, 6, m]]])
        commit = torch.tensor([[[True, False, True, False], [False, True, False, False], [False] * 4,
                                [False, False, False, True]]])
        tokens = torch.tensor([[[5, 1, 6, 2], [0, 8, 3, 4], [1, 2, 3, 4], [7, 7, 7, 3]]])
        return (torch.tensor([[-1, 0, 0, 1]]), states, commit, tokens)
    if op == "expand_steps":  # expand_frontier's sample with a size distribution per frontier node
        args = sample_args("expand_frontier")
        sizes = torch.log_softmax(torch.randn(4, 5, generator=g), -1)
        sizes[:, 0] = float("-inf")
        return args[:3] + (sizes,) + args[3:]
    if op == "tree_attention":
        b, hq, hkv, n, block, prefix, dim = 2, 4, 2, 3, 2, 5, 4
        return (torch.randn(b, hq, n, block, dim, generator=g), torch.randn(b, hkv, prefix, dim, generator=g),
                torch.randn(b, hkv, prefix, dim, generator=g), torch.randn(b, hkv, n, block, dim, generator=g),
                torch.randn(b, hkv, n, block, dim, generator=g), torch.tensor([0, 2]), None)
    if op == "order_logits":  # 2 stale rows, 3 nodes, B 4; d_model 8, 1 layer, 2 heads, d_ff 8, tokens and resampled
        from spot_kernels.ops.order_logits import weight_count, weight_layout

        weights = torch.randn(weight_count(weight_layout(5 + 3 + 2, 8, 1, 8, 4, 2, 3)), generator=g)
        return (torch.randn(2, 4, 5, generator=g), torch.rand(2, 4, generator=g) < 0.7,
                torch.randn(2, 4, 3, generator=g), torch.tensor([1, 0, 1]), torch.rand(3, 4, generator=g) < 0.7,
                torch.tensor([0, 1, 5]),
                torch.rand(2, 4, generator=g), weights, 8, 1, 2, 8, 4, 2, 1.5)
    tree = (torch.tensor([0, 2]), 5, 2, 2, 3)
    if op == "tree_mask_additive":
        return tree + (torch.float32,)
    return tree
