"""Decoding the embedded target under each op backend, in one process: where the time goes, and identical tokens.

    OMP_NUM_THREADS=1 python bench/backend_decode.py --num-prompts 32 --temperature 1 --json backends.json

Every backend decodes the same held-out prompts with the same seeds (SPOT_BACKEND is switched between runs; the
ops read it per call). Reported per backend: passes, seconds, the share of each stage (`stage_seconds`: drafting,
target passes, scoring + verification) and whether the tokens equal the first backend's.
"""

from __future__ import annotations

import argparse
import os

import spot
from spot.lab.bench import check_writable, decode_all, write_json
from spot.prompts import held_out_prompts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="reference,cpu", help="comma-separated SPOT_BACKEND values")
    ap.add_argument("--method", default="standard")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    target = spot.load_target()
    prompts = [target.tokenizer.encode(t) for t in held_out_prompts(a.num_prompts)]
    drafter = spot.load_drafter() if a.method == "spot" else None
    settings = dict(max_new_tokens=a.max_new_tokens, block_size=a.block_size, temperature=a.temperature,
                    budget=a.budget, eos_id=None)
    runs, first = {}, None
    saved = os.environ.get("SPOT_BACKEND")
    try:
        for backend in a.backends.split(","):
            os.environ["SPOT_BACKEND"] = backend
            run = decode_all(target, prompts, a.method, drafter=drafter, **settings)
            first = first or run
            total = sum(run["stage_seconds"].values())
            runs[backend] = {"target_passes": run["target_passes"], "seconds": run["seconds"],
                             "stage_share": {k: v / total for k, v in run["stage_seconds"].items()},
                             "tokens_equal_first_backend": run["tokens"] == first["tokens"]}
            share = ", ".join(f"{k} {v:.1%}" for k, v in runs[backend]["stage_share"].items())
            print(f"{backend:<10} {run['target_passes']} passes  {run['seconds']:.1f} s  ({share})  "
                  f"tokens equal: {runs[backend]['tokens_equal_first_backend']}", flush=True)
    finally:
        if saved is None:
            os.environ.pop("SPOT_BACKEND", None)
        else:
            os.environ["SPOT_BACKEND"] = saved
    if a.json:
        write_json({"settings": {**settings, "method": a.method, "num_prompts": len(prompts)}, "runs": runs}, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
