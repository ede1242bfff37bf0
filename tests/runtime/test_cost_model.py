"""The tree-budget cost model: the choice follows commits per second, and the stored table is read back."""

import json

import pytest

import spot
from spot.budgets import BUDGETS_FILE, FALLBACK_BUDGET, choose_budget, default_budget, device_key, predicted_rate
from spot.lab.pipeline.tune import choose_measured, save_tuning, time_target_pass, tune
from tiny import PROMPTS, sharp_target


def test_choice_maximises_commits_per_second():
    commits = {1: 1.0, 4: 2.0, 16: 3.0}
    # A GPU-like device: passes cost the same whatever the tree -> the biggest tree wins.
    assert choose_budget(commits, {1: 1.0, 4: 1.0, 16: 1.0}) == 16
    # A CPU-like device: cost grows with the nodes -> a small tree wins.
    assert choose_budget(commits, {1: 1.0, 4: 1.5, 16: 6.0}) == 4
    # Overheads count too.
    assert choose_budget(commits, {1: 1.0, 4: 1.0, 16: 1.0}, {16: 10.0}) == 4
    assert predicted_rate(commits, {1: 2.0, 4: 2.0}) == {1: 0.5, 4: 1.0}
    assert choose_budget({2: 1.0, 4: 2.0}, {2: 1.0, 4: 2.0}) == 2  # ties: the smaller tree
    with pytest.raises(ValueError):
        choose_budget({2: 1.0}, {4: 1.0})


def test_table_round_trip(tmp_path):
    path = tmp_path / "budgets.json"
    assert default_budget("cpu", 32, path=path) == FALLBACK_BUDGET
    save_tuning({"budget": 4}, "cpu", 32, path)
    save_tuning({"budget": 2}, "cpu", 16, path)
    assert default_budget("cpu", 32, path=path) == 4 and default_budget("cpu", 16, path=path) == 2
    assert default_budget("cpu", 8, path=path) == FALLBACK_BUDGET
    assert device_key("cpu") == "cpu"


def test_table_is_per_temperature_class(tmp_path):
    """T = 0 reads the entry measured at 0; T > 0 the nearest positive temperature's; an unmeasured class falls
    back; a new measurement keeps the other temperatures of its block size."""
    path = tmp_path / "budgets.json"
    save_tuning({"budget": 1}, "cpu", 32, path, temperature=0.0)
    assert default_budget("cpu", 32, 0.0, path) == 1
    assert default_budget("cpu", 32, 1.0, path) == FALLBACK_BUDGET  # T > 0 never measured
    save_tuning({"budget": 4}, "cpu", 32, path, temperature=1.0)
    save_tuning({"budget": 8}, "cpu", 32, path, temperature=0.5)
    assert default_budget("cpu", 32, 0.0, path) == 1
    assert default_budget("cpu", 32, 1.0, path) == 4 and default_budget("cpu", 32, 2.0, path) == 4
    assert default_budget("cpu", 32, 0.6, path) == 8 and default_budget("cpu", 32, 1e-3, path) == 8
    table = json.loads(path.read_text())
    assert set(table["cpu"]["32"]["temperature"]) == {"0", "1", "0.5"}
    save_tuning({"budget": 2}, "cpu", 32, path, temperature=1.0)  # re-measured: replaced, the others kept
    assert default_budget("cpu", 32, 1.0, path) == 2 and default_budget("cpu", 32, 0.0, path) == 1


def test_older_table_format_is_read_for_every_temperature(tmp_path):
    """budgets.json written before the temperature key ({device: {B: {"budget": ...}}}) still reads, for T = 0 and
    T > 0 alike; tuning a block size again replaces its old entry with the per-temperature one."""
    path = tmp_path / "budgets.json"
    path.write_text(json.dumps({"cpu": {"16": {"budget": 1, "commits_per_pass": {"1": 1.0}},
                                        "32": {"budget": 2}}}))
    for T in (0.0, 0.7, 1.0):
        assert default_budget("cpu", 16, T, path) == 1 and default_budget("cpu", 32, T, path) == 2
    save_tuning({"budget": 4}, "cpu", 32, path, temperature=1.0)
    assert default_budget("cpu", 32, 1.0, path) == 4
    assert default_budget("cpu", 32, 0.0, path) == FALLBACK_BUDGET  # the old entry is gone, T = 0 not re-measured
    assert default_budget("cpu", 16, 0.0, path) == 1  # other block sizes keep their old entries


def test_shipped_table_covers_the_cpu_grid():
    """The shipped budgets.json has a CPU budget for B in {16, 32} at T = 0 and at T > 0, each measured with
    every candidate from the root alone (budget 1) up, on both clocks, and chosen by `choose_measured`."""
    table = json.loads(BUDGETS_FILE.read_text())
    for B in ("16", "32"):
        entry = table["cpu"][B]["temperature"]
        assert set(entry) >= {"0", "1"}
        for result in entry.values():
            rate = {int(n): r for n, r in result["tokens_per_second"].items()}
            cpu_rate = {int(n): r for n, r in result["cpu_tokens_per_second"].items()}
            assert 1 in rate and len(rate) > 1
            assert result["budget"] == choose_measured(rate, cpu_rate, result["min_gain"])


def test_pass_timing_runs_on_a_tiny_target():
    import spot
    from spot.model import ModelConfig

    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=48, pad_id=0, eos_id=1,
                      mask_id=2)
    target = spot.load_target("random", config=cfg)
    scored = []  # the node count of every pass, read at the session the timer drives
    start = target.start

    def spying_start(*args, **kwargs):
        session = start(*args, **kwargs)
        score = session.score
        session.score = lambda states: scored.append(states.shape[1]) or score(states)
        return session

    target.start = spying_start
    t = time_target_pass(target, block_size=4, nodes=3, prompt_len=8, repeats=1)
    assert 0 < t < 10
    assert scored == [1, 3, 1, 3]  # per repeat (+1 untimed): the prompt's first pass, then the timed 3-node pass


def test_tune_measures_every_budget_and_picks_the_fastest():
    """tune decodes each prompt alone at every budget: the root alone commits once per pass, a tree at least once;
    the choice is the highest measured tokens/s."""
    result = tune(sharp_target(), spot.ConfidenceDrafter(), PROMPTS[:2], block_size=4, budgets=(1, 4),
                  max_new_tokens=8, log=lambda *a: None)
    assert result["commits_per_pass"][1] == 1.0
    assert result["commits_per_pass"][4] > 1.0  # the sharp target accepts drafted commits
    assert set(result["pass_seconds"]) == set(result["overhead_seconds"]) == set(result["tokens_per_second"]) == {1, 4}
    assert all(v > 0 for v in result["pass_seconds"].values())
    assert set(result["cpu_tokens_per_second"]) == {1, 4}
    assert result["budget"] == choose_measured(result["tokens_per_second"], result["cpu_tokens_per_second"],
                                               result["min_gain"])


def test_a_tree_is_chosen_only_where_it_beats_the_root_alone_on_both_clocks():
    assert choose_measured({1: 10.0, 2: 12.0, 4: 11.0}) == 2  # the fastest
    assert choose_measured({1: 10.0, 2: 10.2}) == 1  # within min_gain (3%): the root alone
    assert choose_measured({1: 10.0, 2: 10.2}, min_gain=0.01) == 2
    assert choose_measured({1: 10.0, 2: 12.0}, {1: 10.0, 2: 10.1}) == 1  # the CPU clock disagrees
    assert choose_measured({1: 10.0, 2: 12.0}, {1: 10.0, 2: 11.0}) == 2
    assert choose_measured({1: 12.0, 2: 10.0}) == 1
    assert choose_measured({2: 10.0, 4: 10.0}) == 2  # no root measured: the fastest, ties to the smaller tree


def test_budget_one_calls_no_drafter(monkeypatch):
    """Budget 1 is the root alone: spot, confidence and oracle cost what standard costs: the drafter is never
    called, no tree is grown and no stale features are built (nothing would read them); tune measures it as
    `spot`, with the tokens and passes of standard."""
    class Refuses:
        def position_logits(self, *args):
            raise AssertionError("the drafter was called at budget 1")

    def refuse(*args, **kwargs):
        raise AssertionError("per-pass drafting work at budget 1")

    target = sharp_target()
    kw = dict(max_new_tokens=8, block_size=4, temperature=1.0, seed=2, eos_id=None, budget=1)
    ref = spot.generate(target, PROMPTS, "standard", **kw)
    monkeypatch.setattr(spot.round, "stale_features", refuse)
    monkeypatch.setattr(spot.round, "grow_tree", refuse)
    for method in ("spot", "confidence", "oracle"):
        out = spot.generate(target, PROMPTS, method, drafter=Refuses() if method == "spot" else None, **kw)
        assert out.tokens == ref.tokens and out.stats.target_passes == ref.stats.target_passes, method
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="budget 1"):  # the same drafter at budget 2 is called
        spot.generate(target, PROMPTS, "spot", drafter=Refuses(), **{**kw, "budget": 2})
    result = tune(target, Refuses(), PROMPTS[:1], block_size=4, budgets=(1,), max_new_tokens=4, log=lambda *a: None)
    assert result["budget"] == 1 and result["commits_per_pass"][1] == 1.0
