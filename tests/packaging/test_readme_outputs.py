"""What README.md says a newcomer will see is what they see: every output it quotes is printed by the command it
quotes now, and every shell command in it runs as written from a fresh clone after `make demo`.

The convention, read from README.md itself (so that regenerating the README keeps this test right): a ```text block
is the output of the ```bash or ```python block just before it, a bash block of one command (`.venv/bin/spot ...` or
`.venv/bin/python -m spot ...`), a python block run as a script. The quoted lines must appear in that order among the
lines printed (others may lie between them); `...` in a quoted line stands for any text (timings). A new target or
drafter fails this test until the README is updated: `.venv/bin/python tests/packaging/test_readme_outputs.py` prints
each quoted command's output as it is today.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
SPOT = (".venv/bin/spot", ".venv/bin/python -m spot")  # how the README calls the CLI
# How a command in a bash block of the README starts: set-up, or the venv's own executables (row 3 of issue 47:
# `python -m spot` fails outside the venv), after any VAR=value assignments.
COMMAND_STARTS = ("make ", ".venv/bin/")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m[1], m[2]) for m in FENCE.finditer(text)]


def commands(body: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line.split(" #")[0].strip() for line in joined.splitlines() if line.strip() and
            not line.lstrip().startswith("#")]


def quoted_outputs(text: str) -> list[tuple[str, str, str]]:
    """(language, command, quoted output) for each ```text block, with the block just before it."""
    blocks = fenced_blocks(text)
    pairs = []
    for i, (lang, body) in enumerate(blocks):
        if lang != "text":
            continue
        assert i > 0 and blocks[i - 1][0] in ("bash", "python"), \
            f"README.md: the output block\n{body}\nfollows no bash or python block"
        pairs.append((blocks[i - 1][0], blocks[i - 1][1], body))
    return pairs


def run(lang: str, command: str) -> str:
    """What the README's command prints, run in this process (the CLI through spot.cli.main)."""
    out = io.StringIO()
    if lang == "python":
        with contextlib.redirect_stdout(out):
            exec(compile(command, "README.md", "exec"), {"__name__": "__readme__"})
        return out.getvalue()
    (line,) = commands(command)
    prefix = next((p for p in SPOT if line.startswith(p + " ")), None)
    assert prefix, f"README.md: the test runs `.venv/bin/spot ...` commands, not {line!r}"
    from spot.cli import main

    with contextlib.redirect_stdout(out):
        assert main(shlex.split(line[len(prefix):])) == 0
    return out.getvalue()


def first_missing(quoted: str, printed: str) -> str | None:
    """The first quoted line not found, in order, among the printed lines (`...` matches any text); None if all are."""
    lines = [line.rstrip() for line in printed.splitlines()]
    i = 0
    for q in quoted.rstrip("\n").splitlines():
        pattern = re.compile(".*".join(re.escape(part) for part in q.rstrip().split("...")))
        while i < len(lines) and not pattern.fullmatch(lines[i]):
            i += 1
        if i == len(lines):
            return q
        i += 1
    return None


README_TEXT = README.read_text(encoding="utf-8")
OUTPUTS = quoted_outputs(README_TEXT)


def test_the_readme_quotes_the_snippet_the_cli_table_and_a_commit_order():
    langs = [lang for lang, _, _ in OUTPUTS]
    assert "python" in langs and langs.count("bash") >= 2, OUTPUTS
    assert any("--show-order" in command for _, command, _ in OUTPUTS)


@pytest.mark.parametrize("lang, command, quoted", OUTPUTS, ids=[f"output{i}" for i in range(len(OUTPUTS))])
def test_each_quoted_output_is_what_its_command_prints_today(lang, command, quoted):
    printed = run(lang, command)
    missing = first_missing(quoted, printed)
    assert missing is None, (f"README.md quotes a line its command no longer prints:\n  {missing}\ncommand:\n"
                             f"{command}\nwhat it prints today (copy the quoted lines from here):\n{printed}")


def test_every_shell_command_runs_from_a_fresh_clone_after_make_demo():
    """Each command of a bash block is `make ...` or calls the venv's executables (nothing assumes an active venv)."""
    bad = []
    for lang, body in fenced_blocks(README_TEXT):
        if lang != "bash":
            continue
        for line in commands(body):
            bare = re.sub(r"^(\w+=\S*\s+)*", "", line)  # VAR=value assignments first
            if not bare.startswith(COMMAND_STARTS):
                bad.append(line)
    assert not bad, f"README.md commands that need an active venv (write .venv/bin/...): {bad}"


def test_first_missing_reads_the_convention():
    printed = "a\nspot  passes 10  tokens/s 12.3\nb\nc\n"
    assert first_missing("spot  passes 10  tokens/s ...\nc\n", printed) is None
    assert first_missing("c\nb\n", printed) == "b"  # in order
    assert first_missing("spot  passes 11  tokens/s ...\n", printed) == "spot  passes 11  tokens/s ..."


if __name__ == "__main__":  # each quoted command's output as it is today, to update the README from
    for lang, command, _ in OUTPUTS:
        print(f"=== {lang}:\n{command.rstrip()}\n--- prints:")
        sys.stdout.write(run(lang, command))
