"""Bounded, reproducible hypothesis settings for the fuzz tests (tests/ops/test_fuzz_ops.py,
tests/runtime/test_fuzz_generate.py, tests/runtime/test_fuzz_command_line.py). Examples are derandomized, so every
run (and CI) draws the same cases; a machine without hypothesis skips the module that imports this one."""

import pytest

try:  # a test dependency (make install, or pip install -e .[test])
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:
    pytest.skip("hypothesis is not installed (a test dependency: pip install -e .[test])", allow_module_level=True)

__all__ = ["fuzz", "given", "st"]


def fuzz(examples):
    """Bounded, reproducible hypothesis settings; the `backend` fixture (a stateless Target) is reused safely."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])
