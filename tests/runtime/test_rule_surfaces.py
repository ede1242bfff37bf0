"""Issue #46 ("Trust, round four"): the surfaces a commit rule enters by (rule strings, a CommitRule made directly,
the SGLang plug-in's config, `spot bench --rules/--budgets/--assert-exact/--plot`, `--show-order`, `spot project
--rule`) refuse what they cannot do, by name and before any work, and report what they did. One test per row of the
issue's table (row 8, `spot build collect`'s shard names, is tests/lab/test_collect_names.py)."""

from __future__ import annotations

import json

import pytest
import spot
import spot.lab.bench
from spot.cli import main
from spot.lab.bench import run_rules
from spot.rules import CommitRule, parse_rule
from spot.sglang.driver import SpotDriver
from spot.sglang.rounds import round_config
from spot.tree import default_probes

B = 8
BENCH = ["bench", "--target", "random", "--num-prompts", "1", "--max-new-tokens", "8", "--block-size", "4",
         "--methods", "standard,confidence", "--quiet"]


class Driver(SpotDriver):
    """The SGLang plug-in's construction (`Spot.__init__`: DllmAlgorithm sets the block size, then init_spot)
    without SGLang's base class."""

    def __init__(self, config, block_size: int = B):
        self.block_size, self.mask_id, self.fdfo = block_size, 0, True
        self.init_spot(config)


def _refused_by_spot(config, match: str, block_size: int = B) -> None:
    with pytest.raises(ValueError, match=match) as raised:
        Driver(config, block_size)
    message = str(raised.value)
    assert message.startswith("Spot: ") and "\n" not in message, message


# ---- row 1: a rule's confidence against the config's --------------------------------------------------------------

def test_row1_sglang_refuses_a_confidence_that_contradicts_the_rule():
    _refused_by_spot({"rule": "dream:4,alg:entropy", "confidence": "margin"},
                     r"Spot: confidence: rule dream:4,alg:entropy computes its confidence as 'neg_entropy'")
    # as generate: the default gives way to the rule's own, and naming the rule's own is no contradiction
    for config in ({"rule": "dream:4,alg:entropy"}, {"rule": "dream:4,alg:entropy", "confidence": "neg_entropy"}):
        assert round_config(Driver(config).options, None, 0.0, 0, B, "cpu").confidence == "neg_entropy"


# ---- row 2: --assert-exact covers every rule, budget and method ---------------------------------------------------

def _inexact_when(monkeypatch, **when):
    """spot.lab.bench's generate, with `confidence`'s tokens changed where its arguments match `when`."""
    real = spot.lab.bench.generate

    def generate(target, prompts, method, **kw):
        out = real(target, prompts, method, **kw)
        if method == "confidence" and kw.get("rows") is not None and all(kw.get(k) == v for k, v in when.items()):
            out.tokens[0].append(-1)
        return out

    monkeypatch.setattr(spot.lab.bench, "generate", generate)


def test_row2_assert_exact_checks_every_rule_and_every_budget(monkeypatch):
    _inexact_when(monkeypatch, rule="steps:2")  # the second rule
    with pytest.raises(SystemExit, match=r"--assert-exact: confidence at budget 4, rule steps:2 decoded other"):
        main([*BENCH, "--budget", "4", "--rules", "one;steps:2", "--assert-exact"])
    _inexact_when(monkeypatch, budget=8)  # the second budget
    with pytest.raises(SystemExit, match=r"--assert-exact: confidence at budget 8 decoded other"):
        main([*BENCH, "--budgets", "4,8", "--assert-exact"])


# ---- rows 3 and 4: empty values in a rule string ------------------------------------------------------------------

@pytest.mark.parametrize("text,term", [("steps:", "steps"), ("threshold:0.9,steps:", "steps"), ("dream:", "dream"),
                                       ("dream:8,alg:", "alg"), ("dream:8,eps:", "eps"), ("threshold:", "threshold"),
                                       ("factor:", "factor"), ("threshold:0.9,cmp:", "cmp")])
def test_rows3_and_4_an_empty_value_is_refused_by_name(text, term):
    with pytest.raises(ValueError, match=f"rule {text!r}: '{term}' needs a value"):
        parse_rule(text)
    with pytest.raises(SystemExit, match=f"'{term}' needs a value"):
        main(["generate", "--target", "random", "--max-new-tokens", "4", "--block-size", "4", "--methods",
              "standard", "--rule", text])
    _refused_by_spot({"rule": text}, f"Spot: rule {text!r}: '{term}' needs a value")


# ---- rows 5 and 6: the SGLang config refused at construction ----------------------------------------------------

@pytest.mark.parametrize("config,match", [
    ({"rule": "steps:16"}, "16 steps per block exceed the block size 8"),
    ({"rule": "dream:16"}, "16 steps per block exceed the block size 8"),
    ({"rule": "threshold:0.9,steps:9"}, "9 steps per block exceed the block size 8"),
    ({"top_k": 70000}, r"top_k must be an int in \[1, 65536\]"),
    ({"top_k": 2**40}, r"top_k must be an int in \[1, 65536\]"),
    ({"branch": 10**6}, r"branch must be an int in \[1, 65536\]"),
    ({"backend": "nope"}, "backend must be one of"),
    ({"drafter": "/nonexistent/drafter"}, "drafter '/nonexistent/drafter': no order drafter"),
])
def test_row5_sglang_refuses_at_construction_what_the_block_and_limits_decide(config, match):
    _refused_by_spot(config, match)


def test_row5_a_folder_without_a_drafter_is_refused_at_construction(tmp_path):
    _refused_by_spot({"drafter": str(tmp_path)}, "no order drafter in")


@pytest.mark.parametrize("config", ["abc", [1, 2], 5, ("rule", "one")])
def test_row6_sglang_refuses_a_config_that_is_not_a_mapping(config):
    _refused_by_spot(config, "Spot: the algorithm config .* must be a mapping")


# ---- row 7: a CommitRule made directly ---------------------------------------------------------------------------

@pytest.mark.parametrize("fields,match", [
    (dict(kind="steps", steps=0), "steps must be >= 1"), (dict(kind="steps", steps=-2), "steps must be >= 1"),
    (dict(kind="steps", steps=3.5), "steps expects an integer"), (dict(kind="sometimes"), "kind expects one of"),
    (dict(kind="dream"), "needs its number of steps"), (dict(kind="threshold", threshold=1.5), r"\(0, 1\)"),
    (dict(kind="factor", threshold=-1.0), "factor must be > 0"), (dict(kind="dream", steps=4, eps=0), "eps must lie"),
    (dict(kind="threshold"), "threshold expects a finite number"), (dict(kind="steps", steps=4, threshold=0.5),
                                                                    "has no threshold"),
    (dict(kind="steps", steps=4, inclusive=True), "'cmp' does not apply"),
    (dict(kind="one", confidence="margin"), "names no confidence"),
])
def test_row7_a_commit_rule_made_directly_is_checked_as_its_string_is(fields, match):
    with pytest.raises(ValueError, match=f"CommitRule: .*{match}"):
        CommitRule(**fields)


def test_row7_a_valid_commit_rule_equals_its_parsed_string():
    assert CommitRule("factor", threshold=2.0) == parse_rule("factor:2")
    assert CommitRule("dream", 4, confidence="neg_entropy") == parse_rule("dream:4,alg:entropy")
    assert CommitRule("threshold", 4, 0.9, inclusive=True) == parse_rule("threshold:0.9,steps:4,cmp:ge")


# ---- row 9: a rule is compared by its canonical form -------------------------------------------------------------

def test_row9_show_order_takes_any_spelling_of_one(capsys):
    assert main(["generate", "--target", "random", "--max-new-tokens", "4", "--block-size", "4", "--methods",
                 "standard", "--rule", " ONE ", "--show-order"]) == 0
    assert "standard block 0" in capsys.readouterr().out


def _report(tmp_path, by_rule=None, rule=None):
    methods = {"standard": {"commits_per_pass": {"2": 64}}, "spot": {"commits_per_pass": {"4": 32}}}
    data = {"settings": {"num_prompts": 2, "max_new_tokens": 64, "block_size": 32, "budget": 4,
                         **({"rule": rule} if rule else {})}, "methods": methods}
    if by_rule:
        data["by_rule"] = {r: {"methods": methods} for r in by_rule}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("held,asked", [("steps:8", "STEPS:8"), ("threshold:0.9", "threshold:0.90"),
                                        ("dream:8,alg:entropy", "dream:8, alg:entropy")])
def test_row9_project_finds_a_rule_by_its_canonical_form(tmp_path, held, asked):
    from spot.lab.project import load_acceptance

    for path in (_report(tmp_path, by_rule=["one", held]), _report(tmp_path, rule=held)):
        (acceptance,) = load_acceptance([path], asked)
        assert acceptance.method == "spot"
        assert main(["project", str(path), "--rule", asked]) == 0


def test_row9_bench_keys_rules_by_their_canonical_form(monkeypatch):
    def fake_run_bench(target, prompts, methods, rule, **kw):
        return {"settings": {"budget": 4, "rule": rule},
                "methods": {"standard": {"row_passes": 8, "generated_tokens": 8, "commits_per_pass": {"1": 8}}}}

    monkeypatch.setattr(spot.lab.bench, "run_bench", fake_run_bench)
    report = run_rules(None, [[1]], ["standard"], ["ONE", "Steps:2", "threshold:0.90"])
    assert list(report["by_rule"]) == report["settings"]["rules"] == ["one", "steps:2", "threshold:0.9"]
    with pytest.raises(ValueError, match="name a rule twice"):
        run_rules(None, [[1]], ["standard"], ["steps:2", "STEPS:2"])
    with pytest.raises(SystemExit, match="names a rule twice"):
        main([*BENCH, "--rules", "one;ONE"])


# ---- row 10: per-rule ratios per generated token -----------------------------------------------------------------

def test_row10_passes_against_one_commit_per_pass_are_per_generated_token(monkeypatch):
    """With an end-of-sequence token the rule's standard may decode fewer tokens than one's: 100 passes for 100
    tokens against 40 for 80 is 2x fewer passes per token, not 2.5x."""
    decoded = {"one": (100, 100), "steps:2": (40, 80)}  # row passes, generated tokens

    def fake_run_bench(target, prompts, methods, rule, **kw):
        passes, tokens = decoded[rule]
        return {"settings": {"budget": 4}, "methods": {"standard": {
            "row_passes": passes, "generated_tokens": tokens, "commits_per_pass": {"1": passes}}}}

    monkeypatch.setattr(spot.lab.bench, "run_bench", fake_run_bench)
    report = run_rules(None, [[1]], ["standard"], ["one", "steps:2"])
    assert report["by_rule"]["steps:2"]["standard_passes_vs_one"] == pytest.approx(2.0)
    assert report["by_rule"]["one"]["standard_passes_vs_one"] == pytest.approx(1.0)


# ---- row 11: --plot shows every rule, each named -----------------------------------------------------------------

def test_row11_plots_show_every_rule_named(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    titles = {}
    real_savefig = Figure.savefig

    def savefig(fig, path, *a, **k):
        titles[len(titles)] = [ax.get_title() for ax in fig.axes] + [t.get_text() for t in fig.texts]
        if fig._suptitle is not None:
            titles[len(titles) - 1].append(fig._suptitle.get_text())
        return real_savefig(fig, path, *a, **k)

    monkeypatch.setattr(Figure, "savefig", savefig)
    out = tmp_path / "plots"
    assert main([*BENCH, "--budget", "4", "--rules", "one;steps:2", "--plot", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(["pass_reduction-one.png", "commits_per_pass-one.png", "pass_reduction-steps_2.png",
                              "commits_per_pass-steps_2.png"])
    figures = list(titles.values())
    assert len(figures) == 4
    assert all(any("rule one" in t for t in f) for f in figures[:2])
    assert all(any("rule steps:2" in t for t in f) for f in figures[2:])


# ---- row 12: per-budget fields per budget ------------------------------------------------------------------------

def test_row12_probes_are_recorded_per_budget(tmp_path):
    out = tmp_path / "rules.json"
    assert main([*BENCH, "--temperature", "1.0", "--rules", "one;steps:2", "--budgets", "2,8", "--json",
                 str(out)]) == 0
    report = json.loads(out.read_text())
    tables = parse_rule("steps:2").tables(4, "cpu")
    expected = {str(b): default_probes(tables, b) for b in (2, 8)}
    assert len(set(expected.values())) == 2  # the two budgets hold different probes, so the test tells them apart
    assert report["by_rule"]["steps:2"]["probes_by_budget"] == expected
    assert report["by_rule"]["one"]["probes_by_budget"] == {"2": 0, "8": 0}
    assert report["by_rule"]["steps:2"]["probes"] == expected["2"]  # the first budget's, as "methods" is
