"""Issue #39 ("Trust, round three"), the ops' row: an input broadcast with a zero stride holds one element but is
read (and copied by any kernel that makes it contiguous) at its logical size. `spot_kernels.score`, `verify_tree`
and `noise_uniform` on such inputs of 2**34-2**40 elements reached the allocator (`DefaultCPUAllocator: can't
allocate memory`); every op now counts its inputs at their logical size with its outputs (`checks.footprint`)
before anything is allocated or read, and refuses above SPOT_MEMORY_LIMIT_GB, naming the op and the input.
"""

import re
import time

import pytest
import spot_kernels
import torch

Z = torch.zeros((), dtype=torch.long)
LIMIT = r"above the limit of 16 GB \(SPOT_MEMORY_LIMIT_GB\)"


def refused_at_once(call, match):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        call()
    assert time.perf_counter() - t0 < 5  # from the shapes: nothing was computed


@pytest.mark.parametrize("log2", [34, 37, 40])
def test_score_counts_broadcast_logits_at_their_logical_size(log2, monkeypatch):
    monkeypatch.delenv("SPOT_MEMORY_LIMIT_GB", raising=False)
    lead = 2 ** (log2 - 14)
    logits = torch.zeros(()).expand(lead, 2**10, 2**4)
    masked = torch.ones((), dtype=torch.bool).expand(lead, 2**10)
    rows = Z.expand(lead)
    refused_at_once(lambda: spot_kernels.score(logits, masked, 0, rows, rows, rows, 1.0),
                    rf"spot.score: its inputs at their logical size \(logits: shape \[{lead}, 1024, 16\].*{LIMIT}")


@pytest.mark.parametrize("log2", [34, 37, 40])
def test_verify_tree_counts_broadcast_trees_at_their_logical_size(log2, monkeypatch):
    monkeypatch.delenv("SPOT_MEMORY_LIMIT_GB", raising=False)
    b, n = 2 ** (log2 - 17), 2**17
    parents = torch.full((), -1).expand(b, n)
    x = Z.expand(b, n)
    refused_at_once(lambda: spot_kernels.verify_tree(parents, x, x, x, x, Z.expand(b, 4)),
                    rf"spot.verify_tree: its inputs at their logical size \(parents: shape \[{b}, {n}\].*{LIMIT}")


@pytest.mark.parametrize("log2", [34, 37, 40])
def test_noise_uniform_counts_broadcast_inputs_and_its_output(log2, monkeypatch):
    """Broadcast inputs, and small real inputs that broadcast against each other to a huge output."""
    monkeypatch.delenv("SPOT_MEMORY_LIMIT_GB", raising=False)
    big = Z.expand(2**log2)
    refused_at_once(lambda: spot_kernels.noise_uniform(0, big, big, big, big),
                    rf"spot.noise_uniform: its inputs at their logical size \(rows: shape \[{2**log2}\].*{LIMIT}")
    rows = torch.zeros(2 ** (log2 // 2), 1, dtype=torch.long)
    positions = torch.zeros(1, 2 ** (log2 - log2 // 2), dtype=torch.long)
    refused_at_once(lambda: spot_kernels.noise_uniform(0, rows, positions, Z, Z),
                    rf"spot.noise_uniform: .*outputs \({re.escape(f'{4 * 2**log2 / 1e9:.3g}')} GB\).*{LIMIT}")


def test_the_other_ops_count_broadcast_inputs_too(monkeypatch):
    monkeypatch.delenv("SPOT_MEMORY_LIMIT_GB", raising=False)
    f, block, k = 2**20, 2**6, 2**10  # position logits of 2**26 and stale top-K of 2**36 elements, broadcast
    logits = torch.zeros(()).expand(f, block)
    masked = torch.ones((), dtype=torch.bool).expand(f, block)
    probs, ids = torch.zeros(()).expand(f, block, k), Z.expand(f, block, k)
    rows = Z.expand(f)
    refused_at_once(lambda: spot_kernels.select_children(logits, masked, torch.zeros(()).expand(f), probs, ids, 0,
                                                         rows, rows, rows, 1.0, 4),
                    rf"spot.select_children: its inputs at their logical size \(stale_topk_ids.*{LIMIT}")
    q = torch.zeros(()).expand(2**10, 8, 2**6, 2**6, 2**6)  # 2**37 elements
    kp = torch.zeros(()).expand(2**10, 8, 4, 2**6)
    refused_at_once(lambda: spot_kernels.tree_attention(q, kp, kp, q, q, Z.expand(2**10)),
                    rf"spot.tree_attention: its inputs at their logical size \(q: .*{LIMIT}")


def test_a_lower_limit_applies_and_real_calls_pass(monkeypatch):
    """The limit is SPOT_MEMORY_LIMIT_GB's, and a call within it runs (the same inputs, materialized, agree)."""
    logits, masked = torch.randn(4, 8, 50), torch.ones(4, 8, dtype=torch.bool)
    rows = torch.arange(4)
    out = spot_kernels.score(logits, masked, 0, rows, Z.expand(4), Z.expand(4), 1.0)
    again = spot_kernels.score(logits.clone(), masked.clone(), 0, rows, torch.zeros(4, dtype=torch.long),
                               torch.zeros(4, dtype=torch.long), 1.0)
    assert torch.equal(out.tokens, again.tokens) and torch.equal(out.topk_ids, again.topk_ids)
    monkeypatch.setenv("SPOT_MEMORY_LIMIT_GB", "0.00001")  # 10 kB: the 4 x 8 x 50 float32 logits alone are 6.4 kB
    with pytest.raises(ValueError, match="spot.score: .*above the limit of 1e-05 GB"):
        spot_kernels.score(logits, masked, 0, rows, Z.expand(4), Z.expand(4), 1.0)
