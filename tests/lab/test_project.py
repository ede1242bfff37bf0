"""The GPU roofline projection (`spot project`, docs/projection.md), the measured pass-time curve it is set beside,
and the terminal view of the commit order (`spot generate --show-order`)."""

import json
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from tiny import PROMPTS, sharp_target

from spot import generate
from spot.lab import project as pj
from spot.cli import main
from spot.lab.plots import PASS_DIGITS, format_commit_order, pass_of_positions

ROOT = Path(__file__).resolve().parents[2]
TOY = pj.Shape("toy", hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=10, source="test")
TOY_GPU = pj.GPU("toy", flops=1000.0, bandwidth=100.0, source="test")


def test_pass_cost_matches_a_hand_count():
    """3 nodes x B 2 at prefix 5. Per layer: q 8x8, k 8x4, v 8x4, o 8x8 = 192, MLP 3 x 8 x 16 = 384, norms 8+8+4+4
    = 24: 600 weights. FLOPs: 2 x 6 tokens x 2 layers x 600 = 14400; attention 4 x 6 x 2 layers x 2 heads x 4 x
    (5 + 2) keys = 2688; head 2 x 6 x 8 x 10 = 960. Bytes (bf16): weights (1200 + final norm 8 + head 80) x 2 =
    2576; KV 2 x 2 layers x 1 head x 4 x 5 x 2 = 160; logits written and read 2 x 6 x 10 x 2 = 240."""
    assert TOY.layer_params() == 600
    cost = pj.pass_cost(TOY, nodes=3, block=2, prefix=5)
    assert cost.flops == 14400 + 2688 + 960
    assert cost.bytes == 2576 + 160 + 240
    assert cost.seconds(TOY_GPU) == pytest.approx(2976 / 100) and cost.bound(TOY_GPU) == "memory"
    chain = pj.pass_cost(TOY, nodes=3, block=2, prefix=5, head_nodes=1)  # LM head over one node only
    assert chain.flops == 14400 + 2688 + 960 / 3 and chain.bytes == 2576 + 160 + 240 / 3
    assert pj.pass_cost(TOY, nodes=3, block=2, prefix=5, batch=2).flops == 2 * cost.flops


def test_published_parameter_counts():
    """The layers' weights against the non-embedding counts of Qwen3's model cards (1.4B, 3.6B, 6.95B), and the
    embedded model against its model card's 4.7M (tied embedding = LM head)."""
    for name, non_embedding in (("qwen3-1.7b", 1.4e9), ("qwen3-4b", 3.6e9), ("qwen3-8b", 6.95e9)):
        s = pj.SHAPES[name]
        assert abs(s.layers * s.layer_params() - non_embedding) / non_embedding < 0.02, name
    assert pj.SHAPES["embedded"].params() == pytest.approx(4.7e6, rel=0.02)


@pytest.mark.parametrize("gpu", list(pj.GPUS))
@pytest.mark.parametrize("shape", list(pj.SHAPES))
def test_pass_time_never_falls_as_nodes_grow(shape, gpu):
    times = [pj.pass_seconds(pj.SHAPES[shape], pj.GPUS[gpu], n, 32, 1024) for n in range(1, 129)]
    assert all(a <= b for a, b in zip(times, times[1:]))
    assert times[-1] > times[0]


def test_8b_on_h200_is_memory_bound_at_small_trees():
    """At batch 1 an 8B pass reads ~15 GB of weights; 4 nodes x 32 tokens are ~1 TFLOP, below the ridge."""
    shape, gpu = pj.SHAPES["qwen3-8b"], pj.GPUS["h200"]
    for n in (1, 2, 4):
        assert pj.pass_cost(shape, n, 32, 1024).bound(gpu) == "memory"
    assert pj.pass_seconds(shape, gpu, 4, 32, 1024) < 1.01 * pj.pass_seconds(shape, gpu, 1, 32, 1024)
    assert pj.pass_cost(shape, 64, 32, 1024).bound(gpu) == "compute"


def test_speedup_formula():
    """10 blocks, 40 passes of which 10 first passes (1 commit each), 100 commits: 30 tree passes at t(N) = 2,
    first passes at t(1) = 1: 100 commits in 70 time units against standard's 100."""
    acc = pj.Acceptance("spot", 8, commits=100, passes=40, first_passes=10, block_size=32, source="test")
    seen = []

    def t(n, chain):
        seen.append((n, chain))
        return 1.0 if n == 1 else 2.0

    assert pj.speedup(acc, t) == pytest.approx(100 / 70)
    assert (8, 3.0) in seen  # a tree pass's chain: (100 - 10) / 30 commits


def test_lm_head_over_the_chain_costs_less_only_where_it_is_shorter():
    acc = pj.Acceptance("spot", 32, commits=100, passes=40, first_passes=10, block_size=32, source="test")
    assert acc.chain == 3.0
    shape, gpu = pj.SHAPES["qwen3-8b"], pj.GPUS["h200"]
    (every,), (chain,) = (pj.project([acc], shape, gpu, lm_head=h) for h in ("all", "chain"))
    want = pj.pass_seconds(shape, gpu, 32, 32, 1024, head_nodes=3.0)
    assert chain["pass_ms"] == pytest.approx(1e3 * want) and chain["pass_ms"] < every["pass_ms"]
    assert chain["speedup"] > every["speedup"] and chain["pass_ms_standard"] == every["pass_ms_standard"]
    for r in (every, chain):  # absolute tokens/s per sequence: standard commits one per t(1)
        assert r["tokens_per_second_standard"] == pytest.approx(1e3 / r["pass_ms_standard"])
        assert r["tokens_per_second"] == pytest.approx(r["speedup"] * r["tokens_per_second_standard"])
    with pytest.raises(ValueError, match="lm_head"):
        pj.project([acc], shape, gpu, lm_head="some")


def _bench_json(path, budget, spot_hist, settings=None):
    s = {"num_prompts": 2, "max_new_tokens": 64, "block_size": 32, "budget": budget, **(settings or {})}
    path.write_text(json.dumps({"settings": s, "methods": {"standard": {"commits_per_pass": {"1": 128}},
                                                           "spot": {"commits_per_pass": spot_hist}}}))
    return path


def test_load_acceptance_reads_bench_and_budget_curve_json(tmp_path):
    a = _bench_json(tmp_path / "a.json", 4, {"1": 4, "2": 30, "3": 20})  # 124 commits in 54 passes
    curve = tmp_path / "c.json"
    curve.write_text(json.dumps({"settings": {"num_prompts": 2, "max_new_tokens": 64, "block_size": 32},
                                 "standard_passes": 128, "runs": [{"method": "confidence", "budget": 8,
                                                                   "target_passes": 64}]}))
    accs = pj.load_acceptance([a, curve])
    assert [(x.method, x.budget, x.commits, x.passes, x.first_passes) for x in accs] == [
        ("confidence", 8, 128, 64, 4), ("spot", 4, 124, 54, 4)]
    with pytest.raises(ValueError, match="block sizes"):
        pj.load_acceptance([a, _bench_json(tmp_path / "b.json", 8, {"2": 1}, {"block_size": 16})])
    shipped = pj.load_acceptance([ROOT / "bench/results/embedded-b32-t0-v8.json"])
    assert shipped[0].commits == 16384 and shipped[0].passes == 6090  # docs/benchmarks.md's spot row


def test_cli_project_prints_a_labelled_table_and_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a = _bench_json(tmp_path / "a.json", 4, {"1": 4, "2": 30, "3": 20})
    b = _bench_json(tmp_path / "b.json", 32, {"1": 4, "3": 20, "4": 16})
    png, out = tmp_path / "p.png", tmp_path / "p.json"
    assert main(["project", str(a), str(b), "--shapes", "qwen3-8b,embedded", "--plot", str(png),
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert pj.LABEL in text and "best budget (qwen3-8b, spot): 4" in text
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    rows = json.loads(out.read_text())["rows"]
    assert {(r["shape"], r["budget"]) for r in rows} == {(s, b) for s in ("qwen3-8b", "embedded") for b in (4, 32)}
    with pytest.raises(SystemExit, match="--gpu"):
        main(["project", str(a), "--gpu", "a100"])


def _fake_gpu_bench(path, shape="qwen3-8b", block=32):
    points = [{"nodes": n, "layer_ms": 0.1, "head_ms": 0.5, "pass_ms": 4.1 + 0.1 * n} for n in (1, 2, 4, 8, 16, 32)]
    path.write_text(json.dumps({"pass_curve": {"shape": shape, "layers_measured": 2, "block": block, "prefix": 1024,
                                               "batch": 1, "device": "fake", "points": points}}))
    return path


def test_cli_project_sets_a_measured_curve_beside_the_roofline(tmp_path, capsys):
    a = _bench_json(tmp_path / "a.json", 4, {"1": 4, "2": 30, "3": 20})
    measured = _fake_gpu_bench(tmp_path / "g.json")
    assert main(["project", str(a), "--shapes", "qwen3-8b", "--measured", str(measured)]) == 0
    text = capsys.readouterr().out
    assert "measured/roofline" in text and "meas. x" in text
    acc = pj.load_acceptance([a])[0]
    _, curve = pj.measured_curve(tmp_path / "g.json")
    want = pj.speedup(acc, lambda n, chain: curve[n])
    row = pj.project([acc], pj.SHAPES["qwen3-8b"], pj.GPUS["h200"], measured=curve)[0]
    assert row["measured_speedup"] == pytest.approx(want) and f"{want:.2f}x" in text
    with pytest.raises(SystemExit, match="B = 16"):
        main(["project", str(a), "--measured", str(_fake_gpu_bench(tmp_path / "h.json", block=16))])


def test_interpolate():
    curve = {1: 1.0, 4: 4.0, 8: 6.0}
    assert [pj.interpolate(curve, n) for n in (1, 2, 4, 6, 8, 16)] == [1.0, 2.0, 4.0, 5.0, 6.0, 10.0]


def test_measure_pass_curve_runs_a_tiny_stack_on_cpu():
    shape = pj.Shape("tiny", 32, 6, 4, 2, 8, 64, 97, "test")
    calls = []
    points = pj.measure_pass_curve(shape, (1, 2, 4), block=4, prefix=16, layers=2, dtype=torch.float32,
                                   timer=lambda fn: calls.append(fn()) or 3.0, on_point=lambda p: None)
    assert [p["nodes"] for p in points] == [1, 2, 4]
    assert all(p["layer_ms"] == 1.5 and p["head_ms"] == 3.0 and p["pass_ms"] == 6 * 1.5 + 3.0 for p in points)
    assert calls[0].shape == (1, 4, 32) and calls[1].shape == (1, 4, 97)  # the stack's output, then the logits
    assert calls[-1].shape == (1, 16, 97)
    assert pj.measure_pass_curve(shape, (1, 2), block=4, prefix=16, deadline=time.time() - 1) == []
    with pytest.raises(ValueError, match="head_dim"):
        pj.shape_config(pj.SHAPES["qwen3-4b"], 2)  # 2560 / 32 heads != 128


def test_gpu_bench_pass_curve_section_writes_what_project_reads(tmp_path, monkeypatch):
    """bench/gpu_bench.py's section, run on the CPU with a tiny stand-in for the 8B shape and a plain timer."""
    pytest.importorskip("triton")
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    sys.modules.pop("gpu_bench", None)
    import gpu_bench

    monkeypatch.setattr(gpu_bench, "ARGS", Namespace(json=str(tmp_path / "g.json"), budget=120.0, quick=True))
    monkeypatch.setattr(gpu_bench, "DEV", torch.device("cpu"))
    monkeypatch.setattr(gpu_bench, "bench", lambda fn, rep_ms=None: 1.0)
    monkeypatch.setattr(gpu_bench, "PASS_CURVE_NODES", (1, 2))
    monkeypatch.setattr(gpu_bench, "RESULTS", {"meta": {}, "results": [], "goals": {}, "errors": []})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "cpu stand-in")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setitem(pj.SHAPES, "qwen3-8b", pj.Shape("qwen3-8b", 32, 36, 4, 2, 8, 64, 97, "test"))
    gpu_bench.pass_curve()
    assert gpu_bench.RESULTS["errors"] == []
    curve, seconds = pj.measured_curve(tmp_path / "g.json", pj.SHAPES["qwen3-8b"], 32)
    assert curve["layers_measured"] == 2 and seconds == {1: (36 * 0.5 + 1.0) / 1e3, 2: (36 * 0.5 + 1.0) / 1e3}


# ------------------------------------------------------------------------------------ --show-order

def _decode_with_pass_starts(method, block_size=8):
    target = sharp_target()
    starts = {}
    out = generate(target, [PROMPTS[0]], method, max_new_tokens=16, block_size=block_size, eos_id=None, budget=8,
                   on_pass=lambda blk, step, stale: starts.setdefault(int(blk[0]), []).append(int(step[0])))
    return out, starts


def test_show_order_of_standard_is_one_position_per_pass():
    out, starts = _decode_with_pass_starts("standard")
    for blk, order in enumerate(out.orders[0].tolist()):
        assert pass_of_positions(order, starts[blk]) == {pos: k for k, pos in enumerate(order)}
        lines = format_commit_order(order, starts[blk]).splitlines()
        assert lines[-1].split()[-1] == "".join(PASS_DIGITS[order.index(j)] for j in range(len(order)))


def test_show_order_groups_each_pass_of_a_tree_decode():
    out, starts = _decode_with_pass_starts("confidence")
    assert out.stats.target_passes < 16  # trees were accepted, so some pass committed several positions
    for blk, order in enumerate(out.orders[0].tolist()):
        at = pass_of_positions(order, starts[blk])
        passes = [at[pos] for pos in order]
        assert passes == sorted(passes) and passes[0] == 0  # commit order runs through the passes in order
        assert len(set(passes)) == len(starts[blk])  # every pass committed at least one position
        sizes = [passes.count(p) for p in range(len(starts[blk]))]
        assert sizes == [b - a for a, b in zip(starts[blk], starts[blk][1:] + [len(order)])]
    assert sum(out.stats.commits_per_pass[k] * k for k in out.stats.commits_per_pass) == 16


def test_generate_show_order_cli(capsys):
    assert main(["generate", "--target", "random", "--max-new-tokens", "8", "--block-size", "4", "--budget", "4",
                 "--methods", "standard,confidence", "--show-order"]) == 0
    text = capsys.readouterr().out
    assert "standard block 0: 4 passes, 4 positions committed" in text and "standard block 1:" in text
    assert "confidence block 1:" in text and "  pass     " in text


def test_plot_without_matplotlib_is_refused_before_any_work(tmp_path, monkeypatch):
    a = _bench_json(tmp_path / "a.json", 4, {"1": 4, "2": 30, "3": 20})
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(SystemExit, match="matplotlib is not installed"):
        main(["project", str(a), "--plot", str(tmp_path / "p.png")])
    with pytest.raises(SystemExit, match="matplotlib is not installed"):
        main(["bench", "--target", "random", "--plot", str(tmp_path / "d")])
    assert not (tmp_path / "p.png").exists()


def test_decoding_and_the_cli_never_import_matplotlib():
    """matplotlib is for --plot only: `import spot`, the CLI module and the projection module leave it unloaded."""
    import subprocess

    code = ("import sys, spot, spot.cli, spot.lab.project, spot.lab.plots; "
            "print('matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
