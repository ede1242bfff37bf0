"""Figures of a benchmark (PNGs through matplotlib's Agg backend) and the terminal view of a block's commit order.

matplotlib is imported only when a figure is drawn, so decoding never needs it.
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

from ..files import atomic_write
from ..rules import rule_file_name

PASS_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def budget_axis(ax, budgets) -> None:
    """A log2 x axis labelled with the budgets themselves (1, 2, 4, ...), not powers of two."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(budgets)))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("tree budget (nodes per pass)")


def _tables(report: dict) -> dict[int, dict]:
    """{budget: {method: entry}} for every non-standard method of a `run_bench` report."""
    if report.get("by_budget"):
        return {int(b): t for b, t in report["by_budget"].items()}
    return {int(report["settings"]["budget"]): {m: r for m, r in report["methods"].items() if m != "standard"}}


BENCH_PLOTS = ("pass_reduction.png", "commits_per_pass.png")  # what bench_plots writes into its folder


def bench_plot_names(rules=None) -> list[str]:
    """The files bench_plots writes: BENCH_PLOTS, or with several commit rules (`spot bench --rules`, canonical
    forms) one pair per rule, named after it (pass_reduction-steps_16.png: spot.rules.rule_file_name)."""
    if not rules:
        return list(BENCH_PLOTS)
    return [name.replace(".png", f"-{rule_file_name(rule)}.png") for rule in rules for name in BENCH_PLOTS]


def bench_plots(report: dict, folder) -> list[Path]:
    """pass_reduction.png (standard's passes / the method's, against the budget, per method) and
    commits_per_pass.png (share of passes by commits per pass, per method and budget), each titled with its commit
    rule; a report over several rules (run_rules) gets one pair per rule (bench_plot_names). Returns the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if "by_rule" not in report:
        return _bench_plots(report, report["settings"].get("rule", "one"), folder, BENCH_PLOTS)
    paths = []
    names = bench_plot_names(list(report["by_rule"]))
    for i, (rule, entry) in enumerate(report["by_rule"].items()):
        sub = {"settings": report["settings"], "methods": entry["methods"]}
        if "by_budget" in entry:
            sub["by_budget"] = entry["by_budget"]
        paths += _bench_plots(sub, rule, folder, names[2 * i:2 * i + 2])
    return paths


def _bench_plots(report: dict, rule: str, folder: Path, names) -> list[Path]:
    plt = pyplot()
    tables = _tables(report)
    budgets = sorted(tables)
    methods = list(dict.fromkeys(m for t in tables.values() for m in t))
    s = report["settings"]
    subtitle = (f"rule {rule}: {s.get('num_prompts')} prompts x {s.get('max_new_tokens')} tokens, "
                f"B = {s.get('block_size')}, T = {s.get('temperature')}")

    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    for method in methods:
        xs = [b for b in budgets if method in tables[b]]
        ax.plot(xs, [tables[b][method]["pass_reduction_vs_standard"] for b in xs], marker="o", label=method)
    ax.axhline(1.0, color="grey", lw=0.8)
    budget_axis(ax, budgets)
    ax.set_ylabel("pass reduction (standard passes / method passes)")
    ax.set_title(f"pass reduction against budget\n{subtitle}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths = [folder / names[0]]
    atomic_write(paths[0], lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)

    fig, axes = plt.subplots(1, max(1, len(methods)), figsize=(4 * max(1, len(methods)), 3.5), dpi=110,
                             squeeze=False)
    for ax, method in zip(axes[0], methods):
        runs = [b for b in budgets if method in tables[b]]
        width = 0.8 / max(1, len(runs))
        for i, b in enumerate(runs):
            hist = {int(k): v for k, v in tables[b][method]["commits_per_pass"].items()}
            total = sum(hist.values()) or 1
            ks = sorted(hist)
            ax.bar([k + (i - (len(runs) - 1) / 2) * width for k in ks], [hist[k] / total for k in ks], width,
                   label=f"budget {b}")
        ax.set_title(method, fontsize=9)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("commits per pass")
        ax.set_ylabel("share of passes")
        ax.legend(fontsize=7)
    fig.suptitle(f"commits per pass ({subtitle})", fontsize=9)
    fig.tight_layout()
    paths.append(folder / names[1])
    atomic_write(paths[1], lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)
    return paths


def pass_of_positions(order: list[int], pass_starts: list[int]) -> dict[int, int]:
    """{position: index of the pass (within the block) that committed it}.

    order: the block's positions in commit order (-1: never committed), as `GenerateOutput.orders[row, block]`.
    pass_starts: the block's commit step before each of its passes (what `on_pass` reports), increasing: commit
    slot k was made by the last pass whose start is <= k."""
    return {pos: bisect_right(pass_starts, k) - 1 for k, pos in enumerate(order) if pos >= 0}


def format_commit_order(order: list[int], pass_starts: list[int], label: str = "") -> str:
    """A block as two lines: position numbers (tens over units) and, under each position, the pass that
    committed it (0-9, a-z, A-Z, then '+'; '.' never committed)."""
    at = pass_of_positions(order, pass_starts)
    size = len(order)
    cells = "".join(PASS_DIGITS[at[j]] if at.get(j, -1) in range(len(PASS_DIGITS)) else ("." if j not in at else "+")
                    for j in range(size))
    tens = "".join(str(j // 10) if j % 10 == 0 else " " for j in range(size)).rstrip()
    units = "".join(str(j % 10) for j in range(size))
    head = f"{label}{len(pass_starts)} passes, {len(at)} positions committed"
    return f"{head}\n  position {tens}\n           {units}\n  pass     {cells}"
