"""The round (spot.round): static trees equal the host-trimmed ones, the static round is exact and never syncs
with the host inside, and torch.compile(fullgraph=True) traces it whole with the same tokens (docs/round.md)."""

from dataclasses import replace

import pytest
import torch

import spot
from spot.lab.dispatch_count import DispatchCounter
from spot.order_model import LearnedDrafter
from spot.round import RoundConfig
from spot.tree import grow_tree

from test_tree import MASK, NodeHashDrafter, stale_features
from tiny import PROMPTS, recording_capturable_target, sharp_target, small_model


@pytest.fixture(scope="module")
def target():
    return sharp_target()


@pytest.mark.parametrize("budget", [2, 5, 16])
@pytest.mark.parametrize("width,branch", [(1, 1), (2, 3), (4, 8)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_static_tree_is_the_host_tree_with_padding_slots(budget, width, branch, temperature):
    """Fixed depths and budget slots keep the nodes the host-stopped growth keeps, in the same order; the slots
    after them are padding (parent, position, token -1)."""
    b, B, K = 3, 12, 4
    root = torch.full((b, B), MASK)
    root[0, :5] = 9
    root[2, 1::2] = 11
    step = (root != MASK).sum(1)
    stale = stale_features(b, B, K, seed=budget + width)
    kw = dict(rows=torch.arange(b), draft_rows=torch.tensor([True, True, False]))
    cfg = RoundConfig(MASK, 5, temperature, budget=budget, width=width, branch=branch, static=False)
    host = grow_tree(root, step, stale, NodeHashDrafter(B, seed=branch), cfg, **kw)
    static = grow_tree(root, step, stale, NodeHashDrafter(B, seed=branch), replace(cfg, static=True), **kw)
    n = host.parents.shape[1]
    assert n <= static.parents.shape[1] == min(budget, 1 + min(budget - 1, B) * width * branch)
    for name in ("states", "parents", "positions", "tokens", "depth"):
        assert torch.equal(getattr(static, name)[:, :n], getattr(host, name)), name
    assert bool((static.parents[:, n:] == -1).all()) and bool((static.tokens[:, n:] == -1).all())
    assert bool((static.states[:, n:] == root[:, None]).all())  # padding slots hold the root's state
    assert bool((static.parents[2, 1:] == -1).all())  # a row without stale features keeps its root alone


@pytest.mark.parametrize("method", ["spot", "confidence"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("batch", [1, 4])
def test_static_round_is_exact_in_the_same_passes(target, method, temperature, batch):
    kw = dict(max_new_tokens=12, block_size=8, temperature=temperature, seed=3, eos_id=None)
    extra = {"drafter": LearnedDrafter(small_model(1))} if method == "spot" else {}
    ref = spot.generate(target, PROMPTS[:batch], "standard", **kw)
    host = spot.generate(target, PROMPTS[:batch], method, tree=spot.TreeSettings(6, static=False), **extra, **kw)
    static = spot.generate(target, PROMPTS[:batch], method, tree=spot.TreeSettings(6, static=True), **extra, **kw)
    assert static.tokens == host.tokens == ref.tokens
    assert static.stats.target_passes == host.stats.target_passes < ref.stats.target_passes
    assert torch.equal(static.orders, ref.orders) and torch.equal(host.orders, ref.orders)


@pytest.mark.parametrize("method,rule", [("standard", "one"), ("spot", "one"), ("standard", "threshold:0.15,steps:4"),
                                         ("spot", "threshold:0.15,steps:4"), ("spot", "dream:8")])
def test_the_static_round_syncs_once_per_pass_outside_the_target(target, method, rule):
    """Outside the target's forward a pass makes one host sync (the loop's: which blocks are complete), none of
    them inside the round (draft, score, verify, stale features), with one commit per step or a commit rule."""
    kw = dict(max_new_tokens=16, block_size=8, temperature=1.0, tree=spot.TreeSettings(budget=6, static=True),
              batching=spot.Batching(max_batch=2), rule=rule)
    extra = {"drafter": LearnedDrafter(small_model(2))} if method == "spot" else {}
    spot.generate(target, PROMPTS, method, **extra, **kw)
    with DispatchCounter() as counter:
        out = spot.generate(target, PROMPTS, method, **extra, **kw)
    per_pass = counter.per_pass(out.stats.target_passes)
    for stage in ("draft", "score", "verify", "stale"):
        assert per_pass[stage]["syncs"] == 0, (stage, counter.by_op[stage])
    # one per pass, and one per generate for the output tokens
    assert sum(counter.syncs[s] for s in counter.syncs if s != "target") <= out.stats.target_passes + 1, \
        counter.by_op["bookkeeping"]
    if method == "spot":
        assert per_pass["draft"]["ops"] > 0


class _Graphs:
    """A torch.compile backend that counts the graphs it is handed and runs them eagerly."""

    def __init__(self):
        self.count = 0

    def __call__(self, gm, example_inputs):
        self.count += 1
        return gm.forward


# The grid traces with a counting eager backend: dynamo's tracing is what fullgraph=True checks (about 15 s a case
# on a shared 2-core machine, so block size, budget and batch come in two combinations covering each value, not
# their product); inductor compiles one case below (a minute or two).
@pytest.mark.parametrize("method", ["spot", "confidence"])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("block_size,budget,batch", [(16, 16, 4), (32, 4, 1)])
def test_the_compiled_round_has_no_graph_break_and_the_eager_tokens(target, method, temperature, block_size,
                                                                    budget, batch):
    _compiled_equals_eager(target, method, temperature, block_size, budget, batch, "one")


@pytest.mark.parametrize("rule,temperature,block_size,budget,batch", [
    ("threshold:0.15,steps:4", 0.7, 16, 16, 4), ("steps:8", 0.0, 32, 4, 1), ("dream:8,alg:entropy", 1.0, 16, 8, 2)])
def test_the_compiled_round_over_a_commit_rule(target, rule, temperature, block_size, budget, batch):
    """A commit rule's round (commit_rule, expand_steps, verify_steps) traces whole too, with eager's tokens."""
    _compiled_equals_eager(target, "spot", temperature, block_size, budget, batch, rule)


def _compiled_equals_eager(target, method, temperature, block_size, budget, batch, rule):
    torch._dynamo.reset()
    kw = dict(max_new_tokens=block_size, block_size=block_size, temperature=temperature, seed=1, eos_id=None,
              rule=rule)
    extra = {"drafter": LearnedDrafter(small_model(3))} if method == "spot" else {}
    eager = spot.generate(target, PROMPTS[:batch], method, tree=spot.TreeSettings(budget, static=True), **extra, **kw)
    graphs = _Graphs()
    compiled = spot.generate(target, PROMPTS[:batch], method, tree=spot.TreeSettings(budget, compile=graphs), **extra,
                             **kw)
    assert compiled.tokens == eager.tokens and torch.equal(compiled.orders, eager.orders)
    assert compiled.stats.target_passes == eager.stats.target_passes
    assert graphs.count >= 2  # both halves of the round were traced (fullgraph=True: a break would raise)


def test_the_round_compiles_with_inductor(target):
    """Inductor compiles the round's halves and, for a capturable pass (a GPU's shapes), the whole round with the
    embedded forward inside (what mode="reduce-overhead" captures on CUDA); the tokens and passes are eager's."""
    recorded, whole = recording_capturable_target()
    torch._dynamo.reset()
    kw = dict(max_new_tokens=16, block_size=8, temperature=1.0, seed=2, eos_id=None)
    drafter = LearnedDrafter(small_model(4))
    eager = spot.generate(target, PROMPTS[:2], "spot", drafter=drafter, tree=spot.TreeSettings(4, static=True), **kw)
    inductor = spot.TreeSettings(4, compile="inductor")
    compiled = spot.generate(recorded, PROMPTS[:2], "spot", drafter=drafter, tree=inductor, **kw)
    assert compiled.tokens == eager.tokens and compiled.stats.target_passes == eager.stats.target_passes
    assert any(whole) and not all(whole)  # whole rounds, and the halves for the passes that append


def test_the_gpu_round_check_runs_dry_on_cpu(tmp_path):
    """bench/round_gpu.py (bench/gpu_check.sh's capture check) runs its eager half on CPU, so it does not rot, and
    the whole pass (the round with the embedded target's forward inside, what the GPU captures) gives the round's
    outputs."""
    import importlib.util
    import json
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/runtime/ -> root
    path = os.path.join(root, "bench", "round_gpu.py")
    spec = importlib.util.spec_from_file_location("round_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "round.json"
    assert module.main(["--device", "cpu", "--rows", "2", "--budgets", "16", "--temperatures", "1", "--repeats", "1",
                        "--rules", "one;steps:16", "--json", str(out)]) == 0
    entries = json.loads(out.read_text())["buckets"]
    assert [e["rule"] for e in entries] == ["one", "steps:16"]
    for entry in entries:
        assert entry["rows"] == 2 and entry["budget"] == 16 and entry["eager_us"] > 0  # steps:16: two probes
        assert entry["whole_pass_equals_round"] is True and entry["whole_pass_eager_us"] > 0


def test_bench_reports_the_decoders_ops_and_syncs_per_pass(target):
    from spot.lab.bench import format_report, run_bench

    kw = dict(max_new_tokens=8, block_size=4, temperature=0.0, eos_id=None, budget=4,
              tree=spot.TreeSettings(static=True))
    report = run_bench(target, PROMPTS[:2], ["spot"], drafter=LearnedDrafter(small_model(5)), progress=False, **kw)
    spot_counts = report["methods"]["spot"]["dispatch_per_pass"]
    standard_counts = report["methods"]["standard"]["dispatch_per_pass"]
    assert spot_counts["draft"]["ops"] > standard_counts["draft"]["ops"] > 0
    assert spot_counts["draft"]["syncs"] == 0 and spot_counts["decoder"]["syncs"] <= 1.5
    assert spot_counts["target"]["ops"] > 0
    text = format_report(report)
    assert "decoder ops / host syncs" in text
    # beside them, drafting's share of the decode's stage seconds (the round's CPU measure, docs/round.md)
    stages = report["methods"]["spot"]["stage_seconds"]
    share = stages["draft"] / sum(stages.values())
    (spot_row,) = [line for line in text.splitlines()[-2:] if line.startswith("spot ")]
    assert 0 < share < 1 and f"{share:.1%}" in spot_row
