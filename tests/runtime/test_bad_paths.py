"""Issue #39 ("Trust, round three"): what a user's paths and files can still do to the command line and the API.

One test (or more) per row of the issue's table that concerns paths, files, the CLI's prompts and its error path
(the checkpoint rows: tests/integrations/test_bad_checkpoints.py; the ops' sizes: tests/ops/test_broadcast_sizes.py;
the sweep of bad inputs: tests/runtime/test_bad_input_sweep.py). No test touches a real device node: the device
nodes are made with mknod in a temporary folder (skipped where mknod is not permitted; a FIFO stands in for them in
every test, and runs everywhere).

- data loss: an output path that is a device node or a FIFO (a symlink resolved) is refused by name before any
  work, and left as it was (spot.files' output-path rule; atomic_write renamed over it).
- hang: an input that is a FIFO with no writer, a device node, or a file over the cap is refused at once (the
  input-file rule), and --prompt-len is sized against the target before a prompt is drawn.
- wrong: --target random honours --prompt-len; made-up prompts never hold a special id; `spot project` refuses a
  report whose numbers are negative, NaN, strings or of the wrong JSON type, naming the field.
- error path: `spot demo --device xpu:9` is one line; SIGINT ends the command with one line and exit status 130.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
import time

import pytest
import spot
from helpers import cli_error_line, within
from spot import files
from spot.cli import main

QUICK_BENCH = ["bench", "--target", "random", "--num-prompts", "1", "--max-new-tokens", "4", "--block-size", "4",
               "--methods", "standard", "--budget", "4", "--quiet"]
KINDS = ("fifo", "character device")


def special_file(tmp_path, kind: str, name: str = "node"):
    """A FIFO, or a character device node with /dev/null's numbers, made inside tmp_path (never a real /dev
    entry); the device test is skipped where mknod is not permitted (the FIFO one runs everywhere)."""
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
        return path
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError as e:
        pytest.skip(f"mknod is not permitted here ({e.strerror}); the FIFO case covers the rule")
    return path


def kind_of(path) -> str:
    mode = os.lstat(path).st_mode
    return {stat.S_IFIFO: "fifo", stat.S_IFCHR: "character device", stat.S_IFREG: "regular file",
            stat.S_IFLNK: "symlink"}.get(stat.S_IFMT(mode), "other")


@pytest.fixture
def no_bench(monkeypatch):
    """Running the benchmark fails the test: what is refused is refused before any work."""
    import spot.lab.bench

    def ran(*args, **kwargs):
        raise AssertionError("the benchmark ran before the bad path was refused")
    monkeypatch.setattr(spot.lab.bench, "run_bench", ran)


# ---- data loss: the output-path rule -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_bench_json_on_a_device_node_or_fifo_is_refused_before_any_work(tmp_path, kind, capsys, no_bench):
    node = special_file(tmp_path, kind)
    line = cli_error_line([*QUICK_BENCH, "--json", str(node)], capsys)
    assert f"--json {node}: is a {'FIFO' if kind == 'fifo' else kind}" in line
    assert kind_of(node) == kind  # still there, as it was


@pytest.mark.parametrize("kind", KINDS)
def test_a_symlink_to_a_device_node_or_fifo_is_refused_naming_its_target(tmp_path, kind, capsys, no_bench):
    node = special_file(tmp_path, kind)
    (tmp_path / "link.json").symlink_to(node)
    line = cli_error_line([*QUICK_BENCH, "--json", str(tmp_path / "link.json")], capsys)
    assert f"link.json: links to {node}, which is a" in line
    assert kind_of(node) == kind and kind_of(tmp_path / "link.json") == "symlink"


@pytest.mark.parametrize("kind", KINDS)
def test_atomic_writes_refuse_a_device_node_or_fifo(tmp_path, kind):
    """The API's writers too: atomic_write used to rename its temporary file over whatever was at the path."""
    node = special_file(tmp_path, kind)
    with pytest.raises(ValueError, match="not a regular file or a folder"):
        files.atomic_write_text(node, "{}")
    assert kind_of(node) == kind and not list(tmp_path.glob(".*.tmp"))


def test_a_symlink_to_a_regular_file_is_written_through(tmp_path):
    """A symlink is resolved and checked as its target: the link stays, the file it names is replaced."""
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    files.atomic_write_text(tmp_path / "link.json", "new")
    assert kind_of(tmp_path / "link.json") == "symlink" and (tmp_path / "real.json").read_text() == "new"


def test_project_and_build_outputs_follow_the_same_rule(tmp_path, capsys):
    fifo = special_file(tmp_path, "fifo")
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"settings": {"num_prompts": 1, "max_new_tokens": 8, "block_size": 4, "budget": 4},
                                  "methods": {"spot": {"commits_per_pass": {"2": 4}}}}))
    for argv, flag in ((["project", str(report), "--json", str(fifo)], "--json"),
                       (["project", str(report), "--plot", str(fifo)], "--plot"),
                       (["build", "tokenizer", "--out", str(fifo)], "--out"),
                       (["build", "target", "--out", str(fifo)], "--out"),
                       (["build", "prompts", "--out", str(fifo)], "--out")):
        line = cli_error_line(argv, capsys)
        assert flag in line and "is a FIFO" in line, line
    assert kind_of(fifo) == "fifo"


def test_bench_plot_checks_every_file_it_writes(tmp_path, capsys, no_bench):
    pytest.importorskip("matplotlib")
    (tmp_path / "plots").mkdir()
    special_file(tmp_path / "plots", "fifo", "commits_per_pass.png")
    line = cli_error_line([*QUICK_BENCH, "--plot", str(tmp_path / "plots")], capsys)
    assert "commits_per_pass.png: is a FIFO" in line


# ---- hang: the input-file rule, and --prompt-len sized first --------------------------------------------------------

def test_a_prompts_file_that_is_a_fifo_with_no_writer_is_refused_at_once(tmp_path, capsys):
    fifo = special_file(tmp_path, "fifo")
    with pytest.raises(SystemExit) as done:
        within(60, lambda: main([*QUICK_BENCH, "--prompts-file", str(fifo)]))
    assert f"--prompts-file {fifo}: not a regular file (a FIFO)" in str(done.value.code)


@pytest.mark.parametrize("kind", KINDS)
def test_spot_project_refuses_a_device_node_or_fifo(tmp_path, kind, capsys):
    """/dev/zero was read until the kernel killed the process; here a node with /dev/zero's numbers."""
    if kind == "fifo":
        node = special_file(tmp_path, kind)
    else:
        node = tmp_path / "zero"
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 5))
        except OSError as e:
            pytest.skip(f"mknod is not permitted here ({e.strerror})")
    line = within(60, lambda: cli_error_line(["project", str(node)], capsys))
    assert f"{node}: not a regular file" in line


def test_an_input_over_the_cap_is_refused_from_its_size(tmp_path, capsys):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(files.INPUT_LIMIT_MB * 10**6 + 1)  # sparse: no disk, and nothing of it is read
    t0 = time.perf_counter()
    line = cli_error_line(["project", str(big)], capsys)
    assert f"{big}: 64 MB, larger than the 64 MB spot reads" in line and time.perf_counter() - t0 < 10


def test_prompt_len_is_sized_against_the_target_before_any_prompt_is_drawn(capsys):
    """--prompt-len 100000000 allocated about 2.5 GB of prompts before any check; now the target's room (its KV
    cache here) refuses it first, naming the flag, and the process's peak memory does not grow by a gigabyte."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux
    t0 = time.perf_counter()
    line = cli_error_line(["generate", "--target", "random", "--prompt-len", "100000000"], capsys)
    assert "--prompt-len 100000000, --max-new-tokens 64: 64 new tokens after prompts of up to 100000000 tokens" in line
    assert "KV cache" in line and time.perf_counter() - t0 < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 10**6


# ---- wrong: the CLI's made-up prompts, the projection's inputs ------------------------------------------------------

def test_target_random_decodes_prompts_of_prompt_len(monkeypatch, capsys):
    """--target random --prompt-len 3 decoded held-out prompts of other lengths."""
    import spot.lab.bench
    seen = {}

    def record(target, prompts, methods, **kwargs):
        seen["prompts"] = prompts
        raise SystemExit("recorded")
    monkeypatch.setattr(spot.lab.bench, "run_bench", record)
    with pytest.raises(SystemExit, match="recorded"):
        main([*QUICK_BENCH, "--num-prompts", "5", "--prompt-len", "3"])
    assert [len(p) for p in seen["prompts"]] == [3] * 5
    assert not {0, 1, 2} & {t for p in seen["prompts"] for t in p}  # pad, end-of-sequence, mask


def test_random_prompts_never_hold_an_excluded_id():
    from spot.prompts import random_prompts

    excluded = {0, 5, 6, 7, 63}
    prompts = random_prompts(64, 200, 50, seed=3, exclude=excluded)
    ids = {t for p in prompts for t in p}
    assert not ids & excluded and ids == set(range(64)) - excluded  # every other id is drawn
    assert prompts == random_prompts(64, 200, 50, seed=3, exclude=excluded)  # from the seed alone
    with pytest.raises(ValueError, match="every id .* is a special id"):
        random_prompts(3, 1, 4, seed=0, exclude={0, 1, 2})


def test_the_embedded_targets_random_prompts_are_unchanged():
    """Excluding the embedded target's special ids (0, 1, 2) draws exactly the ids the old draw from [3, V) did,
    so seeds keep their prompts."""
    import torch
    from spot.prompts import random_prompts, special_ids

    target = spot.load_target("random")
    assert special_ids(target) == {0, 1, 2}
    old = torch.randint(3, target.vocab_size, (8, 16), generator=torch.Generator().manual_seed(0)).tolist()
    assert random_prompts(target.vocab_size, 8, 16, 0, special_ids(target)) == old


def _report(path, settings=None, spot_entry=None, **top):
    s = {"num_prompts": 2, "max_new_tokens": 64, "block_size": 32, "budget": 4, **(settings or {})}
    entry = {"commits_per_pass": {"1": 4, "2": 30}, **(spot_entry or {})}
    path.write_text(json.dumps({"settings": s, "methods": {"standard": {"commits_per_pass": {"1": 128}},
                                                           "spot": entry}, **top}))
    return path


@pytest.mark.parametrize("settings, entry, field", [
    ({"block_size": -16}, None, "settings.block_size"),
    ({"block_size": "32"}, None, "settings.block_size"),
    ({"num_prompts": float("nan")}, None, "settings.num_prompts"),
    ({"budget": 0}, None, "settings.budget"),
    (None, {"commits_per_pass": {"-1": 4}}, "methods.spot.commits_per_pass"),
    (None, {"commits_per_pass": {"2": -30}}, "methods.spot.commits_per_pass"),
    (None, {"commits_per_pass": {"2": "30"}}, "methods.spot.commits_per_pass"),
    (None, {"commits_per_pass": [1, 2]}, "methods.spot.commits_per_pass"),
    (None, {"dispatch_per_pass": {"decoder": {"ops": -1.29}}}, "methods.spot.dispatch_per_pass.decoder.ops"),
    (None, {"dispatch_per_pass": {"decoder": {"ops": float("inf")}}}, "methods.spot.dispatch_per_pass.decoder.ops"),
])
def test_project_refuses_a_report_whose_numbers_are_out_of_range(tmp_path, capsys, settings, entry, field):
    """A report with B = -16 or negative op counts was projected (`B = -16`, `launch ms -1.290`)."""
    report = _report(tmp_path / "r.json", settings, entry)
    line = cli_error_line(["project", str(report)], capsys)
    assert f"{report}: {field}" in line, line


@pytest.mark.parametrize("text, says", [("[1, 2]", "expected a JSON object, got a list"),
                                        ("NaN", "expected a JSON object, got a number"),
                                        ('"report"', "expected a JSON object, got a string"),
                                        ("{", "not valid JSON"), ("\xff", "not UTF-8")])
def test_project_names_a_report_that_is_no_json_object(tmp_path, capsys, text, says):
    report = tmp_path / "r.json"
    report.write_bytes(text.encode("latin-1"))
    assert says in cli_error_line(["project", str(report)], capsys)


# ---- one error path ------------------------------------------------------------------------------------------------

def test_demo_on_an_unknown_device_is_one_line(capsys):
    assert "--device xpu:9: spot runs on cpu or cuda devices" in cli_error_line(["demo", "--device", "xpu:9"], capsys)


def test_an_unexpected_error_is_one_line_naming_its_type(monkeypatch, capsys):
    """Whatever a command meets ends in one line (the traceback on request), not only the usual error types."""
    import spot.cli

    def broken(a):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr(spot.cli, "target_from_args", broken)
    line = cli_error_line(QUICK_BENCH, capsys)
    assert line == ("spot: error: division by zero (ZeroDivisionError; --debug or SPOT_DEBUG=1 shows the "
                    "traceback)")


def test_sigint_ends_the_command_with_one_line_and_status_130():
    """A SIGINT in the middle of a benchmark: exit status 130 and `spot: error: interrupted (SIGINT)` as the last
    line of stderr, no traceback (the progress bar before it is the only other output)."""
    argv = [sys.executable, "-m", "spot", "bench", "--target", "random", "--num-prompts", "500", "--methods",
            "standard", "--max-new-tokens", "64", "--block-size", "4", "--budget", "4"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # SIGINT at its default in the child: a test run started in the background of a non-interactive shell ignores
    # SIGINT, the child inherits that, and Python then installs no KeyboardInterrupt handler (the command ran on)
    restore = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    with subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
                          preexec_fn=restore) as proc:
        seen = b""
        deadline = time.time() + 120
        while b"method=standard" not in seen and time.time() < deadline:  # the bar's postfix: decoding
            seen += os.read(proc.stderr.fileno(), 4096) or b""
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    err = (seen + rest).decode()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "spot: error: interrupted (SIGINT)" and "Traceback" not in err, err
