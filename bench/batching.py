"""Batches whose rows do not wait (issue 19): batch passes with per-row progress against lock-step, and continuous
batching against lock-step groups, on the embedded target, in one process.

    OMP_NUM_THREADS=1 python bench/batching.py [--json batching.json] [--prompts 16] [--stream 64] [--width 8]

1. `--prompts` held-out prompts x 256 tokens, B = 32, T = 0, budget 16, all in one batch: spot without
   end-of-sequence stops, then standard with them. Reported: the passes of the lock-step batch, of the per-row
   batch, and the largest pass count of any prompt decoded alone (the floor a batch can reach).
2. `--stream` held-out prompts through `--width` rows (spot, end-of-sequence on): continuous batching
   (`max_batch`) against groups of `--width` decoded in lock-step one after the other; passes and tokens/s.
Every run's tokens are checked equal to the prompts decoded alone (or to the lock-step run), and recorded.
"""

from __future__ import annotations

import argparse
import time

import spot
from spot.lab.bench import check_writable, write_json
from spot.prompts import held_out_prompts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--stream", type=int, default=64)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    a = parser.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    target, drafter = spot.load_target(), spot.load_drafter()
    texts = held_out_prompts(max(a.prompts, a.stream))
    prompts = [target.tokenizer.encode(t) for t in texts]
    kw = dict(max_new_tokens=a.max_new_tokens, block_size=32, temperature=0.0, budget=16)
    report = {"settings": {**kw, "prompts": a.prompts, "stream": a.stream, "width": a.width}, "batch": {},
              "stream": {}}

    batch = prompts[:a.prompts]
    for method, eos in (("spot", None), ("standard", -1)):
        extra = dict(drafter=drafter) if method == "spot" else {}
        alone = [spot.generate(target, [p], method, rows=[i], eos_id=eos, **extra, **kw)
                 for i, p in enumerate(batch)]
        lock = spot.generate(target, batch, method, eos_id=eos, batching=spot.Batching(lockstep=True), **extra, **kw)
        per_row = spot.generate(target, batch, method, eos_id=eos, **extra, **kw)
        want = [o.tokens[0] for o in alone]
        most = max(o.stats.target_passes for o in alone)
        row = {"eos": eos is not None, "lockstep_passes": lock.stats.target_passes,
               "per_row_passes": per_row.stats.target_passes, "largest_single_prompt_passes": most,
               "per_row_over_largest": per_row.stats.target_passes / most,
               "exact": lock.tokens == want and per_row.tokens == want}
        report["batch"][method] = row
        print(f"{method:<9} eos {'on ' if row['eos'] else 'off'}: lock-step {row['lockstep_passes']} passes, "
              f"per-row {row['per_row_passes']}, largest single prompt {most} "
              f"(per-row / largest {row['per_row_over_largest']:.3f}), exact {row['exact']}", flush=True)

    stream = prompts[:a.stream]
    t0 = time.perf_counter()
    groups = [spot.generate(target, stream[i:i + a.width], "spot", drafter=drafter,
                            batching=spot.Batching(lockstep=True),
                            rows=list(range(i, min(i + a.width, len(stream)))), **kw)
              for i in range(0, len(stream), a.width)]
    t_lock = time.perf_counter() - t0
    t0 = time.perf_counter()
    cont = spot.generate(target, stream, "spot", drafter=drafter, batching=spot.Batching(max_batch=a.width), **kw)
    t_cont = time.perf_counter() - t0
    lock_tokens = [t for g in groups for t in g.tokens]
    generated = sum(len(t) for t in lock_tokens)
    lock_passes = sum(g.stats.target_passes for g in groups)
    report["stream"] = {
        "lockstep_groups": {"passes": lock_passes, "seconds": t_lock, "tokens_per_second": generated / t_lock},
        "continuous": {"passes": cont.stats.target_passes, "seconds": t_cont,
                       "tokens_per_second": cont.stats.generated_tokens / t_cont},
        "generated_tokens": generated, "exact": cont.tokens == lock_tokens}
    s = report["stream"]
    print(f"{len(stream)} prompts through {a.width} rows (spot, eos on): lock-step groups {lock_passes} passes "
          f"{s['lockstep_groups']['tokens_per_second']:.1f} tok/s; continuous {cont.stats.target_passes} passes "
          f"{s['continuous']['tokens_per_second']:.1f} tok/s (passes x{lock_passes / cont.stats.target_passes:.2f}, "
          f"tok/s x{s['continuous']['tokens_per_second'] / s['lockstep_groups']['tokens_per_second']:.2f}); "
          f"exact {s['exact']}", flush=True)
    if a.json:
        write_json(report, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
