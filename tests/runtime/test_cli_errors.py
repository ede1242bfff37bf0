"""Issue #31 ("Trust, round two"), the command line's error path (item 11, and the flags of items 6-10):

Every bad argument of `spot` and `spot build` ends the command with a non-zero exit status and ONE line on stderr
that names the flag or the value given, `spot: error: ...`, and no traceback; `--debug` or SPOT_DEBUG=1 shows the
traceback instead. The sweep below holds well over 100 bad command lines; each is run in this process (the
errors are raised before any model is trained or any prompt decoded, so it stays fast).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import spot
import torch
from spot.cli import main

PACKAGE = Path(spot.__file__).resolve().parent
MISSING = "/nonexistent/spot-test"

# (argv, what the message must name: the flag or the value)
_DECODE_FLAGS = [
    ("--block-size", ["0", "-1", "abc", "1.5"]), ("--max-new-tokens", ["-1", "abc"]),
    ("--temperature", ["nan", "inf", "-1", "1e39", "abc", "1e-9"]), ("--budget", ["0", "-3", "abc"]),
    ("--width", ["0", "abc"]), ("--branch", ["0", "abc"]), ("--seed", ["-1", "abc", str(2**64)]),
    ("--confidence", ["bogus"]), ("--methods", ["bogus", ",", "standard,bogus"]), ("--dtype", ["float8"]),
    ("--device", ["bogus", "cuda:7", "meta"]), ("--target", [MISSING]), ("--mask-id", ["5", "abc"]),
    ("--layout", ["bidirectional", "sideways"]), ("--logits-shift", ["1", "2"]), ("--mask-token", ["<mask>"]),
]
CASES = []
for command in ("generate", "bench"):
    for flag, values in _DECODE_FLAGS:
        for value in values:
            CASES.append(([command, flag, value], flag))
    CASES.append(([command, "--trust-remote-code"], "--trust-remote-code"))
    CASES.append(([command, "--drafter", MISSING, "--methods", "spot"], MISSING))
    CASES.append(([command, "--prompt-len", "-1", "--target", "random"], "--prompt-len"))
    CASES.append(([command, "--bogus-flag"], "--bogus-flag"))
CASES += [
    (["generate", "--drafter", "default,portable", "--methods", "spot"], "--drafter"),
    (["bench", "--num-prompts", "0"], "--num-prompts"), (["bench", "--num-prompts", "-1"], "--num-prompts"),
    (["bench", "--batch-size", "0"], "--batch-size"), (["bench", "--budgets", "abc"], "--budgets"),
    (["bench", "--budgets", "0,4"], "--budgets"), (["bench", "--json", f"{MISSING}/r.json"], "--json"),
    (["bench", "--json", str(PACKAGE / "r.json")], "--json"), (["bench", "--prompts-file", MISSING], MISSING),
    (["bench", "--drafter", "default,default", "--methods", "spot"], "--drafter"),
    (["bench", "--drafter", "default+online-bogus", "--methods", "spot"], "bogus"),
    (["project", MISSING], MISSING), (["project", MISSING, "--gpu", "bogus"], "--gpu"),
    (["project", MISSING, "--shapes", "bogus"], "--shapes"), (["project", MISSING, "--prefix", "-1"], "--prefix"),
    (["project", MISSING, "--batch", "0"], "--batch"), (["project", MISSING, "--lm-head", "some"], "--lm-head"),
    (["bogus"], "bogus"), ([], "command"), (["build"], "step"), (["build", "bogus"], "bogus"),
    (["build", "corpus", "--total-mb", "-1"], "--total-mb"), (["build", "corpus", "--total-mb", "nan"], "--total-mb"),
    (["build", "corpus", "--heldout-fraction", "1.5"], "--heldout-fraction"),
    (["build", "corpus", "--mix", "abc"], "--mix"), (["build", "corpus", "--mix", "code=-1"], "--mix"),
    (["build", "corpus", "--max-chars", "0"], "--max-chars"), (["build", "corpus", "--max-files", "0"], "--max-files"),
    (["build", "corpus", "--out", str(PACKAGE / "corpus")], "--out"),
    (["build", "tokenizer", "--vocab-size", "0"], "--vocab-size"),
    (["build", "tokenizer", "--min-frequency", "0"], "--min-frequency"),
    (["build", "tokenizer", "--out", str(PACKAGE / "assets" / "tokenizer.json")], "--out"),
    (["build", "prompts", "--count", "0"], "--count"),
    (["build", "prompts", "--out", str(PACKAGE / "assets" / "p.json")], "--out"),
    (["build", "target", "--steps", "0"], "--steps"), (["build", "target", "--lr", "0"], "--lr"),
    (["build", "target", "--d-model", "0"], "--d-model"), (["build", "target", "--minutes", "-1"], "--minutes"),
    (["build", "target", "--out", str(PACKAGE / "weights")], "--out"),
    (["build", "target", "--export", str(PACKAGE / "weights")], "--export"),
    (["build", "collect", "--block-sizes", "abc"], "--block-sizes"),
    (["build", "collect", "--block-sizes", "0"], "--block-sizes"),
    (["build", "collect", "--temperatures", "-1"], "--temperatures"),
    (["build", "collect", "--temperatures", "x"], "--temperatures"),
    (["build", "collect", "--temperatures", "inf"], "--temperatures"),
    (["build", "collect", "--num-prompts", "0"], "--num-prompts"),
    (["build", "collect", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["build", "collect", "--batch-size", "0"], "--batch-size"),
    (["build", "collect", "--skip-prompts", "x"], "--skip-prompts"),
    (["build", "collect", "--device", "bogus"], "--device"),
    (["build", "collect", "--target", MISSING], MISSING),
    (["build", "collect", "--out", str(PACKAGE / "weights")], "--out"),
    (["build", "drafter", "--steps", "-5"], "--steps"), (["build", "drafter", "--batch-size", "0"], "--batch-size"),
    (["build", "drafter", "--max-depth", "0"], "--max-depth"), (["build", "drafter", "--lr", "nan"], "--lr"),
    (["build", "drafter", "--heldout-every", "0"], "--heldout-every"),
    (["build", "drafter", "--soft-temperature", "0"], "--soft-temperature"),
    (["build", "drafter", "--data", MISSING], "--data"),
    (["build", "drafter", "--out", str(PACKAGE / "weights")], "--out"),
    (["build", "evaluate", "--heldout-every", "0"], "--heldout-every"),
    (["build", "evaluate", "--drafter", MISSING], MISSING), (["build", "evaluate", "--split", "both"], "--split"),
    (["build", "tune", "--num-prompts", "0"], "--num-prompts"),
    (["build", "tune", "--block-sizes", "abc"], "--block-sizes"),
    (["build", "tune", "--budgets", "0"], "--budgets"), (["build", "tune", "--temperatures", "x"], "--temperatures"),
    (["build", "tune", "--width", "0"], "--width"), (["build", "tune", "--out", str(PACKAGE / "b.json")], "--out"),
    (["build", "tune", "--device", "bogus"], "--device"),
]


def test_the_sweep_holds_at_least_100_command_lines():
    assert len(CASES) >= 100, len(CASES)


def _error_of(argv, capsys):
    """(exit status, stderr) of `spot ARGV` run in this process, as the interpreter would report them."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    code = done.value.code
    if isinstance(code, str):  # Python prints the message, exit status 1
        return 1, code + "\n" + capsys.readouterr().err
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv,names", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_a_bad_command_line_is_one_line_naming_the_argument(argv, names, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # .cache/ defaults land here, not in the checkout
    monkeypatch.delenv("SPOT_DEBUG", raising=False)
    status, err = _error_of(argv, capsys)
    lines = err.strip().splitlines()
    assert status != 0
    assert len(lines) == 1 and lines[0].startswith("spot: error: "), err
    assert names in lines[0], err
    assert "Traceback" not in err


def test_debug_shows_the_traceback(capsys, monkeypatch):
    monkeypatch.delenv("SPOT_DEBUG", raising=False)
    argv = ["bench", "--drafter", MISSING, "--methods", "spot", "--num-prompts", "1"]
    with pytest.raises(FileNotFoundError, match="no order drafter"):
        main([*argv, "--debug"])
    monkeypatch.setenv("SPOT_DEBUG", "1")
    with pytest.raises(FileNotFoundError, match="no order drafter"):
        main(argv)
    monkeypatch.setenv("SPOT_DEBUG", "0")
    with pytest.raises(SystemExit, match="^spot: error: no order drafter"):
        main(argv)


def test_the_command_prints_no_traceback():
    """The installed entry point, as a user runs it: one line, exit status 1; with SPOT_DEBUG=1, the traceback."""
    argv = [sys.executable, "-m", "spot", "build", "corpus", "--total-mb", "-1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "spot: error: --total-mb: expected a finite number > 0, got -1.0"], done.stderr
    argv = [sys.executable, "-m", "spot", "generate", "--device", "bogus"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "--device" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_device_cuda_without_a_gpu_is_one_line(capsys):
    status, err = _error_of(["bench", "--device", "cuda", "--num-prompts", "1"], capsys)
    assert status == 1 and "--device cuda: no CUDA GPU" in err
