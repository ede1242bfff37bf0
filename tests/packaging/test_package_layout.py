"""The house rules a newcomer relies on: the runtime never imports the lab (spot.lab: the build pipeline,
benchmarking, projection, plotting, the demo), and nothing the pipeline writes lands in the installed package by
default."""

import fnmatch
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import spot
from spot.lab.pipeline.cli import main as build_main
from spot.cli import main

PACKAGE = Path(spot.__file__).parent


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


def test_import_spot_loads_no_lab_module():
    """`import spot` (and the CLI module) loads the runtime only: nothing of spot.lab (the offline pipeline,
    benchmarking, projection, plotting, the demo) and not matplotlib."""
    done = _run("""
        import sys
        import spot, spot.cli
        print(sorted(m for m in sys.modules if m == "spot.lab" or m.startswith("spot.lab.") or m == "matplotlib"))
        import spot.lab.bench, spot.lab.project, spot.lab.demo
        print(sorted(m for m in sys.modules if m.startswith("spot.lab.")))
    """)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.strip().splitlines()
    assert before == "[]"
    assert "spot.lab.bench" in after  # the filter sees lab modules once they are loaded


def test_generate_runs_with_the_build_pipeline_blocked():
    """A finder that refuses every spot.lab.pipeline module: decoding (every method) and the user CLI still work."""
    done = _run("""
        import sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name == "spot.lab.pipeline" or name.startswith("spot.lab.pipeline."):
                    raise ImportError(f"blocked: {name}")
                return None

        sys.meta_path.insert(0, Refuse())
        import spot
        from spot.model import ModelConfig

        cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=64)
        target = spot.load_target("random", config=cfg, seed=1)
        ref = spot.generate(target, [[5, 6, 7]], "standard", max_new_tokens=8, block_size=4, eos_id=None)
        out = spot.generate(target, [[5, 6, 7]], "confidence", max_new_tokens=8, block_size=4, eos_id=None)
        assert out.tokens == ref.tokens and len(ref.tokens[0]) == 8
        from spot.cli import main
        assert main(["generate", "--target", "random", "--max-new-tokens", "4", "--block-size", "4",
                     "--methods", "standard", "--budget", "auto"]) == 0
        try:
            import spot.lab.pipeline.cli
        except ImportError as err:
            print("refused:", err)
    """)
    assert done.returncode == 0, done.stderr
    assert "refused: blocked: spot.lab.pipeline" in done.stdout  # the finder was really in the way


@pytest.mark.parametrize("step", [["drafter", "--data", "{tmp}"], ["tune", "--dry-run"], ["prompts"],
                                  ["tokenizer", "--encode-only"], ["target"], ["corpus"]])
def test_build_refuses_to_write_into_the_package(step, tmp_path, capsys):
    """Every step whose output is inside the installed package is refused before any work, unless told."""
    out = {"drafter": PACKAGE / "weights", "tune": PACKAGE / "weights" / "budgets.json",
           "prompts": PACKAGE / "assets" / "heldout_prompts.json", "tokenizer": PACKAGE / "assets" / "tokenizer.json",
           "target": PACKAGE / "weights", "corpus": PACKAGE / "corpus"}[step[0]]
    flag = "--export" if step[0] == "target" else "--out"
    before = {p: p.stat().st_mtime_ns for p in PACKAGE.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit, match="inside the installed spot package"):
        build_main([*(s.format(tmp=tmp_path) for s in step), flag, str(out)])
    assert {p: p.stat().st_mtime_ns for p in PACKAGE.rglob("*") if p.is_file()} == before


def test_build_defaults_chain_under_the_working_folder():
    """Each step's default output is the next step's default input, under .cache/ (never the package)."""
    from spot.lab.pipeline.cli import build_parser

    parser = build_parser()

    def defaults(step, *extra):
        return vars(parser.parse_args([step, *extra]))

    assert defaults("corpus")["out"] == defaults("tokenizer")["corpus"] == defaults("target")["corpus"] \
        == defaults("collect")["corpus"] == defaults("tune")["corpus"] == defaults("prompts")["corpus"]
    assert defaults("collect")["out"] == defaults("drafter")["data"] == defaults("evaluate")["data"]
    assert defaults("drafter")["out"] == defaults("evaluate")["drafter"]
    for step in ("corpus", "tokenizer", "prompts", "collect", "drafter", "tune"):
        assert Path(defaults(step)["out"]).parts[0] == ".cache", step
    assert Path(defaults("target")["export"]).parts[0] == ".cache"


def test_user_cli_delegates_build(capsys):
    with pytest.raises(SystemExit) as done:
        main(["build", "--help"])
    assert done.value.code == 0
    assert "corpus" in capsys.readouterr().out



# What tools treat as build output and skip or delete: setuptools' and pip's build/ and dist/, `make clean`, most
# .gitignore templates, and pytest's norecursedirs (build, dist, *.egg, venv, ...). A source folder so named drops out
# of test collection, linting or packaging without a word (the pipeline once lived in spot/lab/build/).
OUTPUT_NAMES = ("build", "dist", "*.egg", "*.egg-info", "venv", "node_modules", "out")


def output_named_folders(root: Path, patterns) -> list[str]:
    """Folders under `root` (hidden and __pycache__ folders aside) whose name matches one of `patterns`."""
    return [p.relative_to(root).as_posix() for p in sorted(root.rglob("*"))
            if p.is_dir() and not any(part.startswith((".", "__")) for part in p.relative_to(root).parts)
            and any(fnmatch.fnmatch(p.name, pattern) for pattern in patterns)]


def test_no_source_folder_is_named_like_build_output(pytestconfig, tmp_path):
    patterns = OUTPUT_NAMES + tuple(pytestconfig.getini("norecursedirs"))
    repo = Path(__file__).resolve().parents[2]
    for source in ("python", "csrc", "tests", "bench", "spot_kernels", "examples"):
        assert output_named_folders(repo / source, patterns) == [], source
    (tmp_path / "spot" / "lab" / "build").mkdir(parents=True)
    assert output_named_folders(tmp_path, patterns) == ["spot/lab/build"]  # the check can fail
