"""Batches whose rows do not wait (issue 19): per-row progress, rows leaving when done, more prompts than rows
(continuous batching). A row's tokens never depend on which rows share its passes (float64, CPU)."""

import pytest
import torch

import spot
from spot.decode import generate
from spot.settings import Batching
from spot.order_model import LearnedDrafter

from tiny import sharp_target, small_model

PROMPTS = [[5, 9, 14], [7] * 11, [3, 50, 60, 70, 80, 90, 11], [42], [8, 8, 2, 61], [17] * 6, [30, 31], [64] * 9]


@pytest.fixture(scope="module")
def target():
    return sharp_target()


def _alone(target, method, **kw):
    """Every prompt decoded by itself, its noise row its index: the tokens any batch must reproduce."""
    return [generate(target, [p], method, rows=[i], **kw).tokens[0] for i, p in enumerate(PROMPTS)]


def _eos_for(target, **kw):
    """An end-of-sequence id that some rows produce early and others late or never, from a standard run."""
    tokens = generate(target, PROMPTS, "standard", eos_id=None, **kw).tokens
    early = [row[len(row) // 3] for row in tokens]
    return max(set(early), key=early.count)


@pytest.mark.parametrize("block_size", [4, 16, 32])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_a_rows_tokens_do_not_depend_on_its_batch(target, block_size, temperature):
    kw = dict(max_new_tokens=block_size * 2 if block_size < 32 else 32, block_size=block_size,
              temperature=temperature, seed=3, budget=8)
    eos = _eos_for(target, **kw)
    kw["eos_id"] = eos
    want = _alone(target, "standard", **kw)
    assert any(len(t) < kw["max_new_tokens"] for t in want), "no row stopped early: the test would prove less"
    drafter = LearnedDrafter(small_model())
    accepted = 0
    for method in ("standard", "confidence", "spot"):
        extra = dict(drafter=drafter) if method == "spot" else {}
        runs = {"per-row": generate(target, PROMPTS, method, **extra, **kw),
                "lock-step": generate(target, PROMPTS, method, batching=Batching(lockstep=True), **extra, **kw),
                "3 rows": generate(target, PROMPTS, method, batching=Batching(max_batch=3), **extra, **kw)}
        for name, out in runs.items():
            assert out.tokens == want, (method, name)
        assert torch.equal(runs["per-row"].orders, runs["lock-step"].orders)
        assert torch.equal(runs["3 rows"].orders, runs["lock-step"].orders)
        assert runs["per-row"].stats.target_passes <= runs["lock-step"].stats.target_passes, method
        accepted += sum(n for c, n in runs["per-row"].stats.commits_per_pass.items() if c > 1)
    assert accepted > 0


def test_oracle_through_one_row(target):
    kw = dict(max_new_tokens=8, block_size=4, temperature=1.0, seed=3, budget=8, eos_id=None)
    out = generate(target, PROMPTS, "oracle", batching=Batching(max_batch=1), **kw)
    assert out.tokens == _alone(target, "standard", **kw)
    assert out.stats.target_passes < 8 * 8


def test_rows_advance_at_their_own_pace(target):
    """One pass count per row: with per-row progress the batch needs the passes of its slowest row (plus nothing),
    in lock-step the sum over blocks of each block's slowest row."""
    kw = dict(max_new_tokens=32, block_size=8, temperature=0.0, seed=0, budget=8, eos_id=None)
    alone = [generate(target, [p], "confidence", rows=[i], **kw).stats.target_passes for i, p in enumerate(PROMPTS)]
    per_row = generate(target, PROMPTS, "confidence", **kw).stats.target_passes
    lock = generate(target, PROMPTS, "confidence", batching=Batching(lockstep=True), **kw).stats.target_passes
    assert per_row == max(alone) <= lock
    assert per_row < lock, "the rows' block pass counts never differed: the test proves nothing"


def test_finished_rows_leave_and_waiting_prompts_take_their_place(target):
    """Through 2 rows, 8 prompts cost about their passes laid end to end two at a time, never all 8 at once."""
    kw = dict(max_new_tokens=8, block_size=4, temperature=0.0, seed=0, eos_id=None)
    out = generate(target, PROMPTS, "standard", batching=Batching(max_batch=2), **kw)
    assert out.tokens == _alone(target, "standard", **kw)
    assert out.stats.target_passes == 8 * 8 // 2  # standard: 8 passes a prompt, two prompts per pass


def test_the_cache_holds_the_longest_row_only(target):
    """Rows leaving free their slots, which the next appends reuse: the buffer grows only when the longest row
    needs it, and every row's keys end at its end."""
    session = target.start(PROMPTS, 8, 4)
    cache = session.cache
    nodes = torch.full((len(PROMPTS), 1, 4), target.mask_id, dtype=torch.long)
    session.score(nodes)
    capacity = cache.capacity
    assert cache.length == max(map(len, PROMPTS))
    assert cache.row_lengths.tolist() == [len(p) for p in PROMPTS]
    assert cache.key_start.tolist() == [capacity - len(p) for p in PROMPTS]
    keep = torch.tensor([0, 3, 6])  # the 3-, 1- and 2-token prompts
    session.release(keep)
    assert session.batch == 3 and cache.length == 3 and cache.row_lengths.tolist() == [3, 1, 2]
    assert session.block_start.tolist() == [3, 1, 2]
    session.append(torch.full((1, 4), 7, dtype=torch.long), rows=torch.tensor([1]))
    session.admit([[1, 2, 3, 4, 5]])
    assert session.block_start.tolist() == [3, 5, 2, 5]
    nodes = torch.full((4, 1, 4), target.mask_id, dtype=torch.long)
    session.score(nodes)  # the joining 5-token prompt is appended: into the slots the leaving rows freed
    assert cache.capacity == capacity and cache.length == 5 and cache.row_lengths.tolist() == [3, 5, 2, 5]
    assert cache.key_start.tolist() == [capacity - n for n in (3, 5, 2, 5)]
    session.score(nodes)  # nothing appended: nothing moves
    assert cache.capacity == capacity and cache.row_lengths.tolist() == [3, 5, 2, 5]
    assert session.block_start.tolist() == [3, 5, 2, 5]


def test_max_batch_is_checked_and_lock_step_targets_refuse_it(target):
    with pytest.raises(ValueError, match="Batching.max_batch: expected None or >= 1, got 0"):
        generate(target, PROMPTS, "standard", max_new_tokens=4, block_size=4, batching=Batching(max_batch=0))
    pytest.importorskip("transformers")
    import hf_tiny

    hf = spot.HFTarget(hf_tiny.model("qwen3"), mask_id=hf_tiny.MASK_ID)
    with pytest.raises(ValueError, match="lock-step"):
        generate(hf, hf_tiny.PROMPTS, "standard", max_new_tokens=4, block_size=4, batching=Batching(max_batch=2))


def test_a_rows_float32_logits_do_not_depend_on_its_left_padding():
    """Per-row progress moves a row's keys in the cache from pass to pass: its float32 logits must not change with
    where they sit (on a CPU each row reads its keys from its first real one)."""
    target = sharp_target(dtype=torch.float32)
    prompt = [5, 9, 14, 20, 33, 40, 41]
    node = torch.full((1, 1, 8), target.mask_id, dtype=torch.long)
    node[0, 0, :3] = torch.tensor([3, 4, 5])
    alone = target.start([prompt], 8, 8).score(node)[0]
    for extra in range(1, 40):
        session = target.start([prompt, [6] * (len(prompt) + extra)], 8, 8)
        assert torch.equal(session.score(node.expand(2, 1, 8).contiguous())[0], alone), extra
