"""The decoding benchmarks in bench/ run end to end on the embedded target (tiny settings: seconds, not figures), so a
change to the decoder cannot silently break a script whose figures the docs quote."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name,args", [
    ("pass_work", ["--num-prompts", "1", "--max-new-tokens", "8", "--block-size", "8", "--budgets", "2,4",
                   "--repeats", "1"]),
    ("budget_curve", ["--num-prompts", "1", "--max-new-tokens", "8", "--block-size", "8", "--budgets", "2,4",
                      "--methods", "spot,confidence,oracle", "--sharpness", "1,1.5"]),
    ("budget_curve", ["--num-prompts", "1", "--max-new-tokens", "8", "--block-size", "8", "--budgets", "4",
                      "--methods", "spot", "--target", "target2", "--drafter", "portable+online"]),
    ("batching", ["--prompts", "2", "--stream", "3", "--width", "2", "--max-new-tokens", "32"]),
    ("online_accuracy", ["--num-prompts", "2", "--max-new-tokens", "16", "--block-size", "8", "--budget", "4"]),
    ("tree_width", ["--num-prompts", "1", "--max-new-tokens", "16", "--block-size", "8", "--budget", "6",
                    "--widths", "2,1", "--temperatures", "0,1", "--repeats", "1"]),
])
def test_bench_script_runs(name, args, tmp_path):
    out = tmp_path / f"{name}.json"
    assert script(name).main(args + ["--json", str(out)]) == 0
    checks = list(exactness_checks(json.loads(out.read_text())))
    assert checks and all(value is True for _, value in checks), checks  # every script checks its tokens


def exactness_checks(node, path=""):
    """(path, value) of every "exact..." entry of a report, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key.startswith("exact"):
                yield f"{path}/{key}", value
            else:
                yield from exactness_checks(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from exactness_checks(value, f"{path}/{i}")


@pytest.mark.parametrize("name", ["pass_work", "budget_curve", "batching", "online_accuracy", "backend_decode",
                                  "round_count", "round_gpu", "tree_width", "peers_sdar", "commit_margins"])
def test_bench_script_refuses_a_json_path_before_running(name, tmp_path, monkeypatch):
    """--json is checked before the run (a bad path does not lose a whole benchmark's results) and goes through
    the write guard every write of the project passes: a path inside the installed package is refused."""
    from spot.files import PACKAGE_DIR

    import spot

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded before --json was checked")

    monkeypatch.setattr(spot, "generate", no_decoding)
    monkeypatch.setattr(spot, "load_target", no_decoding)
    for path, message in ((PACKAGE_DIR / f"{name}.json", "inside the installed spot package"),
                          (tmp_path / "missing" / "x.json", "does not exist")):
        with pytest.raises(ValueError, match=message):
            script(name).main(["--json", str(path)])
        assert not path.exists()


def test_peers_sdar_runs_spot_and_names_the_peers_it_cannot_run(tmp_path, monkeypatch):
    """bench/peers_sdar.py without the peers' code (no FREEDAVE_ROOT, no SPOT_FAMILY_ROOT): spot's rows run, each
    one prompt per call and token-identical to `standard`, and the report says why SDAR and FreeDave did not run."""
    import spot

    monkeypatch.delenv("FREEDAVE_ROOT", raising=False)
    monkeypatch.delenv("SPOT_FAMILY_ROOT", raising=False)
    target = tmp_path / "target"
    spot.save_model(spot.load_target("random", config=spot.ModelConfig(prefix_attention="block")).model, target)
    out = tmp_path / "peers.json"
    assert script("peers_sdar").main(["--target", str(target), "--num-prompts", "2", "--max-new-tokens", "8",
                                      "--block-size", "4", "--thresholds", "0.9", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["unavailable"]) == {"sdar", "freedave"}
    assert "SPOT_FAMILY_ROOT" in report["unavailable"]["sdar"]
    for rule in ("one", "threshold:0.9"):
        rows = {r["method"]: r for r in report["rules"][rule]["rows"]}
        assert set(rows) == {"spot standard", "spot spot", "spot oracle"}
        for r in rows.values():
            assert r["exact_vs_standard"] == 2 and len(r["forwards_per_prompt"]) == 2
            assert r["forwards"] == r["decode"] == sum(r["forwards_per_prompt"]) > 0  # prefill fused into passes
            assert r["fed_per_forward"] >= 4  # every pass feeds at least one block
        assert rows["spot oracle"]["forwards"] <= rows["spot standard"]["forwards"]


@pytest.mark.parametrize("temperature", ["0", "1"])
def test_rule_step_coverage_runs(temperature):
    """bench/rule_step_coverage.py (docs/rules.md, "Where T 1 loses"): its fractions nest as they must: a set right
    with its tokens right never outnumbers the steps whose tokens are right, nor a first pair the eight candidates
    (which include it)."""
    report = script("rule_step_coverage").main(["--rule", "steps:4", "--temperature", temperature, "--num-prompts", "1",
                                                "--max-new-tokens", "16", "--block-size", "8"])
    assert report["steps"] > 0
    for name in ("resampled", "learned"):
        assert 0 <= report[name + "1"] <= report[name + "8"] <= report["tokens"] <= 1
    assert 0 <= report["probe1"] <= report["probe8"] <= report["probe_tokens"] <= 1
    assert report["top_k"] == (512 if float(temperature) > 0 else 32)  # generate's stale top-K (default_top_k)


def test_commit_margins_runs(tmp_path):
    """bench/commit_margins.py on a shard collected here (the default target, one prompt, B 8): the margin buckets
    partition the held-out examples and the misses, and float64 scoring the float32 decode's states agrees with it
    at most commits (a misaligned replay or a wrong node would not)."""
    import spot
    from spot.lab.pipeline.collect import collect

    target = spot.load_target()
    prompt = target.tokenizer.encode("Q: Tom has 3 apples and buys 4 more. How many apples does he have?\nA:")
    collect(target, [prompt], tmp_path / "traj", block_sizes=(8,), temperatures=(0.0,), max_new_tokens=16,
            progress=False)
    out = tmp_path / "margins.json"
    assert script("commit_margins").main(["--data", str(tmp_path / "traj"), "--block-size", "8", "--max-new-tokens",
                                          "16", "--float64-prompts", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for depth in report["depths"].values():
        buckets = depth["buckets"]
        assert depth["examples"] > 0 and sum(b["examples"] for b in buckets) == depth["examples"]
        assert abs(sum(b["share"] for b in buckets) - 1) < 1e-9
        if depth["top1"] < 1:
            assert abs(sum(b["share_of_misses"] for b in buckets) - 1) < 1e-9
        assert 0 <= depth["top1"] <= depth["top4"] <= 1 and 0 <= depth["eos_share"] <= 1
    f64 = report["float64"]
    assert f64["blocks"] >= 2 and f64["blocks"] <= f64["commits"] <= 8 * f64["blocks"]
    assert f64["float64_commits_another_position"] <= f64["commits"] // 4
    assert f64["blocks_whose_replay_order_differs_from_generate"] <= f64["blocks"] // 2
