"""Dispatched ops and host syncs per target pass, by stage, of one decode (docs/round.md).

    OMP_NUM_THREADS=1 python bench/round_count.py --methods standard,spot --temperatures 0,1 [--static both]
        [--prompt TEXT --prompt TEXT ...]   # several prompts: decoded as one batch
        [--rule steps:16]                   # over a commit rule (docs/rules.md)

The embedded target, the README's `def add(a, b):` prompt, 64 new tokens, block size 32, budget 16, spot with the
default drafter: issue 29's table, counted with spot.lab.dispatch_count.DispatchCounter (a warm-up decode first).
"""

from __future__ import annotations

import argparse

import spot
from spot.lab.bench import check_writable, write_json
from spot.lab.dispatch_count import STAGES, DispatchCounter, format_per_pass

# ops that only re-describe a tensor's memory: dispatched, but no kernel launch on a GPU
VIEW_OPS = frozenset(f"aten.{name}" for name in ("view", "_unsafe_view", "unsqueeze", "squeeze", "expand", "slice",
                                                 "select", "t", "permute", "transpose", "alias", "as_strided",
                                                 "detach"))


def count(target, drafter, prompts: list[list[int]], method: str, temperature: float, static: bool, budget: int = 16,
          block_size: int = 32, max_new_tokens: int = 64, rule: str = "one") -> dict:
    kw = dict(max_new_tokens=max_new_tokens, block_size=block_size, temperature=temperature, rule=rule,
              tree=spot.TreeSettings(budget=budget, static=static),
              **({"drafter": drafter} if method == "spot" else {}))
    spot.generate(target, prompts, method, **kw)
    with DispatchCounter() as counter:
        out = spot.generate(target, prompts, method, **kw)
    passes = out.stats.target_passes
    decoder = [s for s in STAGES if s != "target"]
    views = sum(k for s in decoder for op, k in counter.by_op[s].items() if op.rsplit(".", 1)[0] in VIEW_OPS)
    return {"passes": passes, "per_pass": counter.per_pass(passes), "decoder_views_per_pass": views / max(passes, 1),
            "top_ops": {s: counter.by_op[s].most_common(8) for s in STAGES}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="standard,spot")
    p.add_argument("--temperatures", default="0,1")
    p.add_argument("--budget", type=int, default=16)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--static", choices=("yes", "no", "both"), default="both",
                   help="the static round (fixed shapes), the CPU path (host-trimmed trees) or both")
    p.add_argument("--prompt", action="append", help="a prompt; repeat it for a batch (default: the README's "
                   "`def add(a, b):`)")
    p.add_argument("--rule", default="one", help="the commit rule (docs/rules.md)")
    p.add_argument("--target", choices=("default", "causal"), default="default",
                   help="a shipped target and the drafter shipped for it ('causal': the token-causal prefix)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.json:
        check_writable(args.json)  # before the run, not after it
    target, drafter = spot.load_target(args.target), spot.load_drafter(args.target)
    prompts = [target.tokenizer.encode(text) for text in args.prompt or ["def add(a, b):\n"]]
    report = []
    for method in args.methods.split(","):
        for t in (float(x) for x in args.temperatures.split(",")):
            for static in {"yes": (True,), "no": (False,), "both": (False, True)}[args.static]:
                r = count(target, drafter, prompts, method, t, static, args.budget, args.block_size, rule=args.rule)
                r.update(method=method, temperature=t, static=static, rule=args.rule)
                report.append(r)
                print(f"== {method} T={t} rule {args.rule} {'static' if static else 'cpu path'}: {r['passes']} passes")
                print(format_per_pass(r["per_pass"]))
                print(f"decoder views  {r['decoder_views_per_pass']:7.1f}   (of the decoder's ops: no kernel launch)")
    if args.json:
        write_json(report, args.json)


if __name__ == "__main__":
    main()
