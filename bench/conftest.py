"""`python -m pytest bench --benchmark-only` collects bench/bench_*.py (pytest's default pattern is test_*.py;
pyproject.toml's pytest settings keep `tests` the default test path)."""

import pytest


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
