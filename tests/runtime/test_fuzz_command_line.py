"""Property-based fuzzing (hypothesis) of the command line: any text for one flag of `spot generate`, `spot bench` or a
`spot build` step either runs or ends with one line naming the flag, never another exception or a traceback
(issue #31)."""

from pathlib import Path

from fuzzing import fuzz, given, st


# Any text for one flag, the others fixed small: `spot` either runs (a 4-token decode of one prompt on a random
# target) or ends with ONE line, `spot: error: ...` (exit status 1; argparse's usage errors, status 2), never
# another exception or a traceback.

_TEXTS = st.one_of(st.integers(-10**20, 10**20).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(["", "abc", "1,2", "0,4", "-0", "1e39", "cuda", "cuda:3", "meta", "bogus", "prob",
                                    "standard,confidence", "float64", "spot"]),
                   st.text(max_size=8))
_DECODE_FLAGS = ("--block-size", "--temperature", "--budget", "--width", "--branch", "--seed", "--confidence",
                 "--methods", "--dtype", "--device", "--batch-size", "--budgets", "--prompt-len")
_BUILD_STEPS = {  # step: (fixed arguments that end the step before any work once its flags pass, fuzzed flags)
    "drafter": (["--data", "{tmp}"], ("--steps", "--batch-size", "--max-depth", "--lr", "--heldout-every",
                                      "--eval-every", "--checkpoint-every", "--soft-weight", "--soft-temperature",
                                      "--token-buckets", "--block-sizes", "--seed")),
    "target": (["--corpus", "{tmp}", "--out", "{tmp}/out", "--export", "{tmp}/export"],
               ("--steps", "--batch-size", "--seq-len", "--lr", "--minutes", "--d-model", "--layers", "--heads")),
    "collect": (["--target", "random", "--prompts-file", "{tmp}/none.txt", "--out", "{tmp}/out"],
                ("--block-sizes", "--temperatures", "--num-prompts", "--max-new-tokens", "--batch-size",
                 "--skip-prompts", "--device", "--dtype")),
    "corpus": (["--out", "{package}/corpus"], ("--total-mb", "--mix", "--heldout-fraction", "--max-files",
                                               "--max-chars", "--seed")),
    "evaluate": (["--drafter", "{tmp}/none", "--data", "{tmp}"], ("--heldout-every", "--block-sizes", "--split")),
}


def _ends_cleanly(argv, capsys):
    """Run `spot ARGV` in this process: it returns 0, or ends with a one-line error."""
    from spot.cli import main

    try:
        assert main(argv) == 0
        return
    except SystemExit as e:
        err = e.code + "\n" if isinstance(e.code, str) else capsys.readouterr().err
        assert e.code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spot: error: ") and "Traceback" not in err, (argv, err)


@fuzz(40)
@given(flag=st.sampled_from(_DECODE_FLAGS), value=_TEXTS, command=st.sampled_from(["generate", "bench"]))
def test_fuzz_cli_arguments(flag, value, command, capsys):
    argv = [command, "--target", "random", "--max-new-tokens", "4", "--methods", "standard,confidence", "--quiet",
            "--num-prompts", "1", flag, value]
    if command == "generate":
        argv = [a for a in argv if a not in ("--quiet", "--num-prompts", "1")]
        if flag in ("--batch-size", "--budgets"):
            return
    _ends_cleanly(argv, capsys)


@fuzz(40)
@given(step=st.sampled_from(sorted(_BUILD_STEPS)), data=st.data())
def test_fuzz_build_step_arguments(step, data, capsys, tmp_path_factory):
    import spot

    tmp = tmp_path_factory.mktemp("fuzz-build")
    fixed, flags = _BUILD_STEPS[step]
    flag, value = data.draw(st.sampled_from(flags)), data.draw(_TEXTS)
    package = str(Path(spot.__file__).resolve().parent)
    argv = ["build", step, *(a.format(tmp=tmp, package=package) for a in fixed), flag, value]
    _ends_cleanly(argv, capsys)
