"""Issue #31 ("Trust, round two"), items 3-8: every size the caller sets is estimated before anything is allocated
(one check, `spot_kernels.checks.size`, through `spot.limits`), and the limits, temperatures and rows in flight are
read as they should be.

3. Drafter configs are size-checked against SPOT_MEMORY_LIMIT_GB, the shipped drafter included; so are the ops'
   top_k, a tree's budget / width / branch and a random target's config (issue #18, item 3).
4. Continuous batching's estimate counts the rows in flight (max_batch), and 2,000 prompts through 8 rows keep the
   memory of a pass flat in the number of prompts.
5. generate's per-prompt outputs (commit orders) are bounded: a huge max_new_tokens is refused up front.
6. `--prompts-file` is read up to a size (a device never ends); the mask ops' outputs are size-checked too
   (tests/ops/test_tree_attention.py).
7. Temperatures above the largest float32 are refused (they would scale the logits to inf).
8. SPOT_*_GB set to nan / inf / a negative number is refused, naming the variable.
"""

import time
from dataclasses import asdict

import pytest
import spot
import spot_kernels
import torch
from spot.model import ModelConfig
from spot.order_model import OrderModel, OrderModelConfig, check_order_config

SMALL_TARGET = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=64)


@pytest.fixture(scope="module")
def target():
    return spot.load_target("random", config=SMALL_TARGET)


# ---- 3. drafters ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [("n_layers", 10**6), ("max_block", 10**9), ("token_buckets", 10**9),
                                         ("d_model", 2**20)])
def test_item3_drafter_configs_are_size_checked(field, value):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=f"x.json: .*'{field}' \\({value}\\).*SPOT_MEMORY_LIMIT_GB"):
        check_order_config(asdict(OrderModelConfig(**{field: value})), "x.json")
    assert time.perf_counter() - t0 < 1  # from the estimate: nothing was built


def test_item3_building_an_oversized_drafter_is_refused_before_allocating():
    with pytest.raises(ValueError, match="'max_block' \\(1000000000000\\).*SPOT_MEMORY_LIMIT_GB"):
        OrderModel(OrderModelConfig(max_block=10**12))


def test_item3_the_memory_limit_applies_to_drafters(monkeypatch):
    monkeypatch.setenv("SPOT_MEMORY_LIMIT_GB", "0.0001")
    with pytest.raises(ValueError, match="drafter.json: .*above the limit of 0.0001 GB.*SPOT_MEMORY_LIMIT_GB"):
        spot.load_drafter()
    monkeypatch.setenv("SPOT_MEMORY_LIMIT_GB", "0.01")  # 10 MB: the shipped drafter's 2.7 MB fit
    assert spot.load_drafter().model.cfg.n_layers == 3


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
        spot.generate(target, [[5, 6]], "confidence", max_new_tokens=8, block_size=4,
                      tree=spot.TreeSettings(width=10**6, branch=10**6))
    for field, value in (("n_layers", 10**6), ("d_model", 10**9)):
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match=f"'{field}' \\({value}\\).*SPOT_MEMORY_LIMIT_GB"):
            spot.load_target("random", config=ModelConfig(**{**small, field: value}))
        assert time.perf_counter() - t0 < 5, field  # refused from the estimate, not after building layers


# ---- 4. continuous batching ----------------------------------------------------------------------------------------

def _pass_bytes(target, monkeypatch):
    """Record, for every pass of the sessions `target` starts, the bytes of the KV cache and of the nodes scored,
    and the rows in the pass: the memory that scales with the batch."""
    record = {"peak": 0, "rows": 0}
    start = type(target).start

    def recording_start(self, prompts, max_new_tokens, block_size, **kw):
        session = start(self, prompts, max_new_tokens, block_size, **kw)
        score_lazily = session.score_lazily

        def score(nodes):
            cache = session.cache
            held = sum(t.numel() * t.element_size() for t in cache.k + cache.v)
            record["peak"] = max(record["peak"], held + nodes.numel() * nodes.element_size())
            record["rows"] = max(record["rows"], nodes.shape[0])
            return score_lazily(nodes)

        session.score_lazily = score
        return session

    monkeypatch.setattr(type(target), "start", recording_start)
    return record


def test_item4_continuous_batching_counts_the_rows_in_flight(target, monkeypatch):
    """The issue's call, on a small target under a 1 MB limit: 2000 rows' logits would need 16 MB, 8 rows' 0.13 MB.
    The memory of a pass is the same for 200 prompts and for 2000."""
    monkeypatch.setenv("SPOT_MEMORY_LIMIT_GB", "0.001")
    settings = dict(max_new_tokens=2, block_size=2, budget=16, eos_id=None)
    with pytest.raises(ValueError, match="batch 2000"):  # without max_batch every prompt is in flight
        spot.generate(target, [[5, 6, 7]] * 2000, "confidence", **settings)
    peaks = {}
    for n in (200, 2000):
        record = _pass_bytes(target, monkeypatch)
        out = spot.generate(target, [[5, 6, 7]] * n, "confidence", batching=spot.Batching(max_batch=8), **settings)
        monkeypatch.undo()
        monkeypatch.setenv("SPOT_MEMORY_LIMIT_GB", "0.001")
        assert len(out.tokens) == n and out.tokens[0] == out.tokens[-1]
        assert record["rows"] <= 8
        peaks[n] = record["peak"]
    assert peaks[2000] == peaks[200] > 0, peaks


# ---- 5. bounded outputs --------------------------------------------------------------------------------------------

def test_item5_a_huge_max_new_tokens_is_refused_before_decoding(target):
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="max_new_tokens: 10000000000 new tokens.*SPOT_MEMORY_LIMIT_GB"):
        spot.generate(target, [[5, 6]], "standard", max_new_tokens=10**10, block_size=4)
    assert time.perf_counter() - t0 < 1


# ---- 6. the prompts file (the mask ops' size checks: tests/ops/test_tree_attention.py) -----------------------------

def test_item6_a_prompts_file_over_the_cap_is_refused(monkeypatch, tmp_path):
    """Over the cap is refused from its size, before a byte is read (a device or FIFO, which could be endless, is
    no regular file: tests/runtime/test_bad_files.py)."""
    from spot import cli_args as cli
    monkeypatch.setattr(cli, "PROMPTS_FILE_LIMIT_MB", 1)
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(2 * 10**6)  # sparse: 2 MB that take no disk
    t0 = time.perf_counter()
    with pytest.raises(SystemExit, match="--prompts-file .*big.txt: 2 MB, larger than the 1 MB spot reads"):
        cli.read_prompts_file(big)
    assert time.perf_counter() - t0 < 5
    (tmp_path / "p.txt").write_text("a\\nb\n\nc\r\n")
    assert cli.read_prompts_file(tmp_path / "p.txt") == ["a\nb", "c"]


# ---- 7. temperatures -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [1e39, 3.5e38, float("inf")])
def test_item7_temperatures_beyond_float32_are_refused(target, temperature):
    with pytest.raises(ValueError, match="temperature"):
        spot.generate(target, [[5, 6]], "confidence", max_new_tokens=4, block_size=4, temperature=temperature)
    z = torch.zeros(1, dtype=torch.long)
    with pytest.raises(ValueError, match="spot.score: temperature"):
        spot_kernels.score(torch.randn(1, 4, 8), torch.ones(1, 4, dtype=torch.bool), 0, z, z, z, temperature)


def test_item7_the_largest_float32_temperature_decodes(target):
    out = spot.generate(target, [[5, 6]], "confidence", max_new_tokens=4, block_size=4, temperature=3.4e38)
    assert len(out.tokens[0]) == 4


# ---- 8. limits from the environment --------------------------------------------------------------------------------

@pytest.mark.parametrize("variable", ["SPOT_MEMORY_LIMIT_GB", "SPOT_KV_CACHE_LIMIT_GB"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "-inf", "lots"])
def test_item8_bad_limits_are_refused_naming_the_variable(target, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=f"^{variable}: expected a (finite )?number of GB"):
        spot.generate(target, [[5, 6]], "standard", max_new_tokens=4, block_size=4)


def test_item8_a_zero_limit_refuses_everything(target, monkeypatch):
    monkeypatch.setenv("SPOT_KV_CACHE_LIMIT_GB", "0")
    with pytest.raises(ValueError, match="SPOT_KV_CACHE_LIMIT_GB"):
        spot.generate(target, [[5, 6]], "standard", max_new_tokens=4, block_size=4)
