"""Half precision and memory on CPU (docs/half_precision.md).

    OMP_NUM_THREADS=1 python bench/bench_half.py passes      # bf16 pass time: invariant (float32 compute) vs native
    python bench/bench_half.py memory                        # peak RSS of generate(max_new_tokens=10**5)

`passes`: the embedded target in bfloat16, a 64-token prompt cached, then one target pass over N nodes of a
32-token block, N = 1 (standard) and 16 (a SPOT tree), timed as the median of --repeats passes, for
  native     compute in bfloat16 (`ModelTarget(model, compute_dtype=torch.bfloat16)`): not batch-invariant
  per-pass   the default: bfloat16 weights, each cast to float32 when used, float32 compute (batch-invariant)
  per-session  a float32 copy of the bfloat16 weights made once (same numbers as per-pass, twice the memory)
  float32    the float32 target, for reference
and checks that per-pass and per-session return identical logits.

`memory`: in a fresh process, loads the embedded target, warms up with a short decode, then decodes held-out
prompt 7 (a word problem the model answers in 79 tokens, then end-of-sequence) with max_new_tokens=10**5 (block
32, end-of-sequence on) and reports the peak resident memory above the warmed-up process (ru_maxrss), the
answer's length and the KV cache's final capacity. ("def add(a, b):\\n" would do, but this model never ends
that answer: it would decode all 10**5 tokens.)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import torch

import spot
from spot.prompts import held_out_prompts
from spot.target import ModelTarget


def _session(target, block, prompt):
    session = target.start([prompt], 64, block)
    session.score(torch.full((1, 1, block), target.mask_id))  # prefill the prompt (untimed)
    return session


def passes(args) -> dict:
    """Every variant's pass is timed in turn within each repeat (round robin), so a change of load on a shared
    machine hits all of them alike; medians over the repeats."""
    base = spot.load_target()
    bf16 = base.model.to(torch.bfloat16)
    t0 = time.perf_counter()
    session_copy = ModelTarget(_float_copy(bf16))  # what a per-session upcast would hold
    copy_seconds = time.perf_counter() - t0
    variants = {"native": ModelTarget(bf16, compute_dtype=torch.bfloat16), "per-pass": ModelTarget(bf16),
                "per-session": session_copy, "float32": spot.load_target()}
    prompt = list(range(10, 10 + 64))
    rows = {}
    for n in (1, 16):
        sessions = {name: _session(target, args.block_size, prompt) for name, target in variants.items()}
        nodes = torch.full((1, n, args.block_size), base.mask_id)
        nodes[0, :, 0] = 100 + torch.arange(n)
        times = {name: [] for name in variants}
        outs = {}
        for _ in range(args.repeats):
            for name, session in sessions.items():
                t0 = time.perf_counter()
                outs[name] = session.score(nodes)
                times[name].append(time.perf_counter() - t0)
        assert torch.equal(outs["per-pass"], outs["per-session"]), "per-session and per-pass logits differ"
        row = {name: statistics.median(t) for name, t in times.items()}
        row["invariant_over_native"] = row["per-pass"] / row["native"]
        rows[f"N={n}"] = row
    return {"threads": torch.get_num_threads(), "block_size": args.block_size, "prompt_tokens": len(prompt),
            "session_copy_seconds": copy_seconds, "median_pass_seconds": rows}


def _float_copy(model):
    import copy
    return copy.deepcopy(model).float()


def memory(args) -> dict:
    target = spot.load_target()
    prompt = target.tokenizer.encode(held_out_prompts(args.prompt_index + 1)[args.prompt_index])
    spot.generate(target, [prompt], "standard", max_new_tokens=64, block_size=32)  # warm-up: pools, caches
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sessions, start = [], target.start
    target.start = lambda *a, **kw: sessions.append(start(*a, **kw)) or sessions[-1]
    out = spot.generate(target, [prompt], args.method, max_new_tokens=args.max_new_tokens, block_size=32,
                        drafter=spot.load_drafter() if args.method == "spot" else None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cache = sessions[0].cache
    return {"method": args.method, "max_new_tokens": args.max_new_tokens, "answer_tokens": len(out.tokens[0]),
            "ends_with_eos": out.tokens[0][-1] == target.eos_id, "peak_rss_above_warm_mb": (peak - before) / 1024,
            "peak_rss_mb": peak / 1024, "cache_capacity": cache.capacity,
            "cache_mb": sum(t.numel() * t.element_size() for t in cache.k + cache.v) / 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["passes", "memory"])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--method", default="standard")
    ap.add_argument("--max-new-tokens", type=int, default=10**5)
    ap.add_argument("--prompt-index", type=int, default=7, help="held-out prompt (7: a 79-token answer, then eos)")
    args = ap.parse_args(argv)
    result = passes(args) if args.what == "passes" else memory(args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
