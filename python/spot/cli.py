"""`spot` / `python -m spot`: generate text, or benchmark decoding methods against each other."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .bench import format_report, random_prompts, run_bench, warm_up, write_json
from .decode import CONFIDENCE_KINDS, METHODS, generate
from .loading import DTYPES, load_target


def _target_args(p: argparse.ArgumentParser) -> None:
    """Which target to load, where, and the noise seed: shared by every command that runs the target."""
    p.add_argument("--target", default="default", help="'default' (embedded), 'random', or a weights directory")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)


def _drafter_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", default="default",
                   help="order drafter of method spot: 'default' (shipped) or a directory from `spot train-drafter`")


def _common(p: argparse.ArgumentParser) -> None:
    _target_args(p)
    _drafter_arg(p)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--budget", default="auto", help="tree node budget per verification pass (root included); "
                   "'auto': the one `spot tune` measured best for this device and block size")
    p.add_argument("--width", type=int, default=4, help="frontier nodes expanded per depth")
    p.add_argument("--branch", type=int, default=4, help="children drafted per frontier node")
    p.add_argument("--confidence", default="prob", choices=CONFIDENCE_KINDS)
    p.add_argument("--methods", default="standard,confidence,spot", help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--ignore-eos", action="store_true", help="decode max-new-tokens even past end-of-sequence")


def _methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise SystemExit(f"--methods: unknown {bad or 'empty'}; choose from {','.join(METHODS)}")
    return methods


def _budget(a) -> int:
    if a.budget == "auto":
        from .cost_model import default_budget
        return default_budget(a.device, a.block_size)
    try:
        return int(a.budget)
    except ValueError:
        raise SystemExit(f"--budget: expected an integer or 'auto', got {a.budget!r}") from None


def _settings(a) -> dict:
    return dict(max_new_tokens=a.max_new_tokens, block_size=a.block_size, temperature=a.temperature, seed=a.seed,
                budget=_budget(a), width=a.width, branch=a.branch, confidence=a.confidence,
                eos_id=None if a.ignore_eos else -1)


def _drafter(methods, a):
    if "spot" not in methods:
        return None
    from . import load_drafter
    return load_drafter(a.drafter, device=a.device)


BENCH_PROMPTS = 8  # `spot bench` without --num-prompts or --prompts-file


def _prompts(a, target) -> list[list[int]]:
    """--prompts-file (all its lines unless --num-prompts), --prompt, the shipped held-out prompts, or random ids."""
    tok = getattr(target, "tokenizer", None)
    count = getattr(a, "num_prompts", 1)
    texts = None
    if getattr(a, "prompts_file", None):
        with open(a.prompts_file) as f:
            texts = [line.rstrip("\n").replace("\\n", "\n") for line in f if line.strip()]
    elif getattr(a, "prompt", None) is not None:
        texts = [a.prompt]
    if texts is not None:
        if tok is None:
            raise SystemExit("this target has no tokenizer: use --prompt-len for random token prompts")
        return [tok.encode(t) for t in texts][:count]
    held_out = _held_out_prompts(target, count or BENCH_PROMPTS)
    if held_out:
        return held_out
    return random_prompts(target.vocab_size, count or BENCH_PROMPTS, a.prompt_len, a.seed)


def _held_out_prompts(target, count: int):
    """Held-out prompts shipped with the package, when the target has the shipped tokenizer."""
    try:
        from .prompts import held_out_prompts
    except ImportError:
        return None
    if getattr(target, "tokenizer", None) is None:
        return None
    texts = held_out_prompts(count)
    return [target.tokenizer.encode(t) for t in texts] or None


def cmd_generate(a) -> int:
    target = load_target(a.target, dtype=a.dtype, device=a.device, seed=a.seed)
    methods = _methods(a.methods)
    prompts = _prompts(a, target)[:1]
    tok = target.tokenizer
    drafter = _drafter(methods, a)
    if tok is not None:
        print(f"--- prompt ---\n{tok.decode(prompts[0])}")
    warm_up(target, prompts[0])
    rows = []
    for i, method in enumerate(methods):
        out = generate(target, prompts, method, drafter=drafter if method == "spot" else None, **_settings(a))
        if i == 0:
            text = tok.decode(out.tokens[0]) if tok is not None else " ".join(map(str, out.tokens[0]))
            print(f"--- generated ({method}) ---\n{text}\n---")
        s = out.stats
        rows.append(f"{method:<11} passes {s.target_passes:>5}  tokens {s.generated_tokens:>5}  "
                    f"passes/token {s.passes_per_token:.3f}  tokens/s {s.tokens_per_second:8.1f}")
    print("\n".join(rows))
    return 0


def cmd_bench(a) -> int:
    target = load_target(a.target, dtype=a.dtype, device=a.device, seed=a.seed)
    methods = _methods(a.methods)
    prompts = _prompts(a, target)
    report = run_bench(target, prompts, methods, batch_size=a.batch_size, drafter=_drafter(methods, a),
                       progress=not a.quiet, **_settings(a))
    report["settings"]["target"] = a.target
    if "spot" in methods:
        report["settings"]["drafter"] = a.drafter
    print(format_report(report))
    if a.json:
        write_json(report, a.json)
        print(f"wrote {a.json}")
    return 0


def cmd_train_target(a) -> int:
    from .loading import WEIGHTS_DIR
    from .model import ModelConfig
    from .tokenizer import encode_documents, load_tokenizer
    from .train_target import TrainConfig, train

    tok = load_tokenizer()
    train_tokens = encode_documents(a.corpus, tok, "train")
    heldout_tokens = encode_documents(a.corpus, tok, "heldout")
    print(f"corpus: {train_tokens.size} train tokens, {heldout_tokens.size} held-out tokens")
    mcfg = ModelConfig(vocab_size=tok.vocab_size, d_model=a.d_model, n_layers=a.layers, n_heads=a.heads,
                       n_kv_heads=a.kv_heads, d_ff=a.d_ff, pad_id=tok.pad_id, eos_id=tok.eos_id, mask_id=tok.mask_id)
    cfg = TrainConfig(seq_len=a.seq_len, batch_size=a.batch_size, steps=a.steps, lr=a.lr, seed=a.seed,
                      minutes=a.minutes, eval_every=a.eval_every)
    result = train(mcfg, cfg, train_tokens, heldout_tokens, a.out, export_dir=a.export or WEIGHTS_DIR)
    print(f"trained {result['step']} steps, {result['parameters']} parameters; exported to {a.export or WEIGHTS_DIR}")
    return 0


def cmd_collect(a) -> int:
    from .collect import collect
    from .prompts import training_prompts

    target = load_target(a.target, dtype=a.dtype, device=a.device, seed=a.seed)
    if target.tokenizer is None:
        raise SystemExit("collect needs a target with the shipped tokenizer (prompts come from the corpus)")
    skip = _ints(a.skip_prompts) if a.skip_prompts else ()
    texts, first_row = training_prompts(a.corpus, a.num_prompts, skip, a.skip_fresh)
    prompts = [target.tokenizer.encode(t) for t in texts]
    print(f"collect: {len(prompts)} training prompts (rows from {first_row}) -> {a.out}")
    paths = collect(target, prompts, a.out, block_sizes=_ints(a.block_sizes), temperatures=_floats(a.temperatures),
                    max_new_tokens=a.max_new_tokens, batch_size=a.batch_size, seed=a.seed, first_row=first_row,
                    progress=not a.quiet)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _load_trajectories(a) -> list:
    """Every shard in a.data (only a.block_sizes when given); the runs of one (block size, temperature) pair,
    traj-B{B}-T{T}[-r{R}], load as one shard."""
    import glob

    from .collect import pair_name
    from .train_drafter import Trajectories

    paths = sorted(glob.glob(str(Path(a.data) / "traj-*.safetensors")))
    if a.block_sizes:
        paths = [p for p in paths if any(f"-B{b}-" in p for b in _ints(a.block_sizes))]
    if not paths:
        raise SystemExit(f"no trajectories in {a.data}: run `spot collect` first")
    runs: dict[str, list[str]] = {}
    for p in paths:
        runs.setdefault(pair_name(p), []).append(p)
    return [Trajectories.load(group, a.heldout_every) for group in runs.values()]


def cmd_evaluate_drafter(a) -> int:
    from .order_model import load_order_model
    from .train_drafter import evaluate, format_evaluation

    model = load_order_model(a.drafter) if a.drafter else load_order_model()
    heldout = a.split == "heldout"
    for shard in _load_trajectories(a):
        ev = evaluate(model, shard, heldout=heldout)
        print(f"{shard.name} ({'held-out' if heldout else 'training'} blocks): " + format_evaluation(ev))
    return 0


def cmd_train_drafter(a) -> int:
    from .order_model import WEIGHTS_DIR, OrderModelConfig, load_order_model, with_resampled_inputs, with_token_inputs
    from .train_drafter import DrafterTrainConfig, train_drafter

    shards = _load_trajectories(a)
    cfg = DrafterTrainConfig(steps=a.steps, batch_size=a.batch_size, lr=a.lr, max_depth=a.max_depth,
                             heldout_every=a.heldout_every, eval_every=a.eval_every, seed=a.seed,
                             soft_weight=a.soft_weight, soft_temperature=a.soft_temperature)
    out = a.out or WEIGHTS_DIR
    init = load_order_model(a.init) if a.init else None
    if init is not None and a.resampled:
        init = with_resampled_inputs(init)
    if init is not None and a.token_buckets:
        init = with_token_inputs(init, a.token_buckets)
    model_cfg = OrderModelConfig(resampled=a.resampled, token_buckets=a.token_buckets)
    result = train_drafter(shards, cfg, out, init=init, model_cfg=model_cfg,
                           progress=not a.quiet)
    print(f"trained {cfg.steps} steps, {result['parameters']} parameters; wrote {out}")
    return 0


def cmd_tune(a) -> int:
    from .cost_model import BUDGETS_FILE, save_tuning, tune

    from .prompts import TUNE_POOL, build_prompts

    target = load_target(a.target, dtype=a.dtype, device=a.device, seed=a.seed)
    # training-split prompts the drafter never saw (collect takes the first ones), none of the benchmark's
    texts = [p["text"] for p in build_prompts(a.corpus, TUNE_POOL, split="train")[-a.num_prompts:]]
    prompts = [target.tokenizer.encode(t) for t in texts]
    drafter = _drafter(["spot"], a)
    for B in _ints(a.block_sizes):
        print(f"tune: block size {B}, {len(prompts)} prompts, {a.max_new_tokens} new tokens, device {a.device}")
        result = tune(target, drafter, prompts, block_size=B, budgets=_ints(a.budgets),
                      max_new_tokens=a.max_new_tokens, temperature=a.temperature, width=a.width, branch=a.branch)
        print(f"chosen budget for B={B}: {result['budget']}")
        if not a.dry_run:
            save_tuning(result, a.device, B, a.out or BUDGETS_FILE)
    return 0


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spot", description="Lossless speculative decoding for diffusion LMs.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt and compare methods")
    _common(g)
    g.add_argument("--prompt", help="prompt text (default: a held-out prompt, or random ids for --target random)")
    g.add_argument("--prompt-len", type=int, default=16, help="length of random token prompts")
    g.set_defaults(func=cmd_generate)
    b = sub.add_parser("bench", help="run methods on the same prompts and seeds; write JSON")
    _common(b)
    b.set_defaults(methods="standard,confidence,spot,oracle")
    b.add_argument("--prompts-file", help="one prompt per line (\\n for newlines)")
    b.add_argument("--num-prompts", type=int,
                   help=f"prompts to decode (default: every line of --prompts-file, else {BENCH_PROMPTS})")
    b.add_argument("--prompt-len", type=int, default=16, help="length of random token prompts")
    b.add_argument("--batch-size", type=int, default=1)
    b.add_argument("--json", help="write the report here")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=cmd_bench)
    c = sub.add_parser("collect", help="record standard-decoding trajectories for training the order drafter")
    _target_args(c)
    c.add_argument("--corpus", default=".cache/corpus", help="built by `python -m spot.corpus --out DIR`")
    c.add_argument("--out", default=".cache/trajectories")
    c.add_argument("--num-prompts", type=int, default=256, help="training-split prompts to decode")
    c.add_argument("--skip-prompts", default="",
                   help="comma-separated --num-prompts of earlier runs: collect further prompts, none of theirs")
    c.add_argument("--skip-fresh", type=int, default=0,
                   help="with --skip-prompts: the --num-prompts of earlier runs made with the same --skip-prompts")
    c.add_argument("--block-sizes", default="16,32")
    c.add_argument("--temperatures", default="0,1")
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--batch-size", type=int, default=16)
    c.add_argument("--quiet", action="store_true")
    c.set_defaults(func=cmd_collect)
    d = sub.add_parser("train-drafter", help="train the order drafter on collected trajectories")
    d.add_argument("--data", default=".cache/traj", help="the --out of `spot collect`")
    d.add_argument("--out", help="where the weights go (default: the package's weights/)")
    d.add_argument("--block-sizes", default="", help="only these block sizes (default: every shard)")
    d.add_argument("--init", help="continue from the drafter in this directory")
    d.add_argument("--steps", type=int, default=3000)
    d.add_argument("--batch-size", type=int, default=256)
    d.add_argument("--lr", type=float, default=2e-3)
    d.add_argument("--max-depth", type=int, default=7)
    d.add_argument("--heldout-every", type=int, default=8)
    d.add_argument("--eval-every", type=int, default=500)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--soft-weight", type=float, default=0.0,
                   help="weight of the node pass's confidence ranking as a soft target (0: the commit only)")
    d.add_argument("--soft-temperature", type=float, default=0.25)
    d.add_argument("--resampled", action="store_true",
                   help="the drafter also reads each position's stale top-K re-sampled with the node step's noise "
                        "(with --init: widens that drafter's inputs)")
    d.add_argument("--token-buckets", type=int, default=0,
                   help="> 0: the drafter also reads an embedding of each position's stale top-1 token id, ids past "
                        "this many buckets sharing one (with --init: widens that drafter's inputs)")
    d.add_argument("--quiet", action="store_true")
    d.set_defaults(func=cmd_train_drafter)
    e = sub.add_parser("evaluate-drafter", help="next-commit accuracy of a drafter on collected trajectories")
    e.add_argument("--drafter", help="directory of the drafter (default: the shipped one)")
    e.add_argument("--data", default=".cache/traj", help="the --out of `spot collect`")
    e.add_argument("--block-sizes", default="", help="only these block sizes (default: every shard)")
    e.add_argument("--heldout-every", type=int, default=8)
    e.add_argument("--split", choices=("heldout", "train"), default="heldout")
    e.set_defaults(func=cmd_evaluate_drafter)
    u = sub.add_parser("tune", help="measure the cost model and store the best tree budget for this device")
    _target_args(u)
    _drafter_arg(u)
    u.add_argument("--block-sizes", default="16,32")
    u.add_argument("--budgets", default="1,2,4,8,16,32")
    u.add_argument("--num-prompts", type=int, default=4)
    u.add_argument("--corpus", default=".cache/corpus", help="built by `python -m spot.corpus --out DIR`")
    u.add_argument("--max-new-tokens", type=int, default=64)
    u.add_argument("--temperature", type=float, default=0.0)
    u.add_argument("--width", type=int, default=4)
    u.add_argument("--branch", type=int, default=4)
    u.add_argument("--out", help="budgets file (default: the package's weights/budgets.json)")
    u.add_argument("--dry-run", action="store_true", help="print the choice, write nothing")
    u.set_defaults(func=cmd_tune)
    t = sub.add_parser("train-target", help="train the embedded target on the offline corpus (resumable)")
    t.add_argument("--corpus", default=".cache/corpus", help="built by `python -m spot.corpus --out DIR`")
    t.add_argument("--out", default=".cache/train-target", help="checkpoint directory (resumes from it)")
    t.add_argument("--export", help="where the final weights go (default: the package's weights/)")
    t.add_argument("--steps", type=int, default=1300)
    t.add_argument("--minutes", type=float, default=0.0, help="stop and export after this long (0: no limit)")
    t.add_argument("--batch-size", type=int, default=16)
    t.add_argument("--seq-len", type=int, default=256)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--eval-every", type=int, default=200)
    t.add_argument("--d-model", type=int, default=256)
    t.add_argument("--layers", type=int, default=5)
    t.add_argument("--heads", type=int, default=8)
    t.add_argument("--kv-heads", type=int, default=4)
    t.add_argument("--d-ff", type=int, default=704)
    t.set_defaults(func=cmd_train_target)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
