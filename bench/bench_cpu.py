"""CPU backend (csrc/cpu/, backend="cpu") against the reference on the decoder's shapes, on one thread.

    python -m pytest bench/bench_cpu.py --benchmark-only       # pytest-benchmark table (ratios: compare rows)
    python bench/bench_cpu.py                                   # every SIMD level this CPU has, cpu vs reference
    python bench/bench_cpu.py --levels avx2 --cases score       # some levels, the cases whose name starts so

Each SIMD level runs in a process of its own under ATEN_CPU_CAPABILITY=<level>, which sets the level of ATen's
kernels (the reference's) and of the C++ kernels alike (csrc/cpu/simd.h), so a level's ratio compares the two as an
AVX2-only (or baseline) CPU would run them. MKL and oneDNN choose their own code paths (MKL_ENABLE_INSTRUCTIONS,
ONEDNN_MAX_CPU_ISA): the bench pins them to the same level, as such a CPU would have them.

Shapes (issue 20): score at T = 1 and T = 0 for 8 nodes x 32 positions x V = 32,000 float32 logits (goal: cpu at
least 20x faster than the reference at T = 1), one 151,936-entry row (goal: at most 1 ms), noise_uniform for the
same 8 x 32 x 32,000 words, select_children for 64 frontier nodes x B = 32 x K = 32, verify_tree for 32 rows x 8
nodes, commit_rule (threshold 0.9 with a quota of 4) and verify_steps for 32 rows x 16 nodes x B = 32 (issue 37),
order_logits with the shipped drafter for 1 and 4 draft nodes at B = 16 and 1, 4 and 16 at B = 32 (a CPU tree's
depth drafts 1 to 4 per row), expand_steps for one tree depth of 1 and 8 rows x 4 frontier nodes x branch 8 at
B = 32, K = 32 (a threshold rule's size distributions). One intra-op thread (torch.set_num_threads(1)) so that the
numbers do not depend on the machine's load balance; SPOT_BENCH_THREADS=n changes that.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import pytest
import torch

import spot_kernels
from common import commit_rule_inputs, order_inputs, step_trees, steps_inputs

I64 = torch.int64
THREADS = int(os.environ.get("SPOT_BENCH_THREADS", "1"))
torch.set_num_threads(THREADS)


def _score_args(nodes, block, vocab, temperature):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(nodes, block, vocab, generator=g)
    masked = torch.rand(nodes, block, generator=g) < 0.5
    lead = torch.arange(nodes, dtype=I64)
    return (logits, masked, 0, lead, lead, lead, temperature, "prob", 32)


def _noise_args(nodes, block, vocab):
    rows = torch.arange(nodes, dtype=I64)[:, None, None]
    positions = torch.arange(block, dtype=I64)[None, :, None]
    return (0, rows, positions, torch.tensor(3), torch.arange(vocab, dtype=I64))


def _children_args(frontier, block, top, k):
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(frontier, block, top, generator=g), -1).sort(-1, descending=True).values
    return (torch.randn(frontier, block, generator=g), torch.rand(frontier, block, generator=g) < 0.7,
            torch.zeros(frontier), probs, torch.randint(0, 32000, (frontier, block, top), generator=g), 0,
            torch.arange(frontier), torch.zeros(frontier, dtype=I64), torch.ones(frontier, dtype=I64), 1.0, k)


def _verify_args(b, n, width):
    g = torch.Generator().manual_seed(0)
    parents = torch.cat([torch.full((b, 1), -1), torch.arange(n - 1).expand(b, n - 1)], dim=1)  # a chain
    # distinct positions along each chain (a path commits a position once), every draft the target's commit
    target_pos = torch.stack([torch.randperm(width, generator=g)[:n] for _ in range(b)])
    target_tokens = torch.randint(0, 100, (b, n), generator=g)
    none = torch.full((b, 1), -1)
    draft_pos = torch.cat([none, target_pos[:, :-1]], dim=1)
    draft_tokens = torch.cat([none, target_tokens[:, :-1]], dim=1)
    return (parents, draft_pos, draft_tokens, target_pos, target_tokens, torch.zeros(b, width, dtype=I64))


CASES = {
    "score-T1-8x32x32000": ("score", lambda: _score_args(8, 32, 32000, 1.0)),
    "score-T0-8x32x32000": ("score", lambda: _score_args(8, 32, 32000, 0.0)),
    "score-T1-1x1x151936": ("score", lambda: _score_args(1, 1, 151936, 1.0)),
    "score-T0-1x1x151936": ("score", lambda: _score_args(1, 1, 151936, 0.0)),
    "noise-8x32x32000": ("noise_uniform", lambda: _noise_args(8, 32, 32000)),
    "select_children-F64-B32-K32-k4": ("select_children", lambda: _children_args(64, 32, 32, 4)),
    "verify_tree-b32-N8-B32": ("verify_tree", lambda: _verify_args(32, 8, 32)),
    "commit_rule-b32-n16-B32": ("commit_rule", lambda: commit_rule_inputs((32, 16), 32, "threshold:0.9,steps:8")),
    "verify_steps-b32-N16-B32": ("verify_steps", lambda: step_trees(32, 16, 32, hit=0.7, vocab=32000)),
    "order_logits-N1-B16": ("order_logits", lambda: order_inputs(1, 16, device="cpu")),
    "order_logits-N4-B16": ("order_logits", lambda: order_inputs(4, 16, device="cpu")),
    "order_logits-N1-B32": ("order_logits", lambda: order_inputs(1, device="cpu")),
    "order_logits-N4-B32": ("order_logits", lambda: order_inputs(4, device="cpu")),
    "order_logits-N16-B32": ("order_logits", lambda: order_inputs(16, device="cpu")),
    "expand_steps-b1-w4-B32-K32-k8": ("expand_steps", lambda: steps_inputs(1, 4, 32, 32, 8, 4, device="cpu")),
    "expand_steps-b8-w4-B32-K32-k8": ("expand_steps", lambda: steps_inputs(8, 4, 32, 32, 8, 4, device="cpu")),
}


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("case", list(CASES))
def test_cpu_backend(benchmark, case, backend):
    op, make = CASES[case]
    if backend not in spot_kernels.available_backends(op, "cpu"):
        pytest.skip(f"{backend} has no kernel for spot::{op} on cpu (is spot_kernels._C built?)")
    args = make()
    fn = getattr(torch.ops.spot, op)
    fn(*args, backend=backend)  # warm-up
    benchmark.extra_info.update(op=op, backend=backend, threads=THREADS)
    benchmark(lambda: fn(*args, backend=backend))


def _median(fn, min_time=1.0, min_runs=5):
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_time:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if len(times) >= 200:
            break
    return statistics.median(times)


# What a CPU of each level runs: ATen's kernels and the C++ kernels (ATEN_CPU_CAPABILITY), MKL's and oneDNN's.
LEVEL_ENV = {
    "default": dict(ATEN_CPU_CAPABILITY="default", MKL_ENABLE_INSTRUCTIONS="SSE4_2", ONEDNN_MAX_CPU_ISA="SSE41"),
    "avx2": dict(ATEN_CPU_CAPABILITY="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2", ONEDNN_MAX_CPU_ISA="AVX2"),
    "avx512": dict(ATEN_CPU_CAPABILITY="avx512"),  # the libraries at their best, AVX-512 or above
}


def machine_levels() -> list[str]:
    """The SIMD levels this CPU can run, lowest first (ATen's own level and those below it)."""
    order = ["default", "avx2", "avx512"]
    native = torch.backends.cpu.get_cpu_capability().lower()
    return order[:order.index(native) + 1] if native in order else ["default"]


def run_level(cases):
    """Time `cases` in this process (at its level); one line per case."""
    from spot_kernels.extension import cpu_simd_level

    print(f"level {cpu_simd_level()} (ATen {torch.backends.cpu.get_cpu_capability()}), torch {torch.__version__}, "
          f"{THREADS} thread(s); medians, cpu vs reference in the same process", flush=True)
    for case in cases:
        op, make = CASES[case]
        args = make()
        fn = getattr(torch.ops.spot, op)
        cpu = _median(lambda: fn(*args, backend="cpu"))
        ref = _median(lambda: fn(*args, backend="reference"), min_runs=3)
        print(f"{case:34s} cpu {cpu * 1e3:9.3f} ms   reference {ref * 1e3:9.3f} ms   ratio {ref / cpu:7.1f}x",
              flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", nargs="+", choices=list(LEVEL_ENV), help="default: every level this CPU has")
    parser.add_argument("--cases", nargs="+", default=[""], help="case-name prefixes (default: every case)")
    parser.add_argument("--in-process", action="store_true", help="time at this process's level only (internal)")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if any(c.startswith(p) for p in args.cases)]
    if args.in_process:
        return run_level(cases)
    for level in args.levels or machine_levels():
        subprocess.run([sys.executable, __file__, "--in-process", "--cases", *cases],
                       env={**os.environ, **LEVEL_ENV[level]}, check=True)


if __name__ == "__main__":
    main()
