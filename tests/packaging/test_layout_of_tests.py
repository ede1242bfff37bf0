"""The layout of tests/: every test file sits in one layer folder (ops, runtime, integrations, lab, packaging), one
level down, with a name found once in the whole suite; tests/ itself holds only conftest.py and the helper modules
the tests share (helpers.py, tiny.py, brute.py, ...), which pyproject's pytest settings put on the import path."""

import fnmatch
import tomllib
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ("ops", "runtime", "integrations", "lab", "packaging")


def layout_problems(tests: Path) -> list[str]:
    """What breaks the layout under the folder `tests`, one line each; [] when it holds."""
    problems = []
    by_name = {}
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if len(rel.parts) != 2 or rel.parts[0] not in LAYERS:
            problems.append(f"{rel}: a test file belongs in one of tests/{{{','.join(LAYERS)}}}/, one level down")
        by_name.setdefault(path.name, []).append(str(rel))
    # The layer folders are not packages: pytest imports each test file as a top-level module named after the file.
    problems += [f"{name}: in {' and '.join(paths)}; a test file's name is found once"
                 for name, paths in by_name.items() if len(paths) > 1]
    for layer in LAYERS:
        if not any((tests / layer).glob("test_*.py")):
            problems.append(f"{layer}/: a layer folder without a test file")
        if (tests / layer / "__init__.py").exists():
            problems.append(f"{layer}/__init__.py: the layer folders are not packages")
    for folder in sorted(p for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))):
        if folder.name not in LAYERS:
            problems.append(f"{folder.name}/: not a layer folder ({', '.join(LAYERS)})")
    return problems


def test_every_test_file_sits_in_a_layer_folder():
    assert layout_problems(TESTS) == []


@pytest.mark.parametrize("misplaced, problem", [
    ("test_x.py", "test_x.py: a test file belongs in one of"),
    ("misc/test_x.py", "misc/test_x.py: a test file belongs in one of"),
    ("ops/deeper/test_x.py", "ops/deeper/test_x.py: a test file belongs in one of"),
    ("runtime/test_score.py", "test_score.py: in ops/test_score.py and runtime/test_score.py"),
    ("ops/__init__.py", "ops/__init__.py: the layer folders are not packages"),
])
def test_a_file_out_of_place_is_named(tmp_path, misplaced, problem):
    """The check itself, on a copy of the layout with one file out of place."""
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
        (tmp_path / layer / f"test_{layer}_thing.py").write_text("")
    (tmp_path / "ops" / "test_score.py").write_text("")
    (tmp_path / "helpers.py").write_text("")
    assert layout_problems(tmp_path) == []
    (tmp_path / misplaced).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / misplaced).write_text("")
    assert any(p.startswith(problem) for p in layout_problems(tmp_path)), layout_problems(tmp_path)


def test_pytest_collects_every_layer_folder(pytestconfig):
    """No layer folder is one pytest skips when it recurses (its default norecursedirs holds `build`, so a folder of
    that name would drop its tests without a word), and the shared helpers are on pytest's import path."""
    for pattern in pytestconfig.getini("norecursedirs"):
        assert not [layer for layer in LAYERS if fnmatch.fnmatch(layer, pattern)], pattern
    settings = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert settings["testpaths"] == ["tests"] and settings["pythonpath"] == ["tests"]
    assert (TESTS / "conftest.py").is_file() and (TESTS / "helpers.py").is_file()
