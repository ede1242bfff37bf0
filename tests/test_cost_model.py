"""The tree-budget cost model: the choice follows commits per second, and the stored table is read back."""

import pytest

import spot
from spot.budgets import FALLBACK_BUDGET, choose_budget, default_budget, device_key, predicted_rate
from spot.build.tune import save_tuning, time_target_pass, tune
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
    assert default_budget("cpu", 32, path) == FALLBACK_BUDGET
    save_tuning({"budget": 4}, "cpu", 32, path)
    save_tuning({"budget": 2}, "cpu", 16, path)
    assert default_budget("cpu", 32, path) == 4 and default_budget("cpu", 16, path) == 2
    assert default_budget("cpu", 8, path) == FALLBACK_BUDGET
    assert device_key("cpu") == "cpu"


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


def test_tune_measures_every_budget_and_picks_one():
    """tune decodes each prompt alone at every budget: the root alone commits once per pass, a tree at least once."""
    result = tune(sharp_target(), spot.ConfidenceDrafter(), PROMPTS[:2], block_size=4, budgets=(1, 4),
                  max_new_tokens=8, log=lambda *a: None)
    assert result["commits_per_pass"][1] == 1.0
    assert result["commits_per_pass"][4] > 1.0  # the sharp target accepts drafted commits
    assert set(result["pass_seconds"]) == set(result["overhead_seconds"]) == {1, 4}
    assert all(v > 0 for v in result["pass_seconds"].values())
    assert result["budget"] in (1, 4)
    assert result["budget"] == choose_budget(result["commits_per_pass"], result["pass_seconds"],
                                             result["overhead_seconds"])

