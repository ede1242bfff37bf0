"""The command line: `spot bench` writes the documented JSON, `spot generate` prints text and statistics."""

import json

from spot.cli import main

FIELDS = {"target_passes", "generated_tokens", "passes_per_token", "seconds", "tokens_per_second",
          "exact_match_vs_standard", "commits_per_pass", "cpu_seconds", "cpu_speedup_vs_standard"}


def test_bench_json_on_random_model(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(["bench", "--target", "random", "--num-prompts", "2", "--max-new-tokens", "8", "--block-size", "4",
               "--temperature", "1.0", "--methods", "standard,confidence,oracle", "--json", str(out), "--quiet"])
    assert rc == 0
    report = json.loads(out.read_text())
    assert set(report["methods"]) == {"standard", "confidence", "oracle"}
    for r in report["methods"].values():
        assert FIELDS <= set(r)
        assert r["exact_match_vs_standard"] is True
        assert r["generated_tokens"] == 16
    assert report["methods"]["standard"]["target_passes"] == 2 * 8  # batch 1: 8 passes per prompt
    assert report["settings"]["block_size"] == 4 and report["settings"]["num_prompts"] == 2
    assert "standard" in capsys.readouterr().out


def test_bench_over_rules_runs_the_oracle_and_reports_each_rules_branch_and_probes(tmp_path):
    """`spot bench --rules` with oracle (a rule's steps ranked in standard's order): exact against standard with the
    rule; each rule records the branch each method's trees took (confidence: eight over a rule, BRANCH over one),
    their probes (one at budget 8 over a rule of two commits a step, none over one) and their stale top-K (at T 1
    a rule's default, within the vocabulary; one's 32; --top-k for every rule)."""
    import spot

    out = tmp_path / "rules.json"
    assert main(["bench", "--target", "random", "--num-prompts", "2", "--max-new-tokens", "8", "--block-size", "4",
                 "--temperature", "1.0", "--budget", "8", "--rules", "one,steps:2",
                 "--methods", "standard,confidence,oracle", "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    vocab = spot.load_target("random").vocab_size
    for rule, branch, probes, top_k in (("one", spot.tree.BRANCH, 0, 32), ("steps:2", 8, 1, min(512, vocab))):
        entry = report["by_rule"][rule]
        assert entry["branch"] == {"confidence": branch, "oracle": spot.tree.BRANCH} and entry["probes"] == probes
        assert entry["top_k"] == top_k
        assert all(entry["methods"][m]["exact_match_vs_standard"] is True for m in ("confidence", "oracle"))
    assert report["settings"]["branch"] == report["by_rule"]["one"]["branch"]
    assert main(["bench", "--target", "random", "--num-prompts", "1", "--max-new-tokens", "8", "--block-size", "4",
                 "--temperature", "1.0", "--budget", "8", "--rules", "one,steps:2", "--top-k", "5",
                 "--methods", "standard,confidence", "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert report["by_rule"]["one"]["top_k"] == report["by_rule"]["steps:2"]["top_k"] == 5


def test_generate_prints_text_and_stats(capsys):
    rc = main(["generate", "--target", "random", "--max-new-tokens", "8", "--block-size", "4",
               "--prompt", "def add(a, b):", "--methods", "standard,confidence"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "def add(a, b):" in text and "standard" in text and "confidence" in text and "passes" in text



def test_bench_spot_with_a_drafter_directory(tmp_path, monkeypatch):
    """--drafter DIR runs method spot with the drafter in DIR, on --device, and stays exact; a directory without
    one is a clear error."""
    import pytest
    import torch

    import spot
    from spot.order_model import OrderModel, OrderModelConfig, save_order_model

    torch.manual_seed(0)
    save_order_model(OrderModel(OrderModelConfig(d_model=32, n_layers=1, n_heads=4, d_ff=64)), tmp_path / "d",
                     extra={"tree_branch": 6})
    loaded, real = [], spot.load_drafter
    monkeypatch.setattr(spot, "load_drafter", lambda name, device: loaded.append((name, device)) or real(name))
    args = ["bench", "--target", "random", "--num-prompts", "2", "--max-new-tokens", "8", "--block-size", "4",
            "--budget", "4", "--methods", "standard,spot,confidence", "--quiet"]
    assert main([*args, "--drafter", str(tmp_path / "d"), "--json", str(tmp_path / "r.json")]) == 0
    assert loaded == [(str(tmp_path / "d"), "cpu")]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["methods"]["spot"]["exact_match_vs_standard"] is True
    assert report["settings"]["drafter"] == str(tmp_path / "d")
    assert report["settings"]["branch"] == {"spot": 6, "confidence": spot.tree.BRANCH}  # each method's own
    monkeypatch.setattr(spot, "load_drafter", real)
    with pytest.raises(SystemExit, match="no order drafter"):  # one line, no traceback (spot.cli.main)
        main([*args, "--drafter", str(tmp_path / "missing")])


def test_bench_prompts_file_decodes_every_line_unless_num_prompts(tmp_path):
    """--prompts-file gives every line (\\n escapes as newlines) unless --num-prompts cuts it; without either,
    bench takes BENCH_PROMPTS held-out prompts."""
    from types import SimpleNamespace

    from spot.cli import BENCH_PROMPTS, _prompts, build_parser
    from spot.prompts import held_out_prompts

    tok = SimpleNamespace(encode=lambda text: [ord(c) for c in text])
    target = SimpleNamespace(tokenizer=tok, vocab_size=256)
    lines = [f"prompt {i}\\nline two" for i in range(BENCH_PROMPTS + 3)]
    (tmp_path / "p.txt").write_text("\n".join(lines) + "\n")
    bench = ["bench", "--prompts-file", str(tmp_path / "p.txt")]
    every = _prompts(build_parser().parse_args(bench), target)
    assert every == [tok.encode(line.replace("\\n", "\n")) for line in lines]
    assert _prompts(build_parser().parse_args([*bench, "--num-prompts", "2"]), target) == every[:2]
    default = _prompts(build_parser().parse_args(["bench"]), target)
    assert default == [tok.encode(t) for t in held_out_prompts(BENCH_PROMPTS)]


def test_bench_methods_take_turns_per_batch_with_the_noise_rows_of_whole_runs(monkeypatch):
    """run_bench runs every method on one batch before the next batch (so a machine's changing load falls on all
    methods alike; standard first while oracle needs its orders, else every other batch in reverse order), with
    each prompt's noise row its index in the whole list: the same tokens and passes as decoding every prompt with
    one method at a time, oracle included."""
    import spot.lab.bench
    from spot.lab.bench import decode_all, run_bench

    from tiny import PROMPTS, sharp_target

    target = sharp_target()
    calls = []
    real = spot.lab.bench.generate

    def spy(target, prompts, method, **kw):
        if kw.get("rows") is not None:
            calls.append((method, list(kw["rows"])))
        return real(target, prompts, method, **kw)

    settings = dict(max_new_tokens=8, block_size=4, temperature=1.0, eos_id=None, budget=4, seed=3)
    monkeypatch.setattr(spot.lab.bench, "generate", spy)
    report = run_bench(target, PROMPTS, ["confidence", "oracle"], batch_size=2, progress=False, count_ops=False,
                       **settings)
    assert calls == [(m, [0, 1]) for m in ("standard", "confidence", "oracle")] + \
        [(m, [2, 3]) for m in ("standard", "oracle", "confidence")]
    for method in ("standard", "confidence", "oracle"):
        whole = decode_all(target, PROMPTS, method, batch_size=2, **settings)
        r = report["methods"][method]
        assert r["target_passes"] == whole["target_passes"] and r["exact_match_vs_standard"], method
    assert report["methods"]["confidence"]["target_passes"] < report["methods"]["standard"]["target_passes"]
    calls.clear()
    report = run_bench(target, PROMPTS, ["confidence"], batch_size=1, progress=False, count_ops=False, **settings)
    assert [m for m, _ in calls] == ["standard", "confidence", "confidence", "standard"] * 2
    assert report["methods"]["confidence"]["exact_match_vs_standard"]


def test_bench_budgets_writes_by_budget_and_plots(tmp_path, capsys):
    """--budgets runs standard once and every other method at each budget (by_budget in the JSON); --plot DIR
    writes the pass-reduction and commits-per-pass PNGs."""
    import pytest

    pytest.importorskip("matplotlib")
    out, plots = tmp_path / "bench.json", tmp_path / "plots"
    rc = main(["bench", "--target", "random", "--num-prompts", "2", "--max-new-tokens", "8", "--block-size", "4",
               "--budgets", "1,4", "--methods", "standard,confidence,oracle", "--json", str(out), "--plot",
               str(plots), "--quiet"])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["settings"]["budgets"] == [1, 4] and report["settings"]["budget"] == 1
    assert set(report["by_budget"]) == {"1", "4"}
    for budget, table in report["by_budget"].items():
        assert set(table) == {"confidence", "oracle"}
        assert all(r["exact_match_vs_standard"] for r in table.values())
    one = report["by_budget"]["1"]["confidence"]
    assert one["target_passes"] == report["methods"]["standard"]["target_passes"]  # budget 1: the root alone
    assert report["methods"]["confidence"] == one
    for name in ("pass_reduction.png", "commits_per_pass.png"):
        png = plots / name
        assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "confidence       4" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--budgets"):
        main(["bench", "--target", "random", "--budgets", "4,x"])


def test_generate_names_its_settings_and_what_a_gpu_sized_tree_saves_where_auto_picks_the_root(capsys, monkeypatch):
    """The table's header names the target, the rule and the budget; where --budget auto picks 1 (a CPU: every
    method takes standard's passes) the output says what budget 16 takes on the prompt (issue 47)."""
    import re

    import spot.budgets
    from spot.cli import GPU_BUDGET

    args = ["generate", "--target", "random", "--max-new-tokens", "8", "--block-size", "4", "--prompt-len", "4",
            "--methods", "standard,confidence"]
    assert main([*args, "--rule", "steps:2", "--budget", "4"]) == 0
    out = capsys.readouterr().out
    assert "target random, rule steps:2, budget 4, block size 4, T 0\n" in out
    assert "--budget auto" not in out and f"at budget {GPU_BUDGET}" not in out
    monkeypatch.setattr(spot.budgets, "default_budget", lambda *a, **k: 1)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "target random, rule one (one commit per pass), budget 1 (--budget auto), block size 4, T 0\n" in out
    assert re.search(r"^confidence +passes +8 ", out, re.M)  # the root alone: standard's passes
    saved = re.search(rf"^at budget {GPU_BUDGET} \(.*\) this prompt takes confidence (\d+) passes; "
                      rf"--budget {GPU_BUDGET} runs it here$", out, re.M)
    assert saved and int(saved[1]) <= 8, out
    assert main([*args, "--budget", str(GPU_BUDGET)]) == 0
    assert re.search(rf"^confidence +passes +{saved[1]} ", capsys.readouterr().out, re.M)  # the same decode
