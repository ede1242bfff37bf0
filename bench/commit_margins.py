"""Where a drafter misses the next commit of one-commit decoding, and whether those commits are the model's or its
rounding's.

    OMP_NUM_THREADS=1 python bench/commit_margins.py --data DIR --float64-prompts 16 --json margins.json

1. On collected trajectories (`spot build collect`, rule one, T 0; `--data` holds the shards of one block size),
   every held-out (block, stale step) example at each depth: the drafter's top-1 / top-4 accuracy, split by the
   target's own margin at the node it predicts for, log(top confidence) - log(second) over the node's masked
   positions. A margin near 0 is a near-tie that the commit order runs through; the share of commits that are
   `<|eos|>` is reported beside it.
2. With `--float64-prompts N`: the first N shipped held-out prompts decoded with `standard` (rule one, T 0, 256
   tokens past `<|eos|>`) in float32, and every block state of that decode scored again by the same target in
   float64: the share of commits where float64 would commit another position. Those commits are decided by float32
   rounding; the rest are the model's own order, which a drafter may learn.
"""

from __future__ import annotations

import argparse
import glob
import math
import time
from pathlib import Path

import torch

import spot
from spot.lab.bench import check_writable, write_json
from spot.lab.pipeline.train_drafter import Trajectories, topk_lowest
from spot.order_model import drafter_directory, load_order_model
from spot.prompts import held_out_prompts
from spot_kernels.ops.score import score

MARGIN_EDGES = (0.0, 1e-6, 1e-5, 0.1, math.inf)
NEAR_TIE = 1e-5  # the margin under which a node counts as a near-tie


def drafter_margins(data: Trajectories, model, depths, eos_id: int) -> dict:
    """Held-out accuracy of `model` per depth and margin bucket (see the module docstring)."""
    model.eval()
    out = {}
    for d in depths:
        blocks, k = data.example_index(d)
        inputs, labels = data.batch(blocks, k, torch.full((len(blocks),), d))
        with torch.no_grad():
            logits = torch.cat([model(*(None if t is None else t[s:s + 4096] for t in inputs))
                                for s in range(0, len(labels), 4096)])
        ranked = topk_lowest(logits, min(4, data.B))
        hit1, hit4 = ranked[:, 0] == labels, (ranked == labels[:, None]).any(1)
        node_conf = data.node_confidence(blocks, k, d).double().nan_to_num(-1.0).masked_fill(~inputs[3], -1.0)
        top2 = node_conf.topk(2, dim=1).values
        margin = torch.where(top2[:, 1] > 0, top2[:, 0].log() - top2[:, 1].clamp_min(1e-300).log(), math.inf)
        eos = data.top1_ids[blocks, k + 1 + d].long().gather(1, labels[:, None]).squeeze(1) == eos_id
        buckets = []
        for lo, hi in zip(MARGIN_EDGES[:-1], MARGIN_EDGES[1:]):
            sel = (margin >= lo) & ((margin < hi) | (hi == math.inf))  # one masked position: margin inf
            n = int(sel.sum())
            buckets.append({"margin": [lo, hi], "examples": n, "share": n / len(labels),
                            "top1": float(hit1[sel].double().mean()) if n else None,
                            "top4": float(hit4[sel].double().mean()) if n else None,
                            "share_of_misses": int((sel & ~hit1).sum()) / max(int((~hit1).sum()), 1)})
        tie = margin < NEAR_TIE
        band = (node_conf.clamp_min(1e-300).log() >= top2[:, :1].log() - NEAR_TIE)[tie].sum(1)
        out[d] = {"examples": len(labels), "top1": float(hit1.double().mean()), "top4": float(hit4.double().mean()),
                  "eos_share": float(eos.double().mean()), "near_tie_share": float(tie.double().mean()),
                  "near_tie_positions_mean": float(band.double().mean()) if tie.any() else None,
                  "near_tie_one_minus_top_median": float((1 - top2[tie, 0]).median()) if tie.any() else None,
                  "buckets": buckets}
    return out


def _score(logits, masked):
    zeros = torch.zeros(masked.shape[:-1], dtype=torch.long)
    return score(logits, masked, 0, zeros, zeros, zeros, 0.0)


def float64_agreement(t32, prompts, block_size: int, max_new_tokens: int) -> dict:
    """Teacher-forced: float32 drives one-commit decoding (`t32`, the embedded target), float64 scores each block's
    states in one pass."""
    t64 = spot.load_target(dtype="float64")
    mask, eos = t32.mask_id, t32.eos_id
    commits = other = other_eos = eos_commits = blocks = replay_differs = 0
    for i, prompt in enumerate(prompts):
        ref = spot.generate(t32, [prompt], "standard", max_new_tokens=max_new_tokens, block_size=block_size,
                            eos_id=None)
        s32 = t32.start([prompt], max_new_tokens, block_size)
        s64 = t64.start([prompt], max_new_tokens, block_size)
        first = s32.initial_block(block_size)
        for blk in range(ref.orders.shape[1]):
            state = first[0].clone() if blk == 0 and first is not None else torch.full((block_size,), mask)
            states, order, tokens = [], [], []
            while (state == mask).any():
                out = _score(s32.score(state[None, None])[0, 0], state == mask)
                pos = int(out.commit_pos)
                states.append(state.clone())
                order.append(pos)
                tokens.append(int(out.tokens[pos]))
                state[pos] = out.tokens[pos]
            done = ref.orders[0, blk][ref.orders[0, blk] >= 0].tolist()
            blocks += 1
            # the replay scores one node through `Session.score`, generate's pass through its own path: the same
            # float32 operations up to reduction order, so a near-tie may fall the other way
            replay_differs += bool(done) and done != order[-len(done):]
            stacked = torch.stack(states)
            alt = _score(s64.score(stacked[None])[0], stacked == mask).commit_pos.tolist()
            for pos, tok, a in zip(order, tokens, alt):
                commits += 1
                eos_commits += tok == eos
                other += a != pos
                other_eos += a != pos and tok == eos
            s32.append(state[None])
            s64.append(state[None])
    return {"prompts": len(prompts), "commits": commits, "eos_commits": eos_commits,
            "float64_commits_another_position": other, "of_which_eos": other_eos, "share": other / max(commits, 1),
            "blocks": blocks, "blocks_whose_replay_order_differs_from_generate": replay_differs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="a folder of trajectory shards of one block size (rule one, T 0; required)")
    ap.add_argument("--drafter", default="default")
    ap.add_argument("--heldout-every", type=int, default=8)
    ap.add_argument("--depths", default="0,1")
    ap.add_argument("--float64-prompts", type=int, default=0)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.json:
        check_writable(a.json)
    paths = sorted(glob.glob(str(Path(a.data) / f"traj-B{a.block_size}-T0*.safetensors"))) if a.data else []
    if not paths:  # after --json's check, as every bench script's: a bad path is refused before anything runs
        raise SystemExit(f"--data: no traj-B{a.block_size}-T0 shards in {a.data}")
    data = Trajectories.load(paths, a.heldout_every)
    target = spot.load_target()
    t0 = time.time()
    report = {"data": [Path(p).name for p in paths], "drafter": a.drafter,
              "depths": drafter_margins(data, load_order_model(drafter_directory(a.drafter)),
                                        [int(d) for d in a.depths.split(",")], target.eos_id)}
    for d, r in report["depths"].items():
        print(f"depth {d}: {r['examples']} held-out examples, top-1 {r['top1']:.3f}, top-4 {r['top4']:.3f}, "
              f"<|eos|> commits {r['eos_share']:.1%}; near-ties (margin < {NEAR_TIE:g}) {r['near_tie_share']:.1%}"
              + ("" if r["near_tie_positions_mean"] is None else
                 f", with {r['near_tie_positions_mean']:.1f} positions in the band on average and 1 - top "
                 f"confidence {r['near_tie_one_minus_top_median']:.2g} at the median"))
        for b in r["buckets"]:
            if b["examples"]:
                print(f"  margin [{b['margin'][0]:g}, {b['margin'][1]:g}): {b['share']:6.1%} of examples, top-1 "
                      f"{b['top1']:.3f}, top-4 {b['top4']:.3f}, {b['share_of_misses']:6.1%} of misses")
    if a.float64_prompts:
        prompts = [target.tokenizer.encode(t) for t in held_out_prompts(a.float64_prompts)]
        f64 = report["float64"] = float64_agreement(target, prompts, a.block_size, a.max_new_tokens)
        print(f"float64 on float32's states: {f64['float64_commits_another_position']} of {f64['commits']} commits "
              f"({f64['share']:.2%}) go to another position ({f64['of_which_eos']} of them <|eos|>); "
              f"{f64['eos_commits']} commits are <|eos|>; the float32 replay's order differs from generate's in "
              f"{f64['blocks_whose_replay_order_differs_from_generate']} of {f64['blocks']} blocks")
    report["seconds"] = time.time() - t0
    if a.json:
        write_json(report, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
