"""The C++ CPU kernels at every SIMD level this CPU has (csrc/cpu/simd.h): the level follows ATen's, so
ATEN_CPU_CAPABILITY pins both, and `score` keeps its promises at each level: tokens, top-K ids and commit positions
equal the reference's, probabilities within PROB_TOL (docs/ops.md, "The C++ CPU backend"). Each level runs in a
process of its own, because ATen reads ATEN_CPU_CAPABILITY once per process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import spot_kernels
from helpers import WITH_CPU
from spot_kernels.extension import cpu_simd_level, cpu_simd_levels

pytestmark = pytest.mark.skipif(not WITH_CPU, reason="spot_kernels._C was built without its CPU kernels")

ORDER = ("default", "avx2", "avx512")


def machine_levels() -> list[str]:
    native = torch.backends.cpu.get_cpu_capability().lower()
    return list(ORDER[:ORDER.index(native) + 1]) if native in ORDER else ["default"]


def test_the_kernels_run_at_atens_level():
    assert cpu_simd_level() == torch.backends.cpu.get_cpu_capability().lower()
    if sys.platform.startswith("linux") and os.uname().machine == "x86_64":
        assert cpu_simd_levels() == ORDER  # built for every level, whatever this CPU has
    assert cpu_simd_level() in cpu_simd_levels()


# One process per level: score on float32 and bfloat16 logits at T in {0, 1} (the Gumbel-max path), V 32,000 and one
# row of V 151,936, against the reference in the same process; the outputs come back as lists.
_SCORE_AT_LEVEL = textwrap.dedent("""
    import json, torch
    import spot_kernels
    from spot_kernels.extension import cpu_simd_level
    from helpers import assert_probs_close
    out = {"level": cpu_simd_level(), "aten": torch.backends.cpu.get_cpu_capability(), "tokens": []}
    g = torch.Generator().manual_seed(0)
    cases = (((2, 8, 32000), torch.float32), ((2, 8, 32000), torch.bfloat16), ((1, 1, 151936), torch.float32))
    for shape, dtype in cases:
        logits = (3 * torch.randn(*shape, generator=g)).to(dtype)
        masked = torch.rand(shape[:2], generator=g) < 0.6
        lead = torch.arange(shape[0])
        for temperature in (0.0, 1.0):
            args = (logits, masked, 7, lead, lead, lead, temperature, "prob", 8)
            cpu = spot_kernels.score(*args, backend="cpu")
            ref = spot_kernels.score(*args, backend="reference")
            assert torch.equal(cpu.tokens, ref.tokens) and torch.equal(cpu.topk_ids, ref.topk_ids)
            assert torch.equal(cpu.commit_pos, ref.commit_pos)
            assert_probs_close(cpu.topk_probs, ref.topk_probs, torch.float32)
            out["tokens"].append(cpu.tokens.tolist())
    print(json.dumps(out))
""")


def test_score_keeps_its_promises_at_every_level():
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results = {}
    for level in machine_levels():
        env = {**os.environ, "ATEN_CPU_CAPABILITY": level, "PYTHONPATH": os.pathsep.join(
            [tests_dir, os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-c", _SCORE_AT_LEVEL], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{level}: {done.stderr[-3000:]}"
        results[level] = json.loads(done.stdout.strip().splitlines()[-1])
        assert results[level]["level"] == level and results[level]["aten"].lower() == level
    tokens = {level: r["tokens"] for level, r in results.items()}
    assert all(t == tokens["default"] for t in tokens.values())  # the same tokens at every level
    assert spot_kernels.HAS_C_EXTENSION
