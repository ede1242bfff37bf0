"""Decoder benchmark: every method on the same prompts and seeds, in one process (docs/design.md §6)."""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from collections import Counter

import torch
from tqdm import tqdm

from ..decode import generate
from ..files import atomic_write_text, check_writable  # noqa: F401 (check_writable: the bench scripts' import)
from ..rules import canonical_rule
from ..settings import TreeSettings
from .dispatch_count import DispatchCounter


def warm_up(target, prompt: list[int]) -> None:
    """One tiny decode, so one-time costs (lazy imports, kernel compiles) are not charged to the first method. A
    target whose attention fixes the block size (BD3-LM's `block_size`) is warmed up with one block of it."""
    block = getattr(target, "block_size", None) or 2
    generate(target, [prompt], "confidence", max_new_tokens=block, block_size=block)


def decode_all(target, prompts: list[list[int]], method: str, *, batch_size: int = 1, drafter=None,
               standard_orders=None, on_batch=None, first_row: int = 0, **settings) -> dict:
    """Decode every prompt with `method`, `batch_size` prompts per call, and sum the statistics.

    Noise rows follow the prompt index (plus `first_row`, when `prompts` is a slice of a longer list), never the
    batch, so every method sees the same noise. `standard_orders` (the "orders" a standard run returned) lets
    `oracle` reuse the true order instead of re-deriving it.
    """
    _check_prompts_and_batch(prompts, batch_size)
    totals = _empty_run()
    for index, start in enumerate(range(0, len(prompts), batch_size)):
        batch = prompts[start:start + batch_size]
        extra = {"drafter": drafter} if method == "spot" else {}
        if method == "oracle" and standard_orders is not None:
            extra = {"orders": standard_orders[index]}
        t0, c0 = time.perf_counter(), time.process_time()
        rows = list(range(first_row + start, first_row + start + len(batch)))
        out = generate(target, batch, method, rows=rows, **extra, **settings)
        totals["seconds"] += time.perf_counter() - t0
        totals["cpu_seconds"] += time.process_time() - c0
        totals["tokens"] += out.tokens
        totals["orders"].append(out.orders)
        totals["target_passes"] += out.stats.target_passes
        totals["generated_tokens"] += out.stats.generated_tokens
        totals["commits_per_pass"].update(out.stats.commits_per_pass)
        totals["stage_seconds"].update(out.stats.stage_seconds)
        if on_batch is not None:
            on_batch()
    return totals


def run_bench(target, prompts: list[list[int]], methods, *, batch_size: int = 1, drafter=None, progress=True,
              budgets=None, count_ops: bool = True, **settings) -> dict:
    """Run `methods` (standard always first, it is the reference) and return the JSON-ready report.

    drafter: the drafter of method "spot", or a dict {name: drafter} of several: "spot" then runs once per
    drafter, reported as "spot[name]" (one process, the same prompts and seeds: a drafter comparison).
    budgets: several tree budgets (each non-standard method runs at every one, standard once); the report then
    holds, besides "methods" (standard, and every method at the first budget), "by_budget": {budget: {method:
    entry}}, and settings.budget is the first budget.

    The runs take turns batch by batch (standard, then every other method at every budget, on the first batch; on
    the next in the reverse order, and so on), so that a shared machine's changing load, and whichever run goes
    first after another, fall on every run alike and the wall-clock ratios compare like with like; each run's
    figures are the sums over its batches. Besides wall-clock seconds every entry has the process's CPU seconds
    ("cpu_seconds", "cpu_speedup_vs_standard"): with one thread (OMP_NUM_THREADS=1) they leave out the time other
    jobs held the core, the steadier ratio on a shared machine.

    count_ops: each run decodes its first batch once more, untimed, under spot.lab.dispatch_count.DispatchCounter:
    "dispatch_per_pass" is its dispatched ops and host syncs per target pass by stage ("decoder": all but the
    target's forward), what a GPU pays in launches and synchronisations (docs/round.md); oracle is not counted."""
    _check_prompts_and_batch(prompts, batch_size)
    methods = ["standard"] + [m for m in methods if m != "standard"]
    if not budgets:
        budgets = [settings["budget"] if settings.get("budget") is not None else
                   (settings.get("tree") or TreeSettings()).budget]
    budgets = list(budgets)
    settings["budget"] = budgets[0]
    report = {"settings": {**_json_settings(settings), "batch_size": batch_size, "num_prompts": len(prompts),
                           "dtype": str(getattr(target, "dtype", "")), "device": str(target.device),
                           "torch": torch.__version__, "machine": platform.machine()},
              "methods": {}}
    warm_up(target, prompts[0])
    variants = []  # (report name, method, drafter)
    for m in methods[1:]:
        if m == "spot" and isinstance(drafter, dict):
            variants += [(f"spot[{name}]", m, d) for name, d in drafter.items()]
        else:
            variants.append((m, m, drafter if m == "spot" else None))
    runs = [("standard", "standard", None, budgets[0])] + [(n, m, d, b) for b in budgets for n, m, d in variants]
    bar = tqdm(total=len(runs) * -(-len(prompts) // batch_size), desc="bench", disable=not progress, unit="batch")
    totals = {(name, budget): _empty_run() for name, _, _, budget in runs}
    for index, start in enumerate(range(0, len(prompts), batch_size)):
        batch = prompts[start:start + batch_size]
        order = runs if index % 2 == 0 else runs[::-1]
        if index % 2 and any(method == "oracle" for _, method, _, _ in runs):
            order = runs[:1] + runs[:0:-1]  # standard stays first: oracle reads its orders of this batch
        for name, method, run_drafter, budget in order:
            bar.set_postfix(method=name, budget=budget)
            standard = totals[("standard", budgets[0])] if method != "standard" else None
            run = decode_all(target, batch, method, batch_size=batch_size, drafter=run_drafter, first_row=start,
                             standard_orders=standard["orders"][-1:] if standard else None,
                             **{**settings, "budget": budget})
            _add(totals[(name, budget)], run)
            bar.update()
    standard = totals[("standard", budgets[0])]
    counts = {}
    if count_ops:
        for name, method, run_drafter, budget in runs:
            if method == "oracle":  # a diagnostic, whose own standard run would be counted with it
                continue
            counts[(name, budget)] = count_dispatch(target, prompts[:batch_size], method, drafter=run_drafter,
                                                    **{**settings, "budget": budget})
    by_budget: dict[str, dict] = {str(b): {} for b in budgets}
    for name, method, _, budget in runs:
        entry = _entry(totals[(name, budget)], standard)
        if (name, budget) in counts:
            entry["dispatch_per_pass"] = counts[(name, budget)]
        if method == "standard" or budget == budgets[0]:
            report["methods"][name] = entry
        if method != "standard":
            by_budget[str(budget)][name] = entry
    bar.close()
    base = report["methods"]["standard"]
    for r in [*report["methods"].values(), *(e for t in by_budget.values() for e in t.values())]:
        r["pass_reduction_vs_standard"] = base["target_passes"] / r["target_passes"] if r["target_passes"] else None
        r["row_pass_reduction_vs_standard"] = base["row_passes"] / r["row_passes"] if r["row_passes"] else None
        r["speedup_vs_standard"] = (r["tokens_per_second"] / base["tokens_per_second"]
                                    if r["tokens_per_second"] and base["tokens_per_second"] else None)
        r["cpu_speedup_vs_standard"] = (base["cpu_seconds"] / r["cpu_seconds"] * r["generated_tokens"]
                                        / base["generated_tokens"]
                                        if r["cpu_seconds"] and base["generated_tokens"] else None)
    if len(budgets) > 1:
        report["settings"]["budgets"] = budgets
        report["by_budget"] = by_budget
    return report


def run_rules(target, prompts: list[list[int]], methods, rules: list[str], **kw) -> dict:
    """run_bench once per commit rule (spot.rules): `standard` with the rule is the reference of every method over
    it. The report is the first rule's, with "by_rule": {rule: {"methods": ..., ("by_budget": ...),
    "standard_tokens_per_pass": how parallel the rule alone is on this target (its commits per row and pass),
    "standard_passes_vs_one": one commit per step's passes per generated token over the rule's (when "one" is among
    the rules; with an end-of-sequence token the two may decode different numbers of tokens, so passes are compared
    per token)}}. Rules are keyed by their canonical form (spot.rules.canonical_rule: "STEPS:8" and "steps:8" are
    one rule, refused when named twice)."""
    keys = [rule if rule == "family" else canonical_rule(rule) for rule in rules]
    if len(set(keys)) < len(keys):
        raise ValueError(f"rules: {list(rules)} name a rule twice (as {keys})")
    reports = {key: run_bench(target, prompts, methods, rule=key, **kw) for key in keys}  # one after another
    out = reports[keys[0]]
    out["settings"]["rules"] = keys
    one = reports.get("one")
    out["by_rule"] = {}
    for rule, report in reports.items():
        std = report["methods"]["standard"]
        per_pass = {int(k): v for k, v in std["commits_per_pass"].items()}  # commits -> (row, pass) count
        entry = {"methods": report["methods"],
                 "standard_tokens_per_pass": sum(k * v for k, v in per_pass.items()) / sum(per_pass.values())
                 if per_pass else None}
        if "by_budget" in report:
            entry["by_budget"] = report["by_budget"]
        if one is not None and std["row_passes"] and std["generated_tokens"]:
            base = one["methods"]["standard"]
            entry["standard_passes_vs_one"] = (base["row_passes"] / base["generated_tokens"]
                                               / (std["row_passes"] / std["generated_tokens"]))
        out["by_rule"][rule] = entry
    return out


def inexact_runs(report: dict) -> list[str]:
    """Every run of a report that decoded other tokens than `standard` (with its commit rule): each method at each
    budget under each rule, named ("confidence at budget 8, rule steps:4"); what `spot bench --assert-exact` checks."""
    first = report["settings"].get("budget")
    found = {}
    for rule, entry in (report.get("by_rule") or {None: report}).items():
        tables = [(first, entry["methods"]), *entry.get("by_budget", {}).items()]
        for budget, table in tables:
            for name, r in table.items():
                if not r["exact_match_vs_standard"]:
                    where = [f"budget {budget}"] if name != "standard" else []
                    where += [f"rule {rule}"] if rule is not None else []
                    found[name + (f" at {', '.join(where)}" if where else "")] = None
    return list(found)


def count_dispatch(target, prompts: list[list[int]], method: str, *, drafter=None, **settings) -> dict:
    """Ops and host syncs per target pass, by stage, of one decode of `prompts` (spot.lab.dispatch_count)."""
    extra = {"drafter": drafter} if method == "spot" else {}
    with DispatchCounter() as counter:
        out = generate(target, prompts, method, rows=list(range(len(prompts))), **extra, **settings)
    return counter.per_pass(out.stats.target_passes)


def _json_settings(settings: dict) -> dict:
    """generate's settings as the report's JSON keeps them: a settings object's fields (TreeSettings: width,
    branch, static, ...) flat beside the others; the budget is the report's own."""
    flat = {}
    for key, value in settings.items():
        if dataclasses.is_dataclass(value):
            flat.update({k: v for k, v in dataclasses.asdict(value).items() if k != "budget"})
        else:
            flat[key] = value
    return flat


def _empty_run() -> dict:
    return {"tokens": [], "orders": [], "target_passes": 0, "generated_tokens": 0, "seconds": 0.0, "cpu_seconds": 0.0,
            "commits_per_pass": Counter(), "stage_seconds": Counter()}


def _add(total: dict, run: dict) -> None:
    for key, value in run.items():
        if isinstance(value, Counter):
            total[key].update(value)  # keeps zero counts, unlike +=
        else:
            total[key] += value


def _entry(run: dict, standard: dict) -> dict:
    passes, generated, seconds = run["target_passes"], run["generated_tokens"], run["seconds"]
    return {
        "target_passes": passes,
        # each row's own passes, summed: what one prompt per call takes (a batched pass serves every row in it)
        "row_passes": sum(run["commits_per_pass"].values()),
        "generated_tokens": generated,
        "passes_per_token": passes / generated if generated else None,
        "seconds": seconds,
        "tokens_per_second": generated / seconds if seconds else None,
        "cpu_seconds": run["cpu_seconds"],
        "exact_match_vs_standard": run["tokens"] == standard["tokens"],
        "commits_per_pass": {str(k): v for k, v in sorted(run["commits_per_pass"].items())},
        "stage_seconds": dict(run["stage_seconds"]),
    }


def format_report(report: dict) -> str:
    """The report as text; with several commit rules (run_rules) one table per rule, each headed by how many
    tokens the rule alone commits per pass."""
    if "by_rule" not in report:
        return _format_methods(report)
    parts = []
    for rule, entry in report["by_rule"].items():
        head = f"rule {rule}: standard with it commits {entry['standard_tokens_per_pass'] or 0:.3f} tokens per pass"
        if "standard_passes_vs_one" in entry:
            head += (f" ({entry['standard_passes_vs_one']:.2f}x fewer passes per generated token than one commit "
                     "per pass)")
        head += "; each row's own passes: " + ", ".join(
            f"{name} {r['row_passes']}"
            + ("" if name == "standard" else f" ({r['row_pass_reduction_vs_standard']:.2f}x)")
            for name, r in entry["methods"].items())
        sub = {"settings": report["settings"], "methods": entry["methods"]}
        if "by_budget" in entry:
            sub["by_budget"] = entry["by_budget"]
        parts.append(head + "\n" + _format_methods(sub))
    return "\n\n".join(parts)


def _format_methods(report: dict) -> str:
    w = max(11, *(len(name) for name in report["methods"]))
    lines = [f"{'method':<{w}} {'budget':>6} {'passes':>7} {'tokens':>7} {'pass/tok':>9} {'reduction':>9} "
             f"{'tok/s':>9} {'speedup':>8} {'cpu-time':>8} exact"]
    budget = report["settings"].get("budget")
    rows = [(name, "" if name == "standard" else budget, r) for name, r in report["methods"].items()]
    for b, table in list(report.get("by_budget", {}).items())[1:]:
        rows += [(name, b, r) for name, r in table.items()]
    for name, b, r in rows:
        lines.append(f"{name:<{w}} {b:>6} {r['target_passes']:>7} {r['generated_tokens']:>7} "
                     f"{r['passes_per_token'] or float('nan'):>9.4f} {r['pass_reduction_vs_standard'] or 0:>8.2f}x "
                     f"{r['tokens_per_second'] or 0:>9.1f} {r['speedup_vs_standard'] or 0:>7.2f}x "
                     f"{r['cpu_speedup_vs_standard'] or 0:>7.2f}x {r['exact_match_vs_standard']}")
    counted = [(name, b, r["dispatch_per_pass"]) for name, b, r in rows if "dispatch_per_pass" in r]
    if counted:
        lines.append("per target pass, the first batch (spot.lab.dispatch_count): decoder ops / host syncs outside the "
                     "target's forward, by stage, beside wall clock (ms per pass; draft%: drafting's share of the "
                     "decode's stage seconds, drafting / (drafting + target + verification))")
        lines.append(f"{'method':<{w}} {'budget':>6} {'ms/pass':>8} {'draft%':>7} {'ops':>7} {'syncs':>6}  "
                     + " ".join(f"{s:>13}" for s in STAGE_COLUMNS))
        for name, b, d in counted:
            r = report["methods"][name] if b in ("", budget) else report["by_budget"][str(b)][name]
            ms = 1e3 * r["seconds"] / r["target_passes"] if r["target_passes"] else float("nan")
            lines.append(f"{name:<{w}} {b:>6} {ms:>8.2f} {draft_share(r['stage_seconds']):>7.1%} "
                         f"{d['decoder']['ops']:>7.0f} {d['decoder']['syncs']:>6.2f}  "
                         + " ".join(f"{d[s]['ops']:>7.0f}/{d[s]['syncs']:<5.2f}" for s in STAGE_COLUMNS))
    return "\n".join(lines)


STAGE_COLUMNS = ("draft", "score", "verify", "stale", "bookkeeping")


def draft_share(stage_seconds) -> float:
    """Drafting's share of a decode's stage seconds (DecodeStats.stage_seconds): drafting / (drafting + target +
    verification), the round's CPU measure (docs/round.md); NaN when no stage was timed."""
    total = sum(stage_seconds.values())
    return stage_seconds.get("draft", 0.0) / total if total else float("nan")


def _check_prompts_and_batch(prompts, batch_size) -> None:
    """A benchmark of nothing is refused: at least one prompt, a positive batch size."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts: a benchmark needs at least one prompt")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")


def write_json(report: dict, path) -> None:
    """The report at `path`, written to a temporary file and moved into place (never half a file)."""
    atomic_write_text(path, json.dumps(report, indent=2) + "\n")
