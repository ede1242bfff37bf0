"""The lab's commands refuse bad arguments before any work: `spot bench` (no prompts, bad counts, a --json it cannot
write, a --prompts-file that is not UTF-8 or is missing) decodes nothing, run_bench refuses a bad batch_size, and
`spot build collect` creates nothing (issue #18, items 5 and 8)."""

import json
import re

import pytest
from spot.lab.bench import run_bench
from spot.lab.pipeline.collect import collect
from spot.cli import main
from spot.loading import load_target

from tiny import COLLECT_CFG, COLLECT_PROMPTS, TINY, sharp_target


@pytest.fixture(scope="module")
def target():
    return sharp_target()


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---- 5. spot bench ---------------------------------------------------------------------------------------------------

BENCH = ["bench", "--target", "random", "--max-new-tokens", "4", "--block-size", "4", "--methods", "standard",
         "--quiet"]


@pytest.fixture
def no_decoding(monkeypatch):
    """Fail the test if anything is decoded."""
    def refuse(*a, **k):
        raise AssertionError("decoded before the arguments were checked")
    monkeypatch.setattr("spot.lab.bench.generate", refuse)
    monkeypatch.setattr("spot.cli.generate", refuse)


def test_item5_bench_refuses_empty_prompts(tmp_path, no_decoding):
    (tmp_path / "p.txt").write_text("\n  \n\n")
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit, match=r"--prompts-file .*p\.txt.*no prompts"):
        main([*BENCH, "--prompts-file", str(tmp_path / "p.txt"), "--json", str(out)])
    assert not out.exists()
    with pytest.raises(ValueError, match="prompts"):
        run_bench(load_target("random", config=TINY), [], ["standard"], max_new_tokens=4, block_size=4)


@pytest.mark.parametrize("flag, value", [("--num-prompts", "0"), ("--num-prompts", "-1"), ("--batch-size", "0"),
                                         ("--batch-size", "-1"), ("--max-new-tokens", "0")])
def test_item5_bench_refuses_invalid_counts(flag, value, no_decoding):
    with pytest.raises(SystemExit, match=f"{flag}: expected >= 1"):
        main([*BENCH, flag, value])


def test_item5_bench_checks_json_before_decoding(tmp_path, no_decoding):
    for bad in (tmp_path / "missing" / "r.json", tmp_path):
        with pytest.raises(SystemExit, match=f"--json {re.escape(str(bad))}"):
            main([*BENCH, "--num-prompts", "1", "--json", str(bad)])
    assert _leftovers(tmp_path) == []


def test_item5_run_bench_refuses_bad_batch_size(target):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            run_bench(target, [[5, 6]], ["standard"], batch_size=bad, max_new_tokens=4, block_size=4)


# ---- the prompts file and spot build collect ------------------------------------------------------------------------

def test_item8_prompts_file_not_utf8_names_the_file(tmp_path, no_decoding):
    (tmp_path / "p.txt").write_bytes(b"def f():\n\xff\xfe bad\n")
    with pytest.raises(SystemExit, match=r"p\.txt.*UTF-8"):
        main([*BENCH, "--prompts-file", str(tmp_path / "p.txt")])
    with pytest.raises(SystemExit, match=r"missing\.txt"):
        main([*BENCH, "--prompts-file", str(tmp_path / "missing.txt")])


def test_item8_collect_refuses_zero_prompts_before_creating_anything(tmp_path):
    docs = [{"id": i, "source": "math", "text": f"Problem {i}: add {i} and 1.\nSolution:\n{i + 1}\n"}
            for i in range(100)]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "traj"
    for flag, value in (("--num-prompts", "0"), ("--batch-size", "0"), ("--max-new-tokens", "-1")):
        with pytest.raises(SystemExit, match=flag):
            main(["build", "collect", "--target", "random", "--corpus", str(tmp_path / "corpus"), "--out", str(out),
                  flag, value, "--quiet"])
        assert not out.exists()
    target = load_target("random", config=COLLECT_CFG, dtype="float64", seed=1)
    with pytest.raises(ValueError, match="prompts"):
        collect(target, [], out, block_sizes=(4,), temperatures=(0.0,), max_new_tokens=4, progress=False)
    with pytest.raises(ValueError, match="block_size"):  # B = 8 > 4 new tokens: refused before any folder
        collect(target, COLLECT_PROMPTS, out, block_sizes=(4, 8), temperatures=(0.0,), max_new_tokens=4,
                progress=False)
    assert not out.exists()
