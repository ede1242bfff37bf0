"""`spot` / `python -m spot`: generate text, benchmark decoding methods against each other, or `spot build ...`.

Every error of `spot` and `spot build` goes through `main`: one line naming the argument on stderr and exit code 1
(argparse's own errors: 2; SIGINT: `spot: error: interrupted (SIGINT)`, 130), the traceback only with --debug
(anywhere on the command line) or SPOT_DEBUG=1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys

from .cli_args import Parser, add_target_args, read_prompts_file, target_from_args
from .decode import (CONFIDENCE_KINDS, METHODS, _check_args, _tree_settings, confidence_drafter, generate,
                     resolve_rule)
from .drafters import default_top_k
from .rules import canonical_rule, parse_rule
from .settings import Batching, TreeSettings
from .tree import BRANCH, WIDTH, default_probes, tree_branch


def _drafter_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", default="default",
                   help="order drafter of method spot: 'default' or 'portable' (shipped) or a directory from "
                        "`spot build drafter`; NAME+online recalibrates drafter NAME online from the target's "
                        "commits (NAME+online-SET: feature set SET of spot.online.FEATURE_SETS, default rich2); "
                        "`bench` takes several, comma-separated (spot runs once per drafter)")


def _common(p: argparse.ArgumentParser) -> None:
    add_target_args(p)
    _drafter_arg(p)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--budget", default="auto", help="tree node budget per verification pass (root included); "
                   "'auto': the one `spot build tune` measured fastest for this device, block size and "
                   "temperature (T = 0 or T > 0)")
    p.add_argument("--width", type=int, default=WIDTH, help="frontier nodes expanded per depth")
    p.add_argument("--branch", type=int, help="children drafted per frontier node (default: the drafter's own "
                   f"tree_branch, else {BRANCH})")
    p.add_argument("--confidence", default="prob", choices=CONFIDENCE_KINDS)
    p.add_argument("--top-k", type=int, help="stale top-K kept per position, what trees draft tokens from (default: "
                   "512 for a commit rule other than one at T > 0, else 32; spot.drafters.default_top_k)")
    p.add_argument("--rule", default="one", help="the commit rule standard follows and the other methods speculate "
                   "(docs/rules.md): one, steps:N, threshold:T[,steps:N][,cmp:ge], factor:F, dream:N[,alg:A], or "
                   "family (a family target's own sampler's default)")
    p.add_argument("--methods", default="standard,confidence,spot",
                   help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--ignore-eos", action="store_true", help="decode max-new-tokens even past end-of-sequence")
    p.add_argument("--allow-partial-block", action="store_true",
                   help="accept --block-size > --max-new-tokens (the block is decoded whole, then cut)")


def _methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise SystemExit(f"--methods: unknown {bad or 'empty'}; choose from {','.join(METHODS)}")
    return methods


def _budget(a) -> int:
    if a.budget == "auto":
        from .budgets import default_budget
        return default_budget(a.device, a.block_size, a.temperature)
    try:
        return int(a.budget)
    except ValueError:
        raise SystemExit(f"--budget: expected an integer or 'auto', got {a.budget!r}") from None


def _settings(a) -> dict:
    """generate's keyword arguments from the flags (a bad --width or --branch ends the command, named)."""
    with _named_flags():
        tree = TreeSettings(width=a.width, branch=a.branch)
    return dict(max_new_tokens=a.max_new_tokens, block_size=a.block_size, temperature=a.temperature, seed=a.seed,
                budget=_budget(a), tree=tree, confidence=a.confidence, eos_id=None if a.ignore_eos else -1,
                allow_partial_block=a.allow_partial_block, rule=a.rule, top_k=a.top_k)


_FLAGS = ("max_new_tokens", "block_size", "temperature", "seed", "budget", "width", "branch", "confidence",
          "allow_partial_block", "rule", "top_k")


@contextlib.contextmanager
def _named_flags():
    """An argument error of `generate` (or of its TreeSettings) ends the command naming the flag instead."""
    try:
        yield
    except (TypeError, ValueError) as e:
        message = re.sub(r"\b(?:TreeSettings\.)?(" + "|".join(_FLAGS) + r")\b(=True)?",
                         lambda m: "--" + m[1].replace("_", "-"), str(e))
        raise SystemExit(message) from None


def _check_settings(target, prompts, settings: dict) -> None:
    """The decoding settings checked as `generate` will check them, before any decoding; errors name the flags."""
    s = dict(settings)
    with _named_flags():
        _, s["confidence"] = resolve_rule(s.pop("rule"), target, "standard", s["block_size"], s["confidence"])
        _check_args(target, prompts, "standard", tree=_tree_settings(s.pop("tree"), s.pop("budget")),
                    batching=Batching(), drafter=None, **s)


def _at_least(a, minimums: dict) -> None:
    """Integer flags checked before anything runs: {attribute: smallest allowed value} (None values are unset)."""
    for name, low in minimums.items():
        value = getattr(a, name, None)
        if value is not None and value < low:
            raise SystemExit(f"--{name.replace('_', '-')}: expected >= {low}, got {value}")


def _drafter(methods, a):
    if "spot" not in methods:
        return None
    from . import load_drafter
    names = [n.strip() for n in a.drafter.split(",") if n.strip()]
    if len(names) > 1:
        if a.command != "bench":
            raise SystemExit("--drafter: several drafters are for `spot bench`; give one")
        if len(set(names)) < len(names):
            raise SystemExit(f"--drafter: {a.drafter!r} names a drafter twice")
        return {name: load_drafter(name, device=a.device) for name in names}
    return load_drafter(a.drafter, device=a.device)


BENCH_PROMPTS = 8  # `spot bench` without --num-prompts or --prompts-file
BENCH_METHODS = "standard,confidence,spot,oracle"  # `spot bench` without --methods
PROMPT_LEN = 16  # random prompts' length without --prompt-len


def _prompts(a, target) -> list[list[int]]:
    """--prompts-file (all its lines unless --num-prompts), --prompt, the shipped held-out prompts, or random ids."""
    tok = getattr(target, "tokenizer", None)
    count = getattr(a, "num_prompts", 1)
    texts = None
    if getattr(a, "prompts_file", None):
        texts = read_prompts_file(a.prompts_file)
    elif getattr(a, "prompt", None) is not None:
        texts = [a.prompt]
    if texts is not None:
        if tok is None:
            raise SystemExit("this target has no tokenizer: use --prompt-len for random token prompts")
        return [tok.encode(t) for t in texts][:count]
    if a.prompt_len is None and a.target != "random":
        held_out = _held_out_prompts(target, count or BENCH_PROMPTS)
        if held_out:
            return held_out
    return _random_prompts(a, target, count or BENCH_PROMPTS)


def _random_prompts(a, target, count: int) -> list[list[int]]:
    """`count` random prompts of --prompt-len ids, none of them a special id of the target (spot.prompts). Sized
    before any is drawn: their own memory, and the room the target's sessions need for them (`Target.check_room`;
    a --block-size or --max-new-tokens out of range is left to the decoder's check, which names it)."""
    from .prompts import random_prompts, special_ids

    length = PROMPT_LEN if a.prompt_len is None else a.prompt_len
    if a.block_size >= 1 and a.max_new_tokens >= 0:
        try:
            target.check_room(length, min(count, getattr(a, "batch_size", 1)), a.max_new_tokens, a.block_size)
        except ValueError as e:
            message = str(e).removeprefix("max_new_tokens: ")
            raise SystemExit(f"--prompt-len {length}, --max-new-tokens {a.max_new_tokens}: {message}") from None
    try:
        return random_prompts(target.vocab_size, count, length, a.seed, special_ids(target))
    except ValueError as e:
        raise SystemExit(f"--prompt-len {length} x --num-prompts {count}: {e}") from None


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
    from .lab.bench import warm_up

    _at_least(a, {"prompt_len": 0})
    methods = _methods(a.methods)
    target = target_from_args(a)
    prompts = _prompts(a, target)[:1]
    settings = _settings(a)
    _check_rule(a.rule)
    if a.show_order and (a.rule == "family" or canonical_rule(a.rule) != "one"):
        raise SystemExit(f"--show-order: shows one commit per pass; it has no view of --rule {a.rule}'s steps yet")
    _check_settings(target, prompts, settings)
    tok = target.tokenizer
    drafter = _drafter(methods, a)
    if tok is not None:
        print(f"--- prompt ---\n{tok.decode(prompts[0])}")
    warm_up(target, prompts[0])
    rows = []
    for i, method in enumerate(methods):
        starts: dict[int, list[int]] = {}  # block -> commit step before each of its passes
        on_pass = (lambda blk, step, stale: starts.setdefault(int(blk[0]), []).append(int(step[0]))) \
            if a.show_order else None
        out = generate(target, prompts, method, drafter=drafter if method == "spot" else None, on_pass=on_pass,
                       **settings)
        if i == 0:
            text = tok.decode(out.tokens[0]) if tok is not None else " ".join(map(str, out.tokens[0]))
            print(f"--- generated ({method}) ---\n{text}\n---")
        if a.show_order:
            print(_commit_orders(method, out.orders[0].tolist(), starts))
        s = out.stats
        rows.append(f"{method:<11} passes {s.target_passes:>5}  tokens {s.generated_tokens:>5}  "
                    f"passes/token {s.passes_per_token:.3f}  tokens/s {s.tokens_per_second:8.1f}")
    print(_run_line(a, settings))
    print("\n".join(rows))
    if a.budget == "auto":
        root = ": the root alone, standard's own pass, so no method saves one" if settings["budget"] == 1 else ""
        print(f"budget {settings['budget']} (--budget auto: the fastest measured for {a.device}, B={a.block_size}, "
              f"T={'0' if a.temperature == 0 else '>0'}; python/spot/weights/budgets.json){root}")
        if settings["budget"] == 1 and any(m != "standard" for m in methods):
            print(_gpu_sized(target, prompts, methods, drafter, settings))
        print(WHY_BUDGETS)
    return 0


def _run_line(a, settings: dict) -> str:
    """What every method of `spot generate` ran with, above its table: the target, the commit rule, the budget."""
    rule = "one (one commit per pass)" if a.rule == "one" else a.rule
    auto = " (--budget auto)" if a.budget == "auto" else ""
    return (f"target {a.target}, rule {rule}, budget {settings['budget']}{auto}, block size {a.block_size}, "
            f"T {a.temperature:g}")


GPU_BUDGET = 16  # a tree a GPU scores in about one pass's time (spot demo's largest budget; docs/projection.md)


def _gpu_sized(target, prompts, methods, drafter, settings: dict) -> str:
    """Where --budget auto picks the root alone (a CPU: no method saves a pass), what a GPU-sized tree saves on this
    prompt: each tree method decoded again at GPU_BUDGET (the same tokens; only the passes differ)."""
    passes = [(m, generate(target, prompts, m, drafter=drafter if m == "spot" else None,
                           **{**settings, "budget": GPU_BUDGET}).stats.target_passes)
              for m in methods if m != "standard"]
    return (f"at budget {GPU_BUDGET} (a tree a GPU scores in about one pass's time) this prompt takes "
            + ", ".join(f"{m} {n} passes" for m, n in passes) + f"; --budget {GPU_BUDGET} runs it here")


WHY_BUDGETS = ("why: a CPU picks small trees and a GPU large ones: on a CPU a pass's cost grows about linearly with "
               "nodes x block tokens,\n     while on a GPU a memory-bound pass carries extra nodes nearly free")


def _commit_orders(method: str, orders: list[list[int]], starts: dict[int, list[int]]) -> str:
    """Every decoded block of one method: under each position, the pass (within the block) that committed it."""
    from .lab.plots import format_commit_order

    blocks = [format_commit_order(order, starts[blk], f"{method} block {blk}: ")
              for blk, order in enumerate(orders) if blk in starts]
    return "\n".join(blocks)


def cmd_demo(a) -> int:
    """What `make demo` shows (spot/lab/demo.py): pass reduction, commit order, CPU time, --budget auto, projection."""
    from .cli_args import check_device
    from .lab.demo import demo_screen

    check_device(a.device)
    _at_least(a, {"max_new_tokens": 1, "block_size": 1})
    if a.block_size > a.max_new_tokens:
        raise SystemExit(f"--block-size {a.block_size}: the demo decodes whole blocks, so it must not exceed "
                         f"--max-new-tokens ({a.max_new_tokens})")
    print(demo_screen(a.max_new_tokens, a.block_size, _int_list("--budgets", a.budgets), a.device))
    return 0


def cmd_bench(a) -> int:
    """Every argument is checked, and --json's folder written to, before anything is decoded."""
    from .lab.bench import check_writable, format_report, inexact_runs, run_bench, run_rules, write_json

    _at_least(a, {"num_prompts": 1, "batch_size": 1, "prompt_len": 0, "max_new_tokens": 1})
    methods = _methods(a.methods)
    budgets = _int_list("--budgets", a.budgets) if a.budgets else None
    if a.json:
        try:
            check_writable(a.json)
        except ValueError as e:
            raise SystemExit(f"--json {e}") from None
    rules = _rules(a.rules) if a.rules else None
    if a.plot:
        _check_plot_folder(a.plot, rules)
    target = target_from_args(a)
    prompts = _prompts(a, target)
    if not prompts:
        raise SystemExit("bench: no prompts to decode")
    if budgets:
        a.budget = str(budgets[0])  # --budgets replaces --budget
    settings = _settings(a)
    for rule in rules or [a.rule]:
        _check_rule(rule)
        for budget in budgets or [settings["budget"]]:
            _check_settings(target, prompts, {**settings, "budget": budget, "rule": rule})
    drafter = _drafter(methods, a)
    common = dict(batch_size=a.batch_size, drafter=drafter, progress=not a.quiet, budgets=budgets)
    if rules:
        settings.pop("rule")
        report = run_rules(target, prompts, methods, rules, **common, **settings)
    else:
        report = run_bench(target, prompts, methods, **common, **settings)
    if a.branch is None:  # each method grew its trees with its own branch: {method: branch} (per rule with rules)
        own = drafter if isinstance(drafter, dict) else {"": drafter}  # "spot[NAME]"[5:-1] = NAME, "spot"[5:-1] = ""

        def branches(rule) -> dict:
            def drafter_of(name):  # the drafter whose `branch` a method's trees take (decode.generate)
                if name.startswith("spot"):
                    return own.get(name[5:-1])
                if name == "confidence":
                    return confidence_drafter(resolve_rule(rule, target, name, settings["block_size"], "prob")[0])
                return None
            return {name: tree_branch(drafter_of(name)) for name in report["methods"] if name != "standard"}
        report["settings"]["branch"] = branches(rules[0] if rules else a.rule)
        for rule in rules or []:
            report["by_rule"][rule]["branch"] = branches(rule)
    for rule in rules or []:  # the probes each rule's trees held (TreeSettings.probes=None: the rule's default)
        commit_rule = resolve_rule(rule, target, "spot", settings["block_size"], "prob")[0]  # and its stale top-K
        tables = commit_rule.tables(settings["block_size"], "cpu")
        report["by_rule"][rule]["probes"] = default_probes(tables, report["settings"]["budget"])  # the first budget's
        if budgets:  # and each budget's
            report["by_rule"][rule]["probes_by_budget"] = {str(b): default_probes(tables, b) for b in budgets}
        report["by_rule"][rule]["top_k"] = min(settings["top_k"] or default_top_k(commit_rule.is_one,
                                                                                  settings["temperature"]),
                                               target.vocab_size)
    report["settings"]["target"] = a.target
    if "spot" in methods:
        report["settings"]["drafter"] = a.drafter
    report["settings"]["assert_exact"] = a.assert_exact
    print(format_report(report))
    if a.json:
        write_json(report, a.json)
        print(f"wrote {a.json}")
    if a.plot:
        from .lab.plots import bench_plots

        for path in bench_plots(report, a.plot):
            print(f"wrote {path}")
    inexact = inexact_runs(report)  # every method at every budget under every rule
    if a.assert_exact and inexact:
        raise SystemExit(f"--assert-exact: {'; '.join(inexact)} decoded other tokens than standard")
    return 0


def _rules(text: str) -> list[str]:
    """--rules: rules separated by semicolons, or by commas where no rule has options (see its help), each in its
    canonical form (spot.rules.canonical_rule: the report's by_rule keys; "one;ONE" names a rule twice)."""
    items = [r.strip() for r in (text.split(";") if ";" in text else text.split(",")) if r.strip()]
    if not items:
        raise SystemExit(f"--rules: expected one or more commit rules, got {text!r}")
    for rule in items:
        _check_rule(rule)
    items = [rule if rule == "family" else canonical_rule(rule) for rule in items]
    if len(set(items)) < len(items):
        raise SystemExit(f"--rules: {text!r} names a rule twice")
    return items


def _check_rule(rule: str) -> None:
    with _named_flags():
        if rule != "family":
            parse_rule(rule)


def _int_list(flag: str, text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"{flag}: expected integers >= 1, got {text!r}")
    return list(dict.fromkeys(values))


def _check_matplotlib() -> None:
    """--plot needs matplotlib: refused before anything runs when it is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("--plot: matplotlib is not installed (pip install matplotlib)") from None


def _check_plot_folder(folder, rules=None) -> None:
    """--plot's folder is created (or must be a folder) and writable, before anything runs: the files of every rule
    (spot.lab.plots.bench_plot_names)."""
    from pathlib import Path

    from .files import check_writable
    from .lab.plots import bench_plot_names

    _check_matplotlib()
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise SystemExit(f"--plot {folder}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        for name in bench_plot_names(rules):
            check_writable(path / name)
    except (OSError, ValueError) as e:
        raise SystemExit(f"--plot {folder}: cannot write there ({e})") from None


def cmd_project(a) -> int:
    """The roofline projection of docs/projection.md: every figure it prints is a projection, not a measurement."""
    from .lab import project as pj
    from .lab.bench import check_writable, write_json

    gpu = pj.GPUS.get(a.gpu)
    if gpu is None:
        raise SystemExit(f"--gpu: unknown {a.gpu!r}; choose from {','.join(pj.GPUS)}")
    names = [s.strip() for s in a.shapes.split(",") if s.strip()]
    bad = [s for s in names if s not in pj.SHAPES]
    if bad or not names:
        raise SystemExit(f"--shapes: unknown {bad or 'empty'}; choose from {','.join(pj.SHAPES)}")
    _at_least(a, {"prefix": 0, "batch": 1})
    if a.plot:
        _check_matplotlib()
    for flag, path in (("--plot", a.plot), ("--json", a.json)):
        if path:
            try:
                check_writable(path)
            except ValueError as e:
                raise SystemExit(f"{flag} {e}") from None
    try:
        accs = pj.load_acceptance(a.inputs, a.rule)
    except (ValueError, KeyError) as e:
        raise SystemExit(f"project: {e}") from None
    wanted = _methods(a.methods)
    accs = [x for x in accs if x.method in wanted]
    if not accs:
        raise SystemExit(f"project: the JSON files hold none of --methods {a.methods}")
    block = accs[0].block_size
    measured_shape, measured, curve = None, None, None
    if a.measured:
        try:
            curve, measured = pj.measured_curve(a.measured, block=block)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        measured_shape = curve["shape"]
        if measured_shape not in names:
            names.append(measured_shape)
    rows_by_shape = {}
    for name in names:
        shape = pj.SHAPES[name]
        own = measured if name == measured_shape else None
        prefix, batch = (curve["prefix"], curve["batch"]) if own else (a.prefix, a.batch)
        rows_by_shape[name] = pj.project(accs, shape, gpu, prefix, batch, a.lm_head, own)
        print(pj.format_table(rows_by_shape[name]))
        if own:
            print(pj.format_curve(shape, gpu, block, prefix, batch, own))
            print(f"measured on {curve.get('device')} ({curve['layers_measured']} layers, scaled to {shape.layers})")
        print()
    print(f"inputs: {', '.join(sorted({x.source for x in accs}))}; B = {block}, prefix {a.prefix}, batch {a.batch}, "
          f"LM head over {'all nodes' if a.lm_head == 'all' else 'the accepted chain'}; {gpu.name}: "
          f"{gpu.flops / 1e12:.0f} TFLOP/s bf16 dense, {gpu.bandwidth / 1e12:.2f} TB/s. {pj.LABEL}.")
    if a.json:
        write_json({"label": pj.LABEL, "gpu": vars(gpu), "settings": {k: v for k, v in vars(a).items()
                                                                         if k != "func"},
                    "rows": [r for rows in rows_by_shape.values() for r in rows]}, a.json)
        print(f"wrote {a.json}")
    if a.plot:
        pj.plot(rows_by_shape, a.plot, f"projected speed-up over standard on {gpu.name}, B = {block}, "
                f"prefix {a.prefix}, batch {a.batch}")
        print(f"wrote {a.plot}")
    return 0


def cmd_export(a) -> int:
    from .export import SDAR_CODE_FILES, export_sdar
    from .loading import load_target

    try:
        target = load_target(a.target)
        path = export_sdar(target.model, target.tokenizer, a.directory)
    except (FileExistsError, PermissionError, ValueError, FileNotFoundError) as e:
        raise SystemExit(str(e)) from None
    print(f"wrote {path}: config.json (model_type sdar), model.safetensors, tokenizer files (mask token "
          f"{target.tokenizer.decode([target.mask_id])!r}). Put SDAR's {' and '.join(SDAR_CODE_FILES)} beside them "
          "to load it with transformers (trust_remote_code=True)")
    return 0


_PROMPT_LEN_HELP = (f"decode random token prompts of this length (without it: {PROMPT_LEN}, for --target random and "
                    "targets without a tokenizer); they never hold the target's mask, end-of-sequence or padding ids")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="spot", description="Lossless speculative decoding for diffusion LMs.",
                    epilog="An error prints one line; --debug (anywhere on the command line) or SPOT_DEBUG=1 shows "
                           "its traceback.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt and compare methods")
    _common(g)
    g.add_argument("--prompt", help="prompt text (default: a held-out prompt, or random ids for --target random)")
    g.add_argument("--prompt-len", type=int, help=_PROMPT_LEN_HELP)
    g.add_argument("--show-order", action="store_true",
                   help="print, per block and method, the pass at which each position was committed")
    g.set_defaults(func=cmd_generate)
    b = sub.add_parser("bench", help="run methods on the same prompts and seeds; write JSON")
    _common(b)
    b.set_defaults(methods=BENCH_METHODS)
    b.add_argument("--prompts-file", help="one prompt per line (\\n for newlines)")
    b.add_argument("--num-prompts", type=int,
                   help=f"prompts to decode (default: every line of --prompts-file, else {BENCH_PROMPTS})")
    b.add_argument("--prompt-len", type=int, help=_PROMPT_LEN_HELP)
    b.add_argument("--batch-size", type=int, default=1)
    b.add_argument("--json", help="write the report here")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.add_argument("--budgets", help="comma-separated tree budgets: every method but standard runs at each "
                   "(replaces --budget; the JSON gains by_budget)")
    b.add_argument("--plot", metavar="DIR", help="write pass_reduction.png and commits_per_pass.png into DIR")
    b.add_argument("--rules", help="several commit rules, each run as --rule (standard with it the reference of the "
                   "methods over it); separated by commas, or by semicolons when a rule has options: "
                   "'one,steps:16,threshold:0.9', 'one;threshold:0.95,steps:32' (replaces --rule; the JSON gains "
                   "by_rule)")
    b.add_argument("--assert-exact", action="store_true",
                   help="fail (after writing --json) unless every method's tokens equal standard's")
    b.set_defaults(func=cmd_bench)
    p = sub.add_parser("project", help="GPU roofline projection of a benchmark's speed-up (not a measurement)")
    p.add_argument("inputs", nargs="+", help="`spot bench --json` reports and/or bench/budget_curve.py JSON files "
                   "(one block size; several budgets from several files or from --budgets)")
    p.add_argument("--gpu", default="h200", help="h100 or h200 (SXM; docs/projection.md names the datasheets)")
    p.add_argument("--shapes", default="embedded,qwen3-1.7b,qwen3-4b,qwen3-8b", help="model shapes, comma-separated")
    p.add_argument("--methods", default="spot,confidence", help="methods to project (standard is the baseline)")
    p.add_argument("--rule", help="of a `spot bench --rules` report, the commit rule to project (standard with it is "
                   "the baseline); default: the report's only rule")
    p.add_argument("--prefix", type=int, default=1024, help="cached prefix tokens each pass attends to")
    p.add_argument("--batch", type=int, default=1, help="sequences per pass")
    p.add_argument("--lm-head", default="all", choices=("all", "chain"),
                   help="LM head over every node, or only over the chain verification reaches")
    p.add_argument("--measured", help="bench/gpu_bench.py JSON with a measured pass_curve: printed beside the roofline")
    p.add_argument("--plot", help="write the projected speed-up against budget here (PNG)")
    p.add_argument("--json", help="write the projection rows here")
    p.set_defaults(func=cmd_project)
    p = sub.add_parser("demo", help="one screen: passes of standard / confidence / spot, the commit order of a "
                       "block, CPU time per token, what --budget auto picks here and why, a labelled GPU projection")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--budgets", default="4,16", help="the tree budgets confidence and spot run at (a GPU's sizes)")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("export", help="write an embedded target as an SDAR checkpoint directory (docs/integrations.md)")
    p.add_argument("directory", help="a new or empty directory (nothing is overwritten)")
    p.add_argument("--target", default="default", help="'default' (the shipped target, with SDAR's attention; "
                   "'causal' and 'target2' have a token-causal prefix and do not export) or a directory holding "
                   "target.safetensors")
    p.set_defaults(func=cmd_export)
    sub.add_parser("build", add_help=False, help="the offline pipeline: `spot build --help`")
    return parser


def main(argv=None) -> int:
    """`spot` and `spot build`: an error ends the command with SystemExit("spot: error: MESSAGE"), which Python
    prints as that one line on stderr with exit code 1 (argparse's usage errors: one line too, `Parser`, exit code
    2); the traceback of an error that is not a SystemExit is shown only with --debug or SPOT_DEBUG=1."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("SPOT_DEBUG", "") not in ("", "0")
    argv = [x for x in argv if x != "--debug"]
    try:
        return _run(argv)
    except SystemExit as e:
        if debug or e.code is None or isinstance(e.code, int):
            raise
        raise SystemExit(_error_line(str(e.code))) from None
    except KeyboardInterrupt:
        if debug:
            raise
    except Exception as e:  # noqa: BLE001 (the one error path: every failure is one line, the traceback on request)
        if debug:
            raise
        _close_progress_bars()
        raise SystemExit(_error_line(f"{_one_line(e)} ({type(e).__name__}; --debug or SPOT_DEBUG=1 shows the "
                                     "traceback)")) from None
    _close_progress_bars()
    print("spot: error: interrupted (SIGINT)", file=sys.stderr)
    raise SystemExit(INTERRUPTED)


def _close_progress_bars() -> None:
    """Close the progress bars a failed command left open, so that its error line stands on a line of its own (an
    open bar's line ends in a carriage return, not a newline)."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


INTERRUPTED = 130  # the exit status of a command ended by SIGINT (128 + 2), as shells report it


def _run(argv) -> int:
    if argv[:1] == ["build"]:  # the pipeline's own parser; imported only here, never by `import spot`
        from .lab.pipeline.cli import main as build_main
        return build_main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


def _one_line(e: BaseException) -> str:
    text = str(e) if not isinstance(e, KeyError) else str(e.args[0] if e.args else e)
    return " ".join(text.split()) or type(e).__name__


def _error_line(message: str) -> str:
    message = " ".join(message.split())
    return message if message.startswith("spot: error: ") else f"spot: error: {message}"


if __name__ == "__main__":
    sys.exit(main())
