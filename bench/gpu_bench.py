"""GPU microbenchmarks of the torch.ops.spot.* ops for every backend present (reference, triton, cuda), with the
goals of the Triton issue measured in one run:

  - fused scoring on [32 nodes x 32 positions x 151936] bf16 logits: achieved bandwidth as a fraction of the
    measured device-to-device copy bandwidth, and the speed-up over the PyTorch reference;
  - verify_tree on 64-node trees at batch 1: microseconds per call (through the op, and replayed from a CUDA graph,
    which leaves out the Python launch cost);
  - tree_attention with prefix 2048, 16 nodes x 32 positions, 32 query heads, 8 KV heads, head dim 128, bf16:
    against PyTorch SDPA with a dense mask and FlexAttention with a block mask on the same inputs;
  - the drafting ops, expand_frontier and expand_steps (one tree depth) and order_logits (the shipped drafter's
    forward, d_model 128, 3 layers, 8 heads, B 32 and 64, 1 to 256 nodes): the CUDA C++ kernels against Triton and
    the reference, with their agreement with the reference;
  - commit_rule and verify_steps (commit rules, issue 37) at batch 1 and 32 x 16 nodes x B 32 and larger;
  - every other op at docs/design.md §6 shapes;
  - the pass-time curve of a 2-layer stack of Qwen3-8B width (hidden 4096, 32 / 8 heads, head dim 128, MLP 12288,
    LM head over vocabulary 151936), bf16, prefix 1024, N in {1, 2, 4, 8, 16, 32, 64} nodes x B = 32, scaled to 36
    layers: the measured counterpart of `spot project`'s roofline (`spot project ... --measured gpu_bench.json`).

    python bench/gpu_bench.py --json gpu_bench.json [--budget 200] [--quick]

Times are medians of triton.testing.do_bench (CUDA events, L2 flushed between runs). Each section has a try/except
and the JSON is rewritten after every measurement, so a timeout still leaves the figures so far.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import sys
import time
import traceback

import torch
import triton
from triton.testing import do_bench

import spot_kernels
from common import (I64, attention_inputs, capture, children_inputs, commit_rule_inputs, frontier_inputs, nbytes,
                    order_inputs, random_trees, score_inputs, step_trees, steps_inputs)
from common import backends_for as _backends_for
from spot.files import atomic_write_text

DEV = torch.device("cuda")
RESULTS: dict = {"meta": {}, "results": [], "goals": {}, "errors": []}
ARGS = None
T_START = time.time()


def save():
    if ARGS.json:
        atomic_write_text(ARGS.json, json.dumps(RESULTS, indent=1, default=str))


def left() -> float:
    return ARGS.budget - (time.time() - T_START)


def record(**row):
    RESULTS["results"].append(row)
    line = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
    print(line, flush=True)
    save()


def bench(fn, rep_ms=None) -> float:
    """Median milliseconds per call."""
    rep = rep_ms if rep_ms is not None else (40 if ARGS.quick else 100)
    return float(do_bench(fn, warmup=10, rep=rep, return_mode="median"))


def backends_for(op: str) -> list[str]:
    return _backends_for(op, DEV)


def section(name):
    def wrap(fn):
        def run(*a, **kw):
            if left() < 5:
                RESULTS["errors"].append(f"{name}: skipped, time budget spent")
                print(f"== {name}: skipped (budget)", flush=True)
                return None
            print(f"== {name} ({left():.0f} s left)", flush=True)
            try:
                return fn(*a, **kw)
            except Exception as err:  # noqa: BLE001 - keep going, report
                RESULTS["errors"].append(f"{name}: {type(err).__name__}: {err}")
                traceback.print_exc()
                save()
                return None
        return run
    return wrap


# ------------------------------------------------------------------------------------------------ sections

@section("copy bandwidth")
def copy_bandwidth() -> float:
    n = 1 << 29  # 1 GiB of bytes
    src = torch.empty(n, dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    gbps = 2 * n / ms / 1e6
    record(op="copy", backend="torch", shape=[n], ms=ms, bytes=2 * n, gb_per_s=gbps)
    RESULTS["meta"]["copy_gb_per_s"] = gbps
    return gbps


def lm_score_inputs(nodes, block, vocab, batch=1, kind="lm", dtype=torch.bfloat16):
    """(logits, masked, rows, block_start, steps): peaked rows like a language model's ("lm"), or N(0, 1)."""
    return score_inputs((batch, nodes), block, vocab, dtype, scale=1.0, mask_p=0.5, peaked=kind == "lm", device=DEV)


@section("fused scoring goal: [32 x 32 x 151936] bf16")
def score_goal(copy_gbps):
    logits, masked, rows, bstart, steps = lm_score_inputs(32, 32, 151936)
    for kind in ("lm", "randn"):
        if kind == "randn":
            logits, masked, rows, bstart, steps = lm_score_inputs(32, 32, 151936, kind="randn")
        for temperature in (0.0, 1.0):
            times = {}
            for backend in backends_for("score"):
                fn = lambda b=backend: torch.ops.spot.score(logits, masked, 0, rows, bstart, steps, temperature, "prob",
                                                            32, backend=b)
                fn()
                ms = bench(fn, rep_ms=60 if backend == "reference" else None)
                times[backend] = ms
                gbps = nbytes(logits) / ms / 1e6
                record(op="score", backend=backend, shape=[32, 32, 151936], logits=kind, temperature=temperature,
                       ms=ms, bytes=nbytes(logits), gb_per_s=gbps,
                       fraction_of_copy=gbps / copy_gbps if copy_gbps else None)
            for backend in ("triton", "cuda"):
                if backend in times:
                    key = f"score_{backend}_{kind}_T{temperature:g}"
                    RESULTS["goals"][key] = {
                        "fraction_of_copy_bandwidth": nbytes(logits) / times[backend] / 1e6 / copy_gbps
                        if copy_gbps else None,
                        "speedup_vs_reference": times["reference"] / times[backend] if "reference" in times else None,
                        "goal": ">= 0.70 of copy bandwidth and >= 5x the reference"}
            save()


@section("scoring: Triton tile sweep")
def score_sweep(copy_gbps):
    logits, masked, rows, bstart, steps = lm_score_inputs(32, 32, 151936)
    for block in (1024, 2048, 4096):
        for warps in (4, 8, 16):
            if block // warps < 64:
                continue
            os.environ["SPOT_TRITON_SCORE_BLOCK"] = str(block)
            os.environ["SPOT_TRITON_SCORE_WARPS"] = str(warps)
            try:
                for temperature in (0.0, 1.0):
                    fn = lambda: torch.ops.spot.score(logits, masked, 0, rows, bstart, steps, temperature, "prob", 32,
                                                      backend="triton")
                    fn()
                    ms = bench(fn, rep_ms=40)
                    gbps = nbytes(logits) / ms / 1e6
                    record(op="score_sweep", backend="triton", block_v=block, warps=warps, temperature=temperature,
                           ms=ms, gb_per_s=gbps, fraction_of_copy=gbps / copy_gbps if copy_gbps else None)
            finally:
                os.environ.pop("SPOT_TRITON_SCORE_BLOCK", None)
                os.environ.pop("SPOT_TRITON_SCORE_WARPS", None)


@section("scoring at docs/design.md §6 shapes")
def score_shapes():
    for vocab, block, nodes, batch in ((32000, 32, 8, 1), (32000, 32, 64, 1), (126464, 32, 16, 8),
                                       (151936, 16, 32, 8), (151936, 32, 1, 32)):
        logits, masked, rows, bstart, steps = lm_score_inputs(nodes, block, vocab, batch)
        # LLaDA's shape also with the stale top-512 a commit rule keeps at T > 0 (spot.drafters.default_top_k)
        for top_k in (32, 512) if vocab == 126464 else (32,):
            for backend in backends_for("score"):
                if backend == "reference" and (ARGS.quick or top_k != 32):
                    continue
                fn = lambda b=backend, k=top_k: torch.ops.spot.score(logits, masked, 0, rows, bstart, steps, 1.0,
                                                                     "prob", k, backend=b)
                fn()
                ms = bench(fn, rep_ms=40)
                record(op="score", backend=backend, shape=[batch, nodes, block, vocab], temperature=1.0, top_k=top_k,
                       ms=ms, gb_per_s=nbytes(logits) / ms / 1e6)
        logits = None  # free this shape's logits before the next is allocated


def verify_inputs(batch, nodes, block, seed=0):
    return random_trees(batch, nodes, block, seed, hit=0.7, vocab=32000, device=DEV)


def graph_us_per_call(fn, calls=100) -> float:
    """Device time per call: `calls` calls captured in one CUDA graph, replayed."""
    graph, _ = capture(fn, calls)
    ms = bench(graph.replay, rep_ms=50)
    return ms * 1000 / calls


@section("verify goal: 64-node trees, batch 1")
def verify_goal():
    args = verify_inputs(1, 64, 32)
    for backend in backends_for("verify_tree"):
        fn = lambda b=backend: torch.ops.spot.verify_tree(*args, backend=b)
        fn()
        us_op = bench(fn) * 1000
        try:
            us_graph = graph_us_per_call(fn)
        except Exception as err:  # noqa: BLE001
            us_graph = None
            RESULTS["errors"].append(f"verify graph {backend}: {err}")
        record(op="verify_tree", backend=backend, shape=[1, 64, 32], us_per_call_op=us_op,
               us_per_call_cuda_graph=us_graph)
        if backend != "reference":
            RESULTS["goals"][f"verify_{backend}_64_nodes_batch1"] = {
                "us_per_call_through_op": us_op, "us_per_call_cuda_graph": us_graph, "goal": "<= 10 us per call"}
    save()


@section("verify at docs/design.md §6 shapes")
def verify_shapes():
    for batch, nodes, block in ((32, 64, 32), (8, 128, 32), (32, 8, 32)):
        args = verify_inputs(batch, nodes, block)
        for backend in backends_for("verify_tree"):
            fn = lambda b=backend: torch.ops.spot.verify_tree(*args, backend=b)
            fn()
            record(op="verify_tree", backend=backend, shape=[batch, nodes, block], us_per_call_op=bench(fn) * 1000)


# expand_frontier and expand_steps: (rows, frontier nodes per row w, B, stale top-K, branch, width): F = 64
# (bench_ops.py's select_children shape), a batch of 32 at width 4 x branch 8, F = 2048
FRONTIER_SHAPES = ((16, 4, 32, 32, 4, 4), (32, 4, 32, 32, 8, 4), (512, 4, 32, 32, 4, 4))
# order_logits, the shipped drafter: (nodes, B): bench_cpu.py's 1 / 4 / 16 nodes at B 32, then a tree depth of a batch
# (64, 256 nodes) and B 64
ORDER_SHAPES = ((1, 32), (4, 32), (16, 32), (64, 32), (256, 32), (64, 64))


@section("drafting ops: expand_frontier, expand_steps and order_logits, CUDA C++ against Triton and the reference")
def drafting_ops():
    for (op, inputs), temperature, shape in itertools.product(
            (("expand_frontier", frontier_inputs), ("expand_steps", steps_inputs)), (0.0, 1.0), FRONTIER_SHAPES):
        args = inputs(*shape, temperature=temperature, device=DEV)
        want = getattr(torch.ops.spot, op)(*args, backend="reference")
        times = {}
        for backend in backends_for(op):
            fn = lambda b=backend, o=op: getattr(torch.ops.spot, o)(*args, backend=b)
            got = fn()
            exact = all(torch.equal(x, y) if not x.is_floating_point() else torch.equal(x.isinf(), y.isinf())
                        for x, y in zip(got, want))
            finite = [(x, y, x.isfinite() & y.isfinite()) for x, y in zip(got, want) if x.is_floating_point()]
            lp_diff = max(float((x[f] - y[f]).abs().max()) if bool(f.any()) else 0.0 for x, y, f in finite)
            times[backend] = bench(fn) * 1000
            record(op=op, backend=backend, shape=list(shape), temperature=temperature,
                   us_per_call=times[backend], equal_reference_but_logprob_rounding=exact,
                   max_abs_logprob_diff=lp_diff)
        if "cuda" in times:
            RESULTS["goals"][f"{op}_cuda_{'x'.join(map(str, shape))}_T{temperature:g}"] = {
                "us_per_call": times["cuda"], "triton_us": times.get("triton"),
                "speedup_vs_triton": times["triton"] / times["cuda"] if "triton" in times else None,
                "speedup_vs_reference": times["reference"] / times["cuda"] if "reference" in times else None}
        save()
    for nodes, block in ORDER_SHAPES:
        args = order_inputs(nodes, block, device=DEV)
        want = torch.ops.spot.order_logits(*args, backend="reference")
        finite = torch.isfinite(want)
        logit_scale = max(1.0, float(want[finite].abs().max())) if bool(finite.any()) else 1.0
        times = {}
        for backend in backends_for("order_logits"):
            fn = lambda b=backend: torch.ops.spot.order_logits(*args, backend=b)
            got = fn()
            same_inf = bool(torch.equal(torch.isinf(got), torch.isinf(want)))
            diff = float((got[finite] - want[finite]).abs().max()) / logit_scale if bool(finite.any()) else 0.0
            times[backend] = bench(fn) * 1000
            record(op="order_logits", backend=backend, shape=[nodes, block], us_per_call=times[backend],
                   us_per_node=times[backend] / nodes, max_diff_over_logit_scale=diff, same_minus_inf=same_inf)
        if "cuda" in times:
            RESULTS["goals"][f"order_logits_cuda_N{nodes}_B{block}"] = {
                "us_per_call": times["cuda"], "triton_us": times.get("triton"),
                "speedup_vs_triton": times["triton"] / times["cuda"] if "triton" in times else None,
                "speedup_vs_reference": times["reference"] / times["cuda"] if "reference" in times else None,
                "tolerance": "max_diff_over_logit_scale <= 1e-5 (tests/ops/test_order_logits.py)"}
        save()


@section("commit rules: commit_rule and verify_steps at a round's shapes")
def rule_ops():
    """A rule step per node (LLaDA2's threshold 0.9 with a quota) and its verification, through the op and replayed
    from a CUDA graph (device time per call)."""
    for batch, nodes, block in ((1, 16, 32), (32, 16, 32), (32, 64, 32), (8, 16, 256)):
        inputs = {"commit_rule": commit_rule_inputs((batch, nodes), block, "threshold:0.9,steps:8", device=DEV),
                  "verify_steps": step_trees(batch, nodes, block, hit=0.7, vocab=32000, device=DEV)}
        for op, args in inputs.items():
            for backend in backends_for(op):
                fn = lambda o=op, a=args, b=backend: getattr(torch.ops.spot, o)(*a, backend=b)
                fn()
                try:
                    us_graph = graph_us_per_call(fn)
                except Exception as err:  # noqa: BLE001
                    us_graph = None
                    RESULTS["errors"].append(f"{op} graph {backend}: {err}")
                record(op=op, backend=backend, shape=[batch, nodes, block], us_per_call_op=bench(fn) * 1000,
                       us_per_call_cuda_graph=us_graph)


def goal_attention_inputs(b=1, hq=32, hkv=8, n=16, block=32, prefix=2048, dim=128, dtype=torch.bfloat16):
    return (*attention_inputs(b, hq, hkv, n, block, prefix, dim, dtype, device=DEV),
            torch.zeros(b, dtype=I64, device=DEV))


@section("tree attention goal: P 2048, 16 x 32 nodes, 32/8 heads, D 128, bf16")
def attention_goal():
    import torch.nn.functional as F

    b, hq, hkv, n, block, prefix, dim = 1, 32, 8, 16, 32, 2048, 128
    q, kp, vp, kn, vn, ks = goal_attention_inputs(b, hq, hkv, n, block, prefix, dim)
    flops = 4 * b * hq * n * block * (prefix + block) * dim  # the useful work
    times = {}
    ours = {}
    for backend in backends_for("tree_attention"):
        fn = lambda bk=backend: torch.ops.spot.tree_attention(q, kp, vp, kn, vn, ks, None, backend=bk)
        ours[backend] = fn()
        ms = bench(fn)
        times[backend] = ms
        record(op="tree_attention", backend=backend, shape=[b, hq, hkv, n, block, prefix, dim], ms=ms,
               tflops=flops / ms / 1e9)
    # the same attention as one SDPA call over [prefix; node tokens] keys with the dense tree mask
    qs = q.reshape(b, hq, n * block, dim)
    keys = torch.cat([kp, kn.reshape(b, hkv, n * block, dim)], dim=2)
    vals = torch.cat([vp, vn.reshape(b, hkv, n * block, dim)], dim=2)
    mask = spot_kernels.tree_mask(ks, prefix, 0, n, block)
    keys_x, vals_x = keys.repeat_interleave(hq // hkv, 1), vals.repeat_interleave(hq // hkv, 1)
    sdpa = lambda: F.scaled_dot_product_attention(qs, keys_x, vals_x, attn_mask=mask)
    want = sdpa()
    times["sdpa_dense_mask"] = bench(sdpa)
    record(op="tree_attention", backend="sdpa_dense_mask (kv heads expanded)", ms=times["sdpa_dense_mask"],
           tflops=flops / times["sdpa_dense_mask"] / 1e9)
    try:
        sdpa_gqa = lambda: F.scaled_dot_product_attention(qs, keys, vals, attn_mask=mask, enable_gqa=True)
        sdpa_gqa()
        ms = bench(sdpa_gqa)
        record(op="tree_attention", backend="sdpa_dense_mask (enable_gqa)", ms=ms, tflops=flops / ms / 1e9)
        times["sdpa_dense_mask"] = min(times["sdpa_dense_mask"], ms)
    except Exception as err:  # noqa: BLE001
        RESULTS["errors"].append(f"sdpa enable_gqa: {err}")
    for backend, out in ours.items():
        err = (out.reshape(b, hq, n * block, dim).float() - want.float()).abs().max().item()
        record(op="tree_attention_check", backend=backend, max_abs_diff_vs_sdpa=err)
    if left() > 60:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            mod = spot_kernels.tree_mask_mod(ks, prefix, 0, block)
            t0 = time.time()
            block_mask = create_block_mask(mod, b, None, n * block, prefix + n * block, device=DEV)
            flex = torch.compile(flex_attention, dynamic=False)
            flex(qs, keys, vals, block_mask=block_mask, enable_gqa=True)
            compile_s = time.time() - t0
            fl = lambda: flex(qs, keys, vals, block_mask=block_mask, enable_gqa=True)
            times["flex_block_mask"] = bench(fl)
            record(op="tree_attention", backend="flex_attention (block mask, compiled)", ms=times["flex_block_mask"],
                   tflops=flops / times["flex_block_mask"] / 1e9, compile_s=compile_s,
                   max_abs_diff_vs_sdpa=(fl().float() - want.float()).abs().max().item())
        except Exception as err:  # noqa: BLE001
            RESULTS["errors"].append(f"flex_attention: {type(err).__name__}: {err}")
    else:
        RESULTS["errors"].append("flex_attention: skipped, time budget")
    for backend in ("triton", "cuda"):
        if backend in times:
            RESULTS["goals"][f"tree_attention_{backend}"] = {
                "ms": times[backend], "sdpa_dense_mask_ms": times.get("sdpa_dense_mask"),
                "flex_block_mask_ms": times.get("flex_block_mask"),
                "faster_than_sdpa": times[backend] < times.get("sdpa_dense_mask", math.inf),
                "faster_than_flex": (times[backend] < times["flex_block_mask"]) if "flex_block_mask" in times
                else None, "goal": "faster than SDPA (dense mask) and FlexAttention (block mask)"}
    save()


@section("tree attention: Triton tile sweep")
def attention_sweep():
    q, kp, vp, kn, vn, ks = goal_attention_inputs()
    for bm, bn, warps, stages in ((128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 2), (128, 128, 8, 2),
                                  (64, 128, 4, 3)):
        env = {"SPOT_TRITON_ATTN_BLOCK_M": bm, "SPOT_TRITON_ATTN_BLOCK_N": bn, "SPOT_TRITON_ATTN_WARPS": warps,
               "SPOT_TRITON_ATTN_STAGES": stages}
        os.environ.update({k: str(v) for k, v in env.items()})
        try:
            fn = lambda: torch.ops.spot.tree_attention(q, kp, vp, kn, vn, ks, None, backend="triton")
            fn()
            record(op="tree_attention_sweep", backend="triton", **{k.split("ATTN_")[1].lower(): v
                                                                   for k, v in env.items()}, ms=bench(fn, rep_ms=40))
        finally:
            for k in env:
                os.environ.pop(k, None)


@section("other ops at docs/design.md §6 shapes")
def other_ops():
    for frontier, block, top, k in ((64, 32, 32, 4), (2048, 32, 32, 4)):
        args = children_inputs(frontier, block, top, k, device=DEV)
        for backend in backends_for("select_children"):
            fn = lambda b=backend: torch.ops.spot.select_children(*args, backend=b)
            fn()
            record(op="select_children", backend=backend, shape=[frontier, block, top, k],
                   us_per_call=bench(fn) * 1000)
    for batch, prefix, nodes, block in ((1, 256, 8, 32), (8, 2048, 32, 32), (1, 8192, 64, 16)):
        key_start = torch.arange(batch, dtype=I64, device=DEV) * 3
        for op in ("tree_mask", "tree_mask_additive", "tree_mask_packed", "tree_position_ids"):
            extra = (torch.bfloat16,) if op == "tree_mask_additive" else ()
            for backend in backends_for(op):
                fn = lambda o=op, b=backend, e=extra: getattr(torch.ops.spot, o)(key_start, prefix, block, nodes,
                                                                                  block, *e, backend=b)
                out = fn()
                ms = bench(fn, rep_ms=30)
                record(op=op, backend=backend, shape=[batch, prefix, nodes, block], ms=ms,
                       gb_per_s=nbytes(out) / ms / 1e6)
    rows = torch.arange(256, dtype=I64, device=DEV)[:, None]
    vocab = torch.arange(151936, dtype=I64, device=DEV)[None, :]
    for backend in backends_for("noise_uniform"):
        fn = lambda b=backend: torch.ops.spot.noise_uniform(0, rows, rows, rows, vocab, backend=b)
        fn()
        ms = bench(fn, rep_ms=30)
        record(op="noise_uniform", backend=backend, shape=[256, 151936], ms=ms,
               g_uniforms_per_s=256 * 151936 / ms / 1e6)


PASS_CURVE_NODES = (1, 2, 4, 8, 16, 32, 64)


@section("pass-time curve: 2 layers of Qwen3-8B width, B 32, prefix 1024, bf16")
def pass_curve():
    """The project's own model (spot.model) at the real width, timed per node count; written as "pass_curve"."""
    from spot.lab.project import SHAPES, measure_pass_curve

    shape, layers = SHAPES["qwen3-8b"], 2
    curve = RESULTS["pass_curve"] = {
        "shape": shape.name, "layers_measured": layers, "layers_full": shape.layers, "block": 32, "prefix": 1024,
        "batch": 1, "dtype": "bfloat16", "device": torch.cuda.get_device_name(), "kernels": "torch (default path)",
        "timer": "triton.testing.do_bench median, L2 flushed", "points": []}

    def point(p):
        curve["points"].append(p)
        record(op="pass_curve", backend="torch", shape=[p["nodes"], 32, 1024], layer_ms=p["layer_ms"],
               head_ms=p["head_ms"], pass_ms_36_layers=p["pass_ms"])

    measure_pass_curve(shape, PASS_CURVE_NODES, block=32, prefix=1024, layers=layers, device=DEV,
                       dtype=torch.bfloat16, timer=lambda fn: bench(fn, rep_ms=40 if ARGS.quick else 80),
                       deadline=T_START + ARGS.budget - 5, on_point=point)
    torch.cuda.empty_cache()


def main() -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", default="gpu_bench.json")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds; later sections are skipped after")
    parser.add_argument("--quick", action="store_true")
    ARGS = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    RESULTS["meta"].update(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                           python=platform.python_version(), cuda=torch.version.cuda,
                           extension=spot_kernels.HAS_C_EXTENSION,
                           backends={op: backends_for(op) for op in ("score", "verify_tree", "tree_attention",
                                                                     "expand_frontier", "order_logits")})
    print(json.dumps(RESULTS["meta"]), flush=True)
    copy_gbps = copy_bandwidth() or 0.0
    score_goal(copy_gbps)
    verify_goal()
    attention_goal()
    pass_curve()
    drafting_ops()
    score_sweep(copy_gbps)
    attention_sweep()
    verify_shapes()
    rule_ops()
    other_ops()
    score_shapes()
    RESULTS["meta"]["seconds"] = time.time() - T_START
    save()
    print(json.dumps(RESULTS["goals"], indent=1, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
