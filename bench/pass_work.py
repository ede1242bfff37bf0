"""What each per-pass saving is worth, in one process: the decoder as it is against the same decoder with one saving
undone (or all of them), on the same prompts and seeds, on the token-causal target ("causal") and its drafter.

    OMP_NUM_THREADS=1 python bench/pass_work.py --num-prompts 4 --max-new-tokens 64 --budgets 2,16 \
        --json bench/results/pass-work.json

Savings (docs/CHANGELOG.md): `mask` (the session builds only the mask block the model reads, not the dense
[b, 1, Q, K] tree mask), `head` (the LM head projects only the nodes the scorer reaches, not every node),
`drafter` (the drafter's stale-only inputs once per pass, not once per depth and node), `prune` (the drafter is
asked only for frontier nodes with a child that could still be kept). Variants run interleaved,
`--repeats` rounds, so that drift on a shared machine falls on all alike; reported per budget and variant: seconds
(CPU time of the process, summed over rounds: less sensitive than wall clock to other jobs on the machine), its
ratio to the current decoder's, stage seconds (wall clock), passes, and whether the tokens equal the
current decoder's (they must: every saving is exact).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections import Counter

import spot_kernels
import torch

import spot
import spot.round
from spot.lab.bench import check_writable, write_json
from spot.order_model import LearnedDrafter, OrderModel
from spot.prompts import held_out_prompts
from spot.target import ModelSession, NodeLogits


@contextlib.contextmanager
def dense_mask():
    """The session builds the whole [b, 1, Q, K] tree mask every pass, as before (the model reads one block)."""
    real = spot_kernels.tree_mask

    def whole(key_start, prefix_len, num_new, num_nodes, block_size, backend="auto"):
        return real(key_start, prefix_len=prefix_len, num_new=num_new, num_nodes=current["n"], block_size=block_size,
                    backend=backend)

    current = {"n": 0}
    real_pass = ModelSession._pass

    def pass_(self, nodes, head):
        current["n"] = nodes.shape[1]
        if not any(len(p) for p in self.pending):  # before: a mask was built even when no token was appended
            spot_kernels.tree_mask(self.key_start, prefix_len=self.cache.capacity, num_new=0, num_nodes=nodes.shape[1],
                                   block_size=nodes.shape[2])
        return real_pass(self, nodes, head)

    spot_kernels.tree_mask, ModelSession._pass = whole, pass_
    try:
        yield
    finally:
        spot_kernels.tree_mask, ModelSession._pass = real, real_pass


@contextlib.contextmanager
def every_frontier_node():
    """The tree grows by asking the drafter for every frontier node, as before, even those none of whose children
    could be kept (the same tree)."""
    real = spot.round.grow_tree
    spot.round.grow_tree = functools.partial(real, prune=False)
    try:
        yield
    finally:
        spot.round.grow_tree = real


@contextlib.contextmanager
def full_head():
    """The LM head projects every node of the pass, as before."""
    real = ModelSession.score_lazily
    ModelSession.score_lazily = lambda self, nodes: NodeLogits(self.score(nodes))
    try:
        yield
    finally:
        ModelSession.score_lazily = real


class _PerNode(OrderModel):
    """The shipped order model called per node (its forward overridden), as before the per-pass inputs."""

    def forward(self, *args):
        return super().forward(*args)


def per_node_drafter(drafter: LearnedDrafter) -> LearnedDrafter:
    model = _PerNode(drafter.model.cfg)
    model.load_state_dict(drafter.model.state_dict())
    return LearnedDrafter(model)


VARIANTS = ("current", "mask", "head", "drafter", "prune", "all")  # "mask": that saving undone; "all": every one undone


def run(target, drafter, old_drafter, prompt, row, variant, settings):
    """One prompt decoded by one variant: (tokens, passes, stage seconds, CPU seconds of this process)."""
    with contextlib.ExitStack() as stack:
        if variant in ("mask", "all"):
            stack.enter_context(dense_mask())
        if variant in ("head", "all"):
            stack.enter_context(full_head())
        if variant in ("prune", "all"):
            stack.enter_context(every_frontier_node())
        d = old_drafter if variant in ("drafter", "all") else drafter
        t0 = time.process_time()
        out = spot.generate(target, [prompt], "spot", drafter=d, rows=[row], **settings)
        return out.tokens, out.stats.target_passes, out.stats.stage_seconds, time.process_time() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--budgets", default="2,16")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.json:
        check_writable(a.json)  # before the run, not after it
    torch.manual_seed(0)
    # the causal target: undoing `mask` builds the dense token-causal tree mask, which SDAR's attention would extend
    target, drafter = spot.load_target("causal"), spot.load_drafter("causal")
    old_drafter = per_node_drafter(drafter)
    prompts = [target.tokenizer.encode(t) for t in held_out_prompts(a.num_prompts)]
    report = {"settings": vars(a), "budgets": {}}
    spot.generate(target, prompts[:1], "spot", drafter=drafter, max_new_tokens=8, block_size=8)  # warm-up
    for budget in map(int, a.budgets.split(",")):
        settings = dict(max_new_tokens=a.max_new_tokens, block_size=a.block_size, temperature=a.temperature,
                        budget=budget, eos_id=None)
        res = {v: {"seconds": 0.0, "stage_seconds": Counter(), "target_passes": 0, "tokens": []} for v in VARIANTS}
        for rnd in range(a.repeats):
            for i, prompt in enumerate(prompts):
                for v in VARIANTS:  # interleaved per prompt: drift falls on every variant alike
                    tokens, passes, stages, seconds = run(target, drafter, old_drafter, prompt, i, v, settings)
                    r = res[v]
                    r["seconds"] += seconds
                    r["stage_seconds"].update(stages)
                    if rnd == 0:
                        r["target_passes"] += passes
                        r["tokens"] += tokens
        ref = res["current"]["tokens"]
        for r in res.values():
            r["exact_vs_current"] = r.pop("tokens") == ref
        base = res["current"]["seconds"]
        print(f"budget {budget}")
        for v, r in res.items():
            r["ratio_to_current"] = r["seconds"] / base
            r["stage_seconds"] = dict(r["stage_seconds"])
            st = r["stage_seconds"]
            print(f"  {v:<8} {r['seconds']:7.2f} s  x{r['ratio_to_current']:.3f}  passes {r['target_passes']:>5}  "
                  f"draft {st['draft']:6.2f}  target {st['target']:6.2f}  verify {st['verify']:6.2f}  "
                  f"exact {r['exact_vs_current']}")
        report["budgets"][budget] = res
    if a.json:
        write_json(report, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
