"""What a wheel would ship: setup.py declares every importable folder of `spot` (the data folders weights/ and
assets/ too, as setuptools sees them) and the model weights, tokenizer and prompts reach the built package."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_build_py_ships_every_package_and_data_file(tmp_path):
    lib = tmp_path / "lib"
    out = subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path), "build_py", "-d", str(lib)],
        cwd=ROOT, env={**os.environ, "SPOT_BUILD_CUDA": "0"}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    # setuptools warns (and says a future version will ignore the folder) for a package missing from `packages`
    assert "absent from the `packages` configuration" not in out.stdout + out.stderr
    for path in ("spot/weights/drafter.safetensors", "spot/weights/drafter.json", "spot/weights/budgets.json",
                 "spot/weights/target.safetensors", "spot/weights/portable/drafter.safetensors",
                 "spot/weights/target2/target.safetensors", "spot/weights/causal/target.safetensors",
                 "spot/weights/causal/drafter.safetensors",
                 "spot/assets/tokenizer.json",
                 "spot/assets/heldout_prompts.json", "spot/lab/pipeline/word_problems.toml",
                 "spot_kernels/__init__.py"):
        assert (lib / path).is_file(), path
    assert not list(lib.rglob("__pycache__"))
