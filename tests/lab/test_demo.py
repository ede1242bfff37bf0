"""`spot demo` (what `make demo` runs), small: its screen shows each method's passes, what --budget auto picks here
and why, a commit order, CPU time per token, and a GPU projection labelled as one."""

import re

import pytest

from spot.budgets import default_budget, tuned_entry
from spot.cli import main
from spot.lab.demo import demo_prompt
from spot.lab.plots import PASS_DIGITS
from spot.loading import load_target
from spot.lab.project import LABEL


def test_demo_shows_the_product(capsys):
    assert main(["demo", "--max-new-tokens", "16", "--block-size", "16", "--budgets", "2,4"]) == 0
    out = capsys.readouterr().out

    standard = re.search(r"^   standard +(\d+) passes \(one commit per pass\)$", out, re.M)
    head = len(demo_prompt(load_target())) % 16  # the prompt's last tokens open the first block (SDAR's attention)
    assert standard and int(standard[1]) == -(-(16 + head) // 16) * 16 - head  # one commit per generated position
    for method in ("confidence", "spot"):
        for budget in (2, 4):
            row = re.search(rf"^   {method} +(\d+) passes at budget {budget} +([\d.]+)x fewer than standard, "
                            r"same tokens as standard$", out, re.M)
            assert row, (method, budget, out)
            assert 1 <= int(row[1]) < int(standard[1])  # a tree of 2 or more nodes commits more than one per pass
            assert abs(float(row[2]) - int(standard[1]) / int(row[1])) < 0.01
    assert "OTHER TOKENS" not in out

    auto = default_budget("cpu", 16, 0.0)
    assert f"--budget auto picks {auto} for cpu, B = 16, T = 0 (python/spot/weights/budgets.json)" in out
    rates = re.search(r"^     tokens/s +(.*)$", out, re.M)  # the tuned table's measurements behind the pick
    entry = tuned_entry("cpu", 16, 0.0)
    assert rates and rates[1].split() == [x for n, v in sorted((int(n), v) for n, v in
                                                               entry["tokens_per_second"].items())
                                          for x in (f"{n}:", f"{v:.1f}")]
    assert "why: on a CPU a pass costs about nodes x block tokens" in out
    assert re.search(rf"^   spot +budget {auto} \(--budget auto\) +[\d.]+ ms/token", out, re.M)

    order = re.search(r"^spot block \d: (\d+) passes, 16 positions committed\n  position .*\n +0123456789012345\n"
                      r"  pass     (\S{16})$", out, re.M)
    assert order, out
    assert {PASS_DIGITS.index(c) for c in order[2]} == set(range(int(order[1])))  # every pass committed something

    for method in ("standard", "confidence", "spot"):
        assert re.search(rf"^   {method} +budget \d+ +[\d.]+ ms/token", out, re.M), method  # CPU time per token
    assert "time.process_time" in out

    assert f"   {LABEL} (`spot project`" in out
    assert "on an H200" in out and "qwen3-8b" in out
    projected = re.findall(r"^   (confidence|spot) +\d+ tokens/s projected, ([\d.]+)x standard at budget (\d+)", out,
                           re.M)
    assert sorted((m, int(b)) for m, _, b in projected) == [("confidence", 2), ("confidence", 4), ("spot", 2),
                                                             ("spot", 4)]
    assert re.search(r"^   standard +\d+ tokens/s projected$", out, re.M)


def test_demo_refuses_bad_flags_before_decoding():
    with pytest.raises(SystemExit, match="--budgets"):
        main(["demo", "--budgets", "0,4"])
    with pytest.raises(SystemExit, match="--block-size 32: .* --max-new-tokens \\(16\\)"):
        main(["demo", "--max-new-tokens", "16"])
    with pytest.raises(SystemExit, match="--max-new-tokens: expected >= 1"):
        main(["demo", "--max-new-tokens", "0"])
