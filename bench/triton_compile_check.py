"""Compile every Triton kernel of spot_kernels for a GPU target without a GPU (Triton's own ptxas), and report the
registers and spills ptxas reports. Catches what the CPU interpreter cannot: typing rules of the compiler,
unsupported ops, register spills.

    python bench/triton_compile_check.py               # sm_90 (H100/H200)
    python bench/triton_compile_check.py --arch 80     # A100
    PYTHONPATH=/path/to/triton-3.6/site python bench/triton_compile_check.py   # another Triton version

Exit status 1 if any kernel fails to compile. TRITON_INTERPRET must not be set.

Arguments are specialised as a launch on typical contiguous tensors would: every pointer 16-byte aligned, the
named integer arguments divisible by 16, unit strides as the constant 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("unset TRITON_INTERPRET: the interpreter does not compile")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from spot_kernels.triton import (commit_rule, expand_frontier, noise, order_logits, score,  # noqa: E402
                                  select_children, tree_attention, verify_tree)


def _source(fn, signature, constexprs, divisible=()):
    full = dict(signature)
    for name in constexprs:
        full[name] = "constexpr"
    full = {name: full[name] for name in fn.arg_names}
    aligned = [n for n, ty in full.items() if ty.startswith("*")] + [n for n in divisible if n not in constexprs]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    return ASTSource(fn=fn, signature=full, constexprs=constexprs, attrs=attrs)


def _ptxas_report(compiled, arch: int) -> str:
    from triton.backends.nvidia.compiler import get_ptxas

    tool = get_ptxas(arch)
    exe = getattr(tool, "path", None) or tool[0]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(compiled.asm["ptx"])
    sm = f"sm_{arch}a" if arch == 90 else f"sm_{arch}"
    res = subprocess.run([exe, f"-arch={sm}", "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
    os.unlink(f.name)
    keep = [line.split(":", 1)[-1].strip() for line in res.stderr.splitlines()
            if "registers" in line or "spill" in line]
    return "; ".join(keep)


def _i(*names, ty="i32"):
    return {n: ty for n in names}


def kernels():
    """(name, fn, signature without constexprs, constexprs, num_warps, integer arguments divisible by 16)"""
    score_sig = {"logits_ptr": "*bf16", "row_stride": "i64", **_i("V", "B"), "rows_ptr": "*i64",
                 "bstart_ptr": "*i64", "steps_ptr": "*i64", "seed_key": "i64", "temperature": "fp32",
                 "gbound_ptr": "*fp32", "tokens_ptr": "*i64", "conf_ptr": "*fp32", "probs_ptr": "*fp32",
                 "ids_ptr": "*i64",
                 "valid_ptr": "*i8", "K": "i32"}
    for has_t in (False, True):
        for conf in (0, 1, 2, 3):
            yield (f"score T{'>' if has_t else '='}0 conf{conf}", score._score_rows_kernel, score_sig,
                   dict(HAS_T=has_t, CONF=conf, KP=32, BLOCK_V=2048), 8, ["row_stride", "V", "K"])
    yield ("score fp16 K=4 small V", score._score_rows_kernel, {**score_sig, "logits_ptr": "*fp16"},
           dict(HAS_T=True, CONF=0, KP=4, BLOCK_V=64), 1)
    yield ("score commit", score._commit_kernel,
           {"conf_ptr": "*fp32", "masked_ptr": "*u8", "valid_ptr": "*i8", "out_ptr": "*i64", "B": "i32"},
           dict(BLOCK_B=32), 1)
    strides = _i("r0", "r1", "r2", "r3", "p0", "p1", "p2", "p3", "s0", "s1", "s2", "s3", "v0", "v1", "v2", "v3")
    yield ("noise_uniform", noise._noise_kernel,
           {"out_ptr": "*fp32", **{p: "*i64" for p in ("r_ptr", "p_ptr", "s_ptr", "v_ptr")}, "seed_key": "i64",
            "numel": "i64", **_i("d1", "d2", "d3"), **strides}, dict(BLOCK=1024), 4)
    for dtype, has_t in (("fp32", True), ("fp64", True), ("fp32", False)):
        yield (f"select_children {dtype} T{'>' if has_t else '='}0", select_children._select_children_kernel,
               {"logits_ptr": f"*{dtype}", "masked_ptr": "*u8", "path_ptr": f"*{dtype}", "probs_ptr": f"*{dtype}",
                "ids_ptr": "*i64", "rows_ptr": "*i64", "bstart_ptr": "*i64", "steps_ptr": "*i64",
                "seed_key": "i64", "temperature": "fp32", **_i("B", "K", "k"),
                **_i("ps_f", "ps_b", "ps_k", "is_f", "is_b", "is_k"),
                "pos_out": "*i64", "lp_out": f"*{dtype}", "tok_out": "*i64"},
               dict(HAS_T=has_t, BLOCK_B=32, BLOCK_K=32), 1)
    for dtype, has_t in (("fp32", True), ("fp64", True), ("fp32", False)):  # B 32, K 32, w 4 x branch 8
        yield (f"expand_frontier {dtype} T{'>' if has_t else '='}0", expand_frontier._expand_frontier_kernel,
               {"logits_ptr": f"*{dtype}", "states_ptr": "*i64", "path_ptr": f"*{dtype}", "probs_ptr": f"*{dtype}",
                "ids_ptr": "*i64", "rows_ptr": "*i64", "bstart_ptr": "*i64", "steps_ptr": "*i64",
                "seed_key": "i64", "temperature": "fp32", "mask_id": "i64", **_i("W", "B", "K", "k", "width"),
                **_i("ps_r", "ps_b", "ps_k", "is_r", "is_b", "is_k"),
                "pos_out": "*i64", "lp_out": f"*{dtype}", "tok_out": "*i64", "cstates_out": "*i64",
                "front_out": "*i64", "fstates_out": "*i64", "flp_out": f"*{dtype}"},
               dict(HAS_T=has_t, BLOCK_B=32, BLOCK_K=32, BLOCK_N=32), 1)
    for dtype, has_t, block in (("fp32", True, 32), ("fp64", True, 32), ("fp32", False, 32), ("fp32", True, 64)):
        # K 32, branch 8; B 32 and 64
        big = 3.4028234663852886e38 / 4 if dtype == "fp32" else 1.7976931348623157e308 / 4
        yield (f"expand_steps nodes {dtype} T{'>' if has_t else '='}0 B{block}",
               expand_frontier._expand_steps_nodes_kernel,
               {"logits_ptr": f"*{dtype}", "states_ptr": "*i64", "path_ptr": f"*{dtype}", "sizes_ptr": f"*{dtype}",
                "probs_ptr": f"*{dtype}", "ids_ptr": "*i64", "rows_ptr": "*i64", "bstart_ptr": "*i64",
                "steps_ptr": "*i64", "seed_key": "i64", "mask_id": "i64", **_i("W", "B", "K", "branch", "n_sel"),
                **_i("ps_r", "ps_b", "ps_k", "is_r", "is_b", "is_k"), "lp_out": f"*{dtype}", "cstates_out": "*i64"},
               dict(BIG=big, HAS_T=has_t, BLOCK_B=block, BLOCK_K=32, BLOCK_M=2 * block, PAD_ROWS=16),
               4 if block <= 32 else 8)
    yield ("expand_steps frontier", expand_frontier._expand_steps_frontier_kernel,
           {"lp_ptr": "*fp32", "cstates_ptr": "*i64", **_i("n", "width", "B"), "front_out": "*i64",
            "fstates_out": "*i64", "flp_out": "*fp32"}, dict(BLOCK_C=32, BLOCK_B=32), 1)
    for has_tok in (True, False):  # the shipped drafter's sizes: d_model 128, head_dim 16, d_ff 512, B 32
        yield (f"order_logits tokens={has_tok}", order_logits._order_logits_kernel,
               {"feat_ptr": "*fp32", "sm_ptr": "*u8", "tok_ptr": "*fp32", "row_ptr": "*i64", "nm_ptr": "*u8",
                "depth_ptr": "*i64", "res_ptr": "*fp32", "w_ptr": "*fp32", "out_ptr": "*fp32",
                **_i("B", "S", "D", "HD", "D_FF", "T", "N_HEADS", "N_LAYERS", "MAX_BLOCK", "MAX_DEPTH", "OFF_POS",
                     "OFF_REL", "OFF_DEPTH", "OFF_TOK", "OFF_LAYERS", "LAYER_SIZE"), "scale": "fp32", "eps": "fp32",
                **_i("rs_r", "rs_d"), "out_scale": "fp32"},
               dict(HAS_TOK=has_tok, HAS_RES=True, BLOCK_B=32, BLOCK_D=128, BLOCK_IN=128, BLOCK_HD=16, BLOCK_F=64,
                    BLOCK_T=32), 8)
    for n in (8, 64, 256):
        yield (f"verify_tree N<={n}", verify_tree._verify_kernel,
               {**{p: "*i64" for p in ("parents_ptr", "dpos_ptr", "dtok_ptr", "tpos_ptr", "ttok_ptr", "block_ptr",
                                       "acc_pos_ptr", "acc_tok_ptr", "num_ptr", "new_block_ptr", "last_ptr")},
                **_i("N", "B")},
               dict(ROUNDS=max(1, (n - 1).bit_length()), BLOCK_N=n, BLOCK_B=32), 1 if n <= 64 else 4)
    for n, b in ((16, 32), (64, 32), (16, 256), (128, 32)):
        rounds, block_n, block_b, warps = verify_tree.steps_launch(n, b)
        yield (f"verify_steps N<={n} B{b}", verify_tree._steps_kernel,
               {"parents_ptr": "*i64", "states_ptr": "*i64", "commit_ptr": "*u8", "tokens_ptr": "*i64",
                **{p: "*i64" for p in ("acc_pos_ptr", "num_ptr", "steps_ptr", "new_block_ptr", "last_ptr")},
                **_i("N", "B")},
               dict(ROUNDS=rounds, BLOCK_N=block_n, BLOCK_B=block_b), warps)
    for dtype, inclusive, b in (("fp32", False, 32), ("fp64", True, 32), ("fp32", False, 256)):
        yield (f"commit_rule {dtype} B{b}", commit_rule._commit_kernel,
               {"conf_ptr": f"*{dtype}", **_i("cs0", "cs1"), "masked_ptr": "*u8", **_i("ms0", "ms1"),
                "steps_ptr": "*i64", "ss0": "i32", "quota_ptr": "*i64", **_i("S", "qs0", "qs1"),
                "thresholds_ptr": "*fp64", **_i("ts0", "ts1"), "out_ptr": "*u8", "B": "i32"},
               dict(INCLUSIVE=inclusive, BLOCK_B=b, BLOCK_K=max(1, min(b, 4096 // b)), cs1=1, ms1=1, ts1=1, ss0=1),
               1 if b <= 64 else 4)
    tree_args = {"ks_ptr": "*i64", **_i("P", "NUM_NEW", "BS", "NQ", "NK")}
    yield ("tree_mask", tree_attention._dense_mask_kernel, {**tree_args, "out_ptr": "*u8"},
           dict(ADDITIVE=False, BLOCK_Q=32, BLOCK_K=128), 4)
    yield ("tree_mask_additive bf16", tree_attention._dense_mask_kernel, {**tree_args, "out_ptr": "*bf16"},
           dict(ADDITIVE=True, BLOCK_Q=32, BLOCK_K=128), 4)
    yield ("tree_mask_packed", tree_attention._packed_mask_kernel, {**tree_args, "out_ptr": "*i32", "NW": "i32"},
           dict(BLOCK_Q=16, BLOCK_W=8), 4)
    yield ("tree_position_ids", tree_attention._position_ids_kernel,
           {"ks_ptr": "*i64", "out_ptr": "*i64", **_i("P", "NUM_NEW", "BS", "NQ")}, dict(BLOCK_Q=256), 4)
    attn_strides = _i("sq_b", "sq_h", "sq_n", "sq_i", "sq_d", "skp_b", "skp_h", "skp_k", "skp_d", "svp_b", "svp_h",
                      "svp_k", "svp_d", "skn_b", "skn_h", "skn_n", "skn_i", "skn_d", "svn_b", "svn_h", "svn_n",
                      "svn_i", "svn_d")
    unit = {name: 1 for name in attn_strides if name.endswith("_d")}
    for dtype, fp32, bm, bn in (("bf16", False, 128, 64), ("fp16", False, 64, 64), ("fp32", True, 128, 32)):
        yield (f"tree_attention {dtype} BLOCK_M={bm} N={bn}", tree_attention._tree_attention_kernel,
               {**{p: f"*{dtype}" for p in ("q_ptr", "kp_ptr", "vp_ptr", "kn_ptr", "vn_ptr")}, "ks_ptr": "*i64",
                "o_ptr": f"*{dtype}", "qk_scale": "fp32", **_i("HKV", "G", "N", "B", "P", "D"), **attn_strides},
               dict(FP32=fp32, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=128, **unit), 8 if bm >= 128 else 4,
               ["N", "B", "P", "D", *attn_strides])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--only", default="", help="substring of the kernel names to compile")
    args = parser.parse_args()
    print(f"triton {triton.__version__}, target sm_{args.arch}")
    failed = 0
    for name, fn, sig, consts, warps, *divisible in kernels():
        if args.only and args.only not in name:
            continue
        t0 = time.time()
        try:
            src = _source(fn, {k: v for k, v in sig.items() if k not in consts}, consts, *divisible)
            compiled = triton.compile(src, target=GPUTarget("cuda", args.arch, 32),
                                      options={"num_warps": warps})
            print(f"ok    {name:36s} {time.time() - t0:5.1f}s  {_ptxas_report(compiled, args.arch)}", flush=True)
        except Exception as err:  # noqa: BLE001 - report every failure, then exit 1
            failed += 1
            msg = str(err).strip().splitlines()
            print(f"FAIL  {name:36s} {type(err).__name__}: {' | '.join(msg[-6:])}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
