"""`spot build <step>`: the offline pipeline that builds the embedded target and its order drafter.

The steps chain through default paths under `.cache/` (relative to the working folder):

    corpus     -> .cache/corpus             training text (stdlib source, pydoc, word problems)
    tokenizer  -> .cache/tokenizer.json     byte-level BPE, and the corpus's token streams for `target`
    prompts    -> .cache/heldout_prompts.json
    target     -> .cache/target             weights (checkpoints in .cache/train-target; resumable)
    collect    -> .cache/trajectories       the target's standard-decoding trajectories
    drafter    -> .cache/drafter            the order drafter trained on them (resumable)
    evaluate      next-commit accuracy of a drafter on collected trajectories
    tune       -> .cache/budgets.json       the best tree budget per device and block size

Nothing writes into the installed package unless the output path says so AND --overwrite-shipped is given: every
write passes `spot.loading.check_output_path`, which the step runs under `overwriting_shipped` only then.
"""

from __future__ import annotations

import argparse
import glob
import math
from pathlib import Path


CACHE = Path(".cache")


def _ints(text: str, flag: str = "") -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated integers, got {text!r}") from None


def _floats(text: str, flag: str = "") -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise SystemExit(f"{flag}: expected finite numbers, got {text!r}")
    return values


def _output(path, a, flag: str = "--out", file: bool = False) -> Path:
    """`path`, checked before the step runs as every write will be (spot.files' output-path rule,
    `check_output_path`): refused when it lies inside the installed package and --overwrite-shipped was not given,
    when it is a device node, FIFO or socket, and when it is a folder where the step writes a `file` or a file
    where it writes a folder."""
    from ...files import check_output_path, overwriting_shipped, path_kind

    with overwriting_shipped(a.overwrite_shipped):
        try:
            checked = check_output_path(path)
            kind = path_kind(checked)
        except ValueError as e:
            raise SystemExit(f"{flag}: {e}") from None
    if kind == ("folder" if file else "regular file"):
        raise SystemExit(f"{flag}: {path}: is a {kind}, not a {'file' if file else 'folder'}")
    return checked


def _check(a, rules: dict) -> None:
    """Numeric flags checked before anything is loaded or created: {attribute: (kind, low)}, kind "int" (>= low)
    or "float" (finite, > low when low is not None); None values are unset."""
    for name, (kind, low) in rules.items():
        value = getattr(a, name, None)
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if kind == "int" and value < low:
            raise SystemExit(f"{flag}: expected >= {low}, got {value}")
        if kind == "float" and (not math.isfinite(value) or (low is not None and value <= low)):
            raise SystemExit(f"{flag}: expected a finite number{'' if low is None else f' > {low:g}'}, got {value}")


def _tokenizer(a):
    from ...tokenizer import load_tokenizer

    path = a.tokenizer if a.tokenizer else (CACHE / "tokenizer.json" if (CACHE / "tokenizer.json").is_file() else None)
    tok = load_tokenizer(path)
    print(f"tokenizer: {tok.path}")
    return tok


def cmd_corpus(a) -> int:
    from .corpus import build_corpus

    _check(a, {"total_mb": ("float", 0.0), "heldout_fraction": ("float", None), "max_files": ("int", 1),
               "max_chars": ("int", 1)})
    if not 0 <= a.heldout_fraction < 1:
        raise SystemExit(f"--heldout-fraction: expected a fraction in [0, 1), got {a.heldout_fraction}")
    mix = None
    if a.mix:
        try:
            mix = {k.strip(): float(v) for k, _, v in (part.partition("=") for part in a.mix.split(","))}
        except ValueError:
            raise SystemExit(f"--mix: expected source=share pairs, e.g. 'code=0.5,docs=0.1,math=0.4', got "
                             f"{a.mix!r}") from None
        if not mix or not all(math.isfinite(v) and v >= 0 for v in mix.values()) or not sum(mix.values()) > 0:
            raise SystemExit(f"--mix: expected finite shares >= 0, not all 0, got {a.mix!r}")
    build_corpus(_output(a.out, a), seed=a.seed, total_mb=a.total_mb, mix=mix, heldout_fraction=a.heldout_fraction,
                 max_files=a.max_files, max_chars=a.max_chars, verbose=True)
    return 0


def cmd_tokenizer(a) -> int:
    import time

    from ...tokenizer import load_tokenizer
    from .tokenizer import encode_documents, train_tokenizer

    out = _output(a.out, a, file=True)
    _check(a, {"vocab_size": ("int", 8), "min_frequency": ("int", 1)})
    if a.encode_only:
        tok = load_tokenizer(out)
    else:
        t0 = time.perf_counter()
        tok = train_tokenizer(a.corpus, vocab_size=a.vocab_size, min_frequency=a.min_frequency)
        tok.save(out)
        print(f"trained tokenizer (vocab {tok.vocab_size}) in {time.perf_counter() - t0:.1f}s -> {out} "
              f"({out.stat().st_size / 1e3:.0f} KB, sha256 {tok.fingerprint()[:16]})")
        tok = load_tokenizer(out)
    if a.encode or a.encode_only:
        for split in ("train", "heldout"):
            t0 = time.perf_counter()
            arr = encode_documents(a.corpus, tok, split)
            print(f"{split}: {arr.size} tokens ({time.perf_counter() - t0:.1f}s) -> "
                  f"{Path(a.corpus) / f'tokens_{split}.npy'}")
    return 0


def cmd_prompts(a) -> int:
    from .prompts import write_prompts

    _check(a, {"count": ("int", 1)})
    n = write_prompts(a.corpus, _output(a.out, a, file=True), a.count)
    print(f"wrote {n} prompts to {a.out}")
    return 0


def cmd_target(a) -> int:
    from ...model import ModelConfig
    from .tokenizer import encode_documents
    from .train_target import TrainConfig, train

    out, export = _output(a.out, a), _output(a.export, a, "--export")
    _check(a, {name: ("int", 1) for name in ("steps", "batch_size", "seq_len", "eval_every", "d_model", "layers",
                                              "heads", "kv_heads", "d_ff")})
    _check(a, {"lr": ("float", 0.0), "minutes": ("float", None)})
    if a.minutes < 0:
        raise SystemExit(f"--minutes: expected >= 0 (0: no limit), got {a.minutes}")
    tok = _tokenizer(a)
    train_tokens = encode_documents(a.corpus, tok, "train")
    heldout_tokens = encode_documents(a.corpus, tok, "heldout")
    print(f"corpus: {train_tokens.size} train tokens, {heldout_tokens.size} held-out tokens")
    mcfg = ModelConfig(vocab_size=tok.vocab_size, d_model=a.d_model, n_layers=a.layers, n_heads=a.heads,
                       n_kv_heads=a.kv_heads, d_ff=a.d_ff, pad_id=tok.pad_id, eos_id=tok.eos_id, mask_id=tok.mask_id,
                       prefix_attention=a.prefix_attention)
    cfg = TrainConfig(seq_len=a.seq_len, batch_size=a.batch_size, steps=a.steps, lr=a.lr, seed=a.seed,
                      minutes=a.minutes, eval_every=a.eval_every, precision=a.precision, layout=a.layout)
    result = train(mcfg, cfg, train_tokens, heldout_tokens, out, export_dir=export)
    print(f"trained {result['step']} steps, {result['parameters']} parameters; exported to {export}")
    return 0


def cmd_collect(a) -> int:
    from ...cli_args import read_prompts_file, target_from_args
    from .collect import check_collect_args, collect, shard_paths
    from .prompts import training_prompts

    out = _output(a.out, a)
    for name in ("num_prompts", "batch_size", "max_new_tokens"):  # refused before anything is loaded or created
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')}: expected >= 1, got {getattr(a, name)}")
    block_sizes, temperatures = _ints(a.block_sizes, "--block-sizes"), _floats(a.temperatures, "--temperatures")
    if not block_sizes or min(block_sizes) < 1:
        raise SystemExit(f"--block-sizes: expected positive sizes, got {a.block_sizes!r}")
    if not temperatures or min(temperatures) < 0:
        raise SystemExit(f"--temperatures: expected temperatures >= 0, got {a.temperatures!r}")
    skip = _ints(a.skip_prompts, "--skip-prompts") if a.skip_prompts and not a.prompts_file else ()
    try:  # the output names follow from the flags alone: refused before the target, corpus or prompts are read
        shard_paths(out, block_sizes, temperatures, a.rule, max(skip) + a.skip_fresh if skip else 0, a.overwrite)
    except (TypeError, ValueError) as e:
        raise SystemExit(f"collect: {e}") from None
    target = target_from_args(a)
    if target.tokenizer is None:
        raise SystemExit("collect needs a target with a tokenizer (prompts are text: the corpus or --prompts-file)")
    if a.prompts_file:
        if a.skip_prompts:
            raise SystemExit("--skip-prompts numbers corpus prompts; it does not apply to --prompts-file")
        texts, first_row = read_prompts_file(a.prompts_file)[:a.num_prompts], 0
    else:
        texts, first_row = training_prompts(a.corpus, a.num_prompts, skip, a.skip_fresh)
    prompts = [target.tokenizer.encode(t) for t in texts]
    if not prompts:
        raise SystemExit(f"collect: no training prompts in {a.prompts_file or a.corpus}")
    try:
        check_collect_args(target, prompts, block_sizes, temperatures, a.max_new_tokens, a.batch_size, a.seed, 32,
                           first_row, a.rule)
        shard_paths(out, block_sizes, temperatures, a.rule, first_row, a.overwrite)  # none twice, none replaced
    except (TypeError, ValueError) as e:
        raise SystemExit(f"collect: {e}") from None
    print(f"collect: {len(prompts)} training prompts (rows from {first_row}) -> {out}")
    paths = collect(target, prompts, out, block_sizes=block_sizes, temperatures=temperatures,
                    max_new_tokens=a.max_new_tokens, batch_size=a.batch_size, seed=a.seed, first_row=first_row,
                    progress=not a.quiet, rule=a.rule, overwrite=a.overwrite)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _load_trajectories(a) -> list:
    """Every shard in a.data (only a.block_sizes when given); the runs of one (block size, temperature) pair,
    traj-B{B}-T{T}[-r{R}], load as one shard."""
    from .collect import pair_name
    from .train_drafter import Trajectories

    paths = sorted(glob.glob(str(Path(a.data) / "traj-*.safetensors")))
    if a.block_sizes:
        paths = [p for p in paths if any(f"-B{b}-" in p for b in _ints(a.block_sizes, "--block-sizes"))]
    if not paths:
        raise SystemExit(f"--data {a.data}: no trajectories there (traj-*.safetensors): run `spot build collect` "
                         "first")
    runs: dict[str, list[str]] = {}
    for p in paths:
        runs.setdefault(pair_name(p), []).append(p)
    return [Trajectories.load(group, a.heldout_every) for group in runs.values()]


def cmd_evaluate(a) -> int:
    from ...order_model import drafter_directory, load_order_model
    from .train_drafter import evaluate, format_evaluation

    _check(a, {"heldout_every": ("int", 1)})
    model = load_order_model(drafter_directory(a.drafter))
    heldout = a.split == "heldout"
    for shard in _load_trajectories(a):
        ev = evaluate(model, shard, heldout=heldout)
        print(f"{shard.name} ({'held-out' if heldout else 'training'} blocks): " + format_evaluation(ev))
    return 0


def cmd_drafter(a) -> int:
    from ...order_model import (OrderModelConfig, drafter_directory, load_order_model, token_bucket_counts,
                               with_resampled_inputs, with_token_inputs, without_token_inputs)
    import torch

    from .train_drafter import DrafterTrainConfig, train_drafter

    out = _output(a.out, a)
    _check(a, {"steps": ("int", 1), "batch_size": ("int", 1), "max_depth": ("int", 1), "heldout_every": ("int", 1),
               "eval_every": ("int", 1), "checkpoint_every": ("int", 0), "token_buckets": ("int", 0),
               "seed": ("int", 0), "lr": ("float", 0.0), "soft_weight": ("float", None),
               "soft_temperature": ("float", 0.0)})
    if a.soft_weight < 0:
        raise SystemExit(f"--soft-weight: expected >= 0, got {a.soft_weight}")
    if a.portable and a.token_buckets:
        raise SystemExit("--portable: a portable drafter reads no token ids; drop --token-buckets")
    shards = _load_trajectories(a)
    cfg = DrafterTrainConfig(steps=a.steps, batch_size=a.batch_size, lr=a.lr, max_depth=a.max_depth,
                             heldout_every=a.heldout_every, eval_every=a.eval_every, seed=a.seed,
                             soft_weight=a.soft_weight, soft_temperature=a.soft_temperature,
                             checkpoint_every=a.checkpoint_every)
    init = load_order_model(drafter_directory(a.init)) if a.init else None
    if init is not None and a.portable and init.cfg.token_buckets:
        # start from what the init drafter computes on these trajectories' tokens on average, then learn without ids
        counts = [token_bucket_counts(s.top1_ids, init.cfg.token_buckets) for s in shards if s.top1_ids is not None]
        init = without_token_inputs(init, torch.stack(counts).sum(0) if counts else None)
        print(f"--portable: dropped the token inputs of {a.init}")
    if init is not None and a.resampled:
        init = with_resampled_inputs(init)
    if init is not None and a.token_buckets:
        init = with_token_inputs(init, a.token_buckets)
    model_cfg = OrderModelConfig(resampled=a.resampled, token_buckets=a.token_buckets)
    result = train_drafter(shards, cfg, out, init=init, model_cfg=model_cfg, progress=not a.quiet)
    print(f"trained {cfg.steps} steps, {result['parameters']} parameters; wrote {out}")
    return 0


def cmd_tune(a) -> int:
    from ... import load_drafter
    from ...loading import load_target
    from .prompts import TUNE_POOL, build_prompts
    from ...tree import WIDTH
    from .tune import MIN_GAIN, save_tuning, tune

    out = _output(a.out, a, file=True)
    _check(a, {"num_prompts": ("int", 1), "max_new_tokens": ("int", 1), "width": ("int", 1), "branch": ("int", 1),
               "min_gain": ("float", None)})
    block_sizes, temperatures = _ints(a.block_sizes, "--block-sizes"), _floats(a.temperatures, "--temperatures")
    budgets = _ints(a.budgets, "--budgets")
    for flag, values in (("--block-sizes", block_sizes), ("--budgets", budgets)):
        if not values or min(values) < 1:
            raise SystemExit(f"{flag}: expected integers >= 1, got {values}")
    if not temperatures or min(temperatures) < 0:
        raise SystemExit(f"--temperatures: expected temperatures >= 0, got {temperatures}")
    from ...cli_args import check_device

    check_device(a.device)
    target = load_target(a.target, dtype=a.dtype, device=a.device, seed=a.seed)
    # training-split prompts the drafter never saw (collect takes the first ones), none of the benchmark's
    texts = [p["text"] for p in build_prompts(a.corpus, TUNE_POOL, split="train")[-a.num_prompts:]]
    prompts = [target.tokenizer.encode(t) for t in texts]
    drafter = load_drafter(a.drafter, device=a.device)  # the shipped drafter unless --drafter says otherwise
    for B in block_sizes:
        for T in temperatures:
            print(f"tune: block size {B}, temperature {T:g}, {len(prompts)} prompts x {a.max_new_tokens} new tokens, "
                  f"device {a.device}")
            result = tune(target, drafter, prompts, block_size=B, budgets=budgets,
                          max_new_tokens=a.max_new_tokens, temperature=T,
                          width=WIDTH if a.width is None else a.width,
                          branch=a.branch,
                          min_gain=MIN_GAIN if a.min_gain is None else a.min_gain)
            print(f"chosen budget for B={B}, T={T:g}: {result['budget']}")
            if not a.dry_run:
                save_tuning(result, a.device, B, out, temperature=T)
    return 0


def _target_args(p: argparse.ArgumentParser) -> None:
    """The runtime CLI's target flags (a Hugging Face checkpoint directory with its --mask-token etc. included)."""
    from ...cli_args import add_target_args
    add_target_args(p)


def build_parser() -> argparse.ArgumentParser:
    from ...cli_args import Parser

    parser = Parser(prog="spot build", description=__doc__.split("\n\n")[0],
                    epilog="Every step's outputs default to .cache/ and chain into the next step.")
    sub = parser.add_subparsers(dest="step", required=True)
    corpus_help = "the --out of `spot build corpus`"

    s = sub.add_parser("corpus", help="build the deterministic offline training corpus")
    s.add_argument("--out", default=str(CACHE / "corpus"), help="train.jsonl, heldout.jsonl, manifest.json")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--total-mb", type=float, default=20.0)
    s.add_argument("--mix", help="source shares, e.g. 'code=0.5,docs=0.1,math=0.4'")
    s.add_argument("--heldout-fraction", type=float, default=0.03)
    s.add_argument("--max-files", type=int, help="read at most this many stdlib files")
    s.add_argument("--max-chars", type=int, default=3000, help="target maximum document length")
    s.set_defaults(func=cmd_corpus)

    s = sub.add_parser("tokenizer", help="train the byte-level BPE tokenizer on the corpus")
    s.add_argument("--corpus", default=str(CACHE / "corpus"), help=corpus_help)
    s.add_argument("--out", default=str(CACHE / "tokenizer.json"))
    s.add_argument("--vocab-size", type=int, default=4096)
    s.add_argument("--min-frequency", type=int, default=2)
    s.add_argument("--no-encode", dest="encode", action="store_false",
                   help="train only; do not write tokens_{train,heldout}.npy into the corpus for `spot build target`")
    s.add_argument("--encode-only", action="store_true", help="skip training; encode with the tokenizer at --out")
    s.set_defaults(func=cmd_tokenizer)

    s = sub.add_parser("prompts", help="cut the held-out prompts of the demo and benchmarks from the corpus")
    s.add_argument("--corpus", default=str(CACHE / "corpus"), help=corpus_help)
    s.add_argument("--count", type=int, default=64)
    s.add_argument("--out", default=str(CACHE / "heldout_prompts.json"))
    s.set_defaults(func=cmd_prompts)

    s = sub.add_parser("target", help="train the embedded target on the corpus (resumable)")
    s.add_argument("--corpus", default=str(CACHE / "corpus"), help=corpus_help)
    s.add_argument("--tokenizer", help="tokenizer JSON (default: .cache/tokenizer.json if built, else the shipped one)")
    s.add_argument("--out", default=str(CACHE / "train-target"), help="checkpoint directory (resumes from it)")
    s.add_argument("--export", default=str(CACHE / "target"), help="where the final weights go")
    s.add_argument("--steps", type=int, default=1300)
    s.add_argument("--minutes", type=float, default=0.0, help="stop and export after this long (0: no limit)")
    s.add_argument("--batch-size", type=int, default=16)
    s.add_argument("--seq-len", type=int, default=256)
    s.add_argument("--lr", type=float, default=3e-3)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--eval-every", type=int, default=200)
    s.add_argument("--d-model", type=int, default=256)
    s.add_argument("--layers", type=int, default=5)
    s.add_argument("--heads", type=int, default=8)
    s.add_argument("--kv-heads", type=int, default=4)
    s.add_argument("--d-ff", type=int, default=704)
    s.add_argument("--prefix-attention", choices=("block", "causal"), default="block",
                   help="how committed tokens see each other: SDAR's block-causal (default) or token-causal (the "
                        "4.7M-parameter first target)")
    s.add_argument("--precision", choices=("bfloat16", "float32"), default="float32",
                   help="bfloat16: forward and backward under CPU autocast, weights and optimizer in float32 (about 2x "
                        "faster per step where the CPU has AVX-512 bf16)")
    s.add_argument("--layout", choices=("stream", "padded"), default="stream",
                   help="padded: a window's text ends at its first <|eos|> and <|eos|> fills the rest, as "
                        "instruction tuning pads a response (the target learns to end its answer); stream: documents "
                        "run on after <|eos|>")
    s.set_defaults(func=cmd_target)

    s = sub.add_parser("collect", help="record standard-decoding trajectories for training the order drafter")
    _target_args(s)
    s.add_argument("--corpus", default=str(CACHE / "corpus"), help=corpus_help)
    s.add_argument("--prompts-file", help="decode these prompts (one per line, \\n for newlines) instead of the "
                   "corpus's training prompts: the way to collect on a target of another tokenizer")
    s.add_argument("--out", default=str(CACHE / "trajectories"))
    s.add_argument("--num-prompts", type=int, default=256, help="training-split prompts to decode")
    s.add_argument("--skip-prompts", default="",
                   help="comma-separated --num-prompts of earlier runs: collect further prompts, none of theirs")
    s.add_argument("--skip-fresh", type=int, default=0,
                   help="with --skip-prompts: the --num-prompts of earlier runs made with the same --skip-prompts")
    s.add_argument("--block-sizes", default="16,32")
    s.add_argument("--temperatures", default="0,1")
    s.add_argument("--max-new-tokens", type=int, default=256)
    s.add_argument("--batch-size", type=int, default=16)
    s.add_argument("--rule", default="one", help="the commit rule standard follows (docs/rules.md): the trajectories "
                   "are its steps, the shards named after it (traj-B{B}-T{T}-{rule}, the rule's canonical form)")
    s.add_argument("--overwrite", action="store_true",
                   help="replace shards already in --out (without it a shard that is there, another run's, is refused "
                        "before anything is decoded)")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_collect)

    data_help = "the --out of `spot build collect`"
    s = sub.add_parser("drafter", help="train the order drafter on collected trajectories")
    s.add_argument("--data", default=str(CACHE / "trajectories"), help=data_help)
    s.add_argument("--out", default=str(CACHE / "drafter"),
                   help="where the weights go (and the checkpoints: the same command again resumes an interrupted run)")
    s.add_argument("--block-sizes", default="", help="only these block sizes (default: every shard)")
    s.add_argument("--init", help="continue from this drafter: a directory, or 'default' / 'causal' / 'portable' "
                   "(shipped)")
    s.add_argument("--steps", type=int, default=3000)
    s.add_argument("--batch-size", type=int, default=256)
    s.add_argument("--lr", type=float, default=2e-3)
    s.add_argument("--max-depth", type=int, default=7)
    s.add_argument("--heldout-every", type=int, default=8)
    s.add_argument("--eval-every", type=int, default=500)
    s.add_argument("--checkpoint-every", type=int, default=250, help="steps between checkpoints (0: none)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--soft-weight", type=float, default=0.0,
                   help="weight of the node pass's confidence ranking as a soft target (0: the commit only)")
    s.add_argument("--soft-temperature", type=float, default=0.25)
    s.add_argument("--resampled", action="store_true",
                   help="the drafter also reads each position's stale top-K re-sampled with the node step's noise "
                        "(with --init: widens that drafter's inputs)")
    s.add_argument("--token-buckets", type=int, default=0,
                   help="> 0: the drafter also reads an embedding of each position's stale top-1 token id, ids past "
                        "this many buckets sharing one (with --init: widens that drafter's inputs)")
    s.add_argument("--portable", action="store_true",
                   help="a drafter that reads no token ids, for any vocabulary (with --init of a token-bucket "
                        "drafter: drops its token inputs, folding their average over these trajectories into a bias)")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_drafter)

    s = sub.add_parser("evaluate", help="next-commit accuracy of a drafter on collected trajectories")
    s.add_argument("--drafter", default=str(CACHE / "drafter"),
                   help="drafter directory (default: the --out of `spot build drafter`; 'default', 'portable': the "
                        "shipped ones)")
    s.add_argument("--data", default=str(CACHE / "trajectories"), help=data_help)
    s.add_argument("--block-sizes", default="", help="only these block sizes (default: every shard)")
    s.add_argument("--heldout-every", type=int, default=8)
    s.add_argument("--split", choices=("heldout", "train"), default="heldout")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("tune", help="measure the cost model and store the best tree budget for this device")
    _target_args(s)
    s.add_argument("--drafter", default="default", help="'default' (shipped) or a directory from `spot build drafter`")
    s.add_argument("--block-sizes", default="16,32")
    s.add_argument("--budgets", default="1,2,4,8,16", help="candidate budgets (1: the root alone, standard's cost)")
    s.add_argument("--num-prompts", type=int, default=8)
    s.add_argument("--corpus", default=str(CACHE / "corpus"), help=corpus_help)
    s.add_argument("--max-new-tokens", type=int, default=128)
    s.add_argument("--temperatures", default="0,1",
                   help="temperatures to tune at (--budget auto reads T = 0's for T = 0, the nearest positive one's "
                        "for T > 0)")
    s.add_argument("--width", type=int, help="frontier nodes per depth (default: the decoder's, spot.tree.WIDTH)")
    s.add_argument("--branch", type=int,
                   help="children per frontier node (default: the drafter's own, else spot.tree.BRANCH)")
    s.add_argument("--min-gain", type=float,
                   help="a tree is chosen only if it beats the root alone by this fraction on the wall and CPU clocks "
                        "(default 0.03, spot.lab.pipeline.tune.MIN_GAIN)")
    s.add_argument("--out", default=str(CACHE / "budgets.json"),
                   help="budgets table (the shipped one, read by --budget auto, is spot/weights/budgets.json)")
    s.add_argument("--dry-run", action="store_true", help="print the choice, write nothing")
    s.set_defaults(func=cmd_tune)
    for step in sub.choices.values():
        step.add_argument("--overwrite-shipped", action="store_true",
                          help="allow an output path inside the installed package (replaces shipped weights/assets)")
    return parser


def main(argv=None) -> int:
    """`spot build`'s entry: the step runs with writes into the installed package allowed only when it was given
    --overwrite-shipped. Errors reach `spot.cli.main`'s error path (one line, no traceback unless asked for)."""
    from ...loading import overwriting_shipped

    args = build_parser().parse_args(argv)
    with overwriting_shipped(args.overwrite_shipped):
        return args.func(args)
