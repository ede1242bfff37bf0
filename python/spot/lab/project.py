"""GPU projection of decoding speed: a roofline pass time, not a measurement (docs/projection.md).

A verification pass over N nodes of B tokens costs, on a GPU, about max(FLOPs / peak FLOP/s, bytes / bandwidth):
the weights are read once whatever N is, so while the pass is memory-bound extra nodes ride along almost free, and
once it is compute-bound every node costs its B tokens. Combined with the commits per pass that a benchmark
measured at each tree budget (`spot bench --json`, `bench/budget_curve.py --json`), this projects each method's
tokens/s against `standard` (one node, one commit per pass) for a named model shape on a named GPU.

What it leaves out (so a real GPU will do worse): drafting, scoring and verification time, activation traffic,
and efficiency below peak. The decoder's launches are charged apart where the benchmark counted them
(`dispatch_per_pass`, spot.lab.dispatch_count): eager, every op outside the target's forward costs LAUNCH_US of host
time; captured (CUDA graphs, docs/round.md), the round costs one GRAPH_REPLAY_US replay. Both constants are
assumptions, labelled as such, until bench/gpu_check.sh measures them. `measure_pass_curve` times the real pass of a few
layers of a model shape on a device (bench/gpu_bench.py runs it on a GPU), so the two can be set side by side.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..files import atomic_write, read_json
from ..rules import canonical_rule

LABEL = "projection (roofline), not a measurement"
# Host time per eager PyTorch op on a GPU (dispatch and launch), and per CUDA-graph replay of a captured round.
# Assumed, not measured here: a few microseconds per eager op is the usual figure (gpt-fast's write-up found eager
# Llama-7B decoding CPU-overhead-bound on an A100, 25 -> 107 tokens/s with torch.compile and CUDA graphs); replace
# them with bench/gpu_check.sh's measured microseconds per round when a GPU is lent.
LAUNCH_US = 5.0
GRAPH_REPLAY_US = 10.0
LAUNCH_SOURCE = (f"assumed {LAUNCH_US:g} us per eager op, {GRAPH_REPLAY_US:g} us per captured round (not measured; "
                 "bench/gpu_check.sh measures them)")
BYTES_BF16 = 2


@dataclass(frozen=True)
class Shape:
    """A Qwen3-style decoder: grouped-query attention with head_dim per head, a SwiGLU MLP, one LM head."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    source: str

    def layer_params(self) -> int:
        """Weights of one layer: q, k, v, o projections, the three MLP matrices, two RMSNorms and the q/k norms."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden + 2 * self.head_dim

    def head_params(self) -> int:
        return self.vocab * self.hidden

    def params(self) -> int:
        """Layers, final norm and LM head (an untied input embedding adds vocab x hidden more that a pass only
        gathers rows of, so it is left out)."""
        return self.layers * self.layer_params() + self.hidden + self.head_params()


def _embedded_shape() -> Shape:
    cfg = json.loads((Path(__file__).parent.parent / "weights" / "target.json").read_text())
    d, h = cfg["d_model"], cfg["n_heads"]
    return Shape("embedded", d, cfg["n_layers"], h, cfg["n_kv_heads"], d // h, cfg["d_ff"], cfg["vocab_size"],
                 "python/spot/weights/target.json")


_QWEN3 = "https://huggingface.co/Qwen/Qwen3-{}/blob/main/config.json"
SHAPES = {
    "embedded": _embedded_shape(),
    # The published Qwen3 config.json files (SDAR-1.7B/4B/8B are block-diffusion Qwen3 models of these shapes).
    "qwen3-1.7b": Shape("qwen3-1.7b", 2048, 28, 16, 8, 128, 6144, 151936, _QWEN3.format("1.7B")),
    "qwen3-4b": Shape("qwen3-4b", 2560, 36, 32, 8, 128, 9728, 151936, _QWEN3.format("4B")),
    "qwen3-8b": Shape("qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, _QWEN3.format("8B")),
}


@dataclass(frozen=True)
class GPU:
    name: str
    flops: float  # peak dense bf16 tensor-core FLOP/s (the datasheets' figure "with sparsity" halved)
    bandwidth: float  # HBM bytes/s
    source: str


GPUS = {
    "h100": GPU("H100 SXM", 989e12, 3.35e12, "https://www.nvidia.com/en-us/data-center/h100/ (datasheet: BF16 "
                "Tensor Core 1,979 TFLOPS with sparsity, GPU memory bandwidth 3.35 TB/s)"),
    "h200": GPU("H200 SXM", 989e12, 4.8e12, "https://www.nvidia.com/en-us/data-center/h200/ (datasheet: BF16 "
                "Tensor Core 1,979 TFLOPS with sparsity, GPU memory bandwidth 4.8 TB/s)"),
}


@dataclass(frozen=True)
class PassCost:
    flops: float
    bytes: float

    def seconds(self, gpu: GPU) -> float:
        return max(self.flops / gpu.flops, self.bytes / gpu.bandwidth)

    def bound(self, gpu: GPU) -> str:
        return "compute" if self.flops / gpu.flops > self.bytes / gpu.bandwidth else "memory"


def pass_cost(shape: Shape, nodes: float, block: int, prefix: int, batch: int = 1, head_nodes: float | None = None,
              itemsize: int = BYTES_BF16) -> PassCost:
    """FLOPs and HBM bytes of one pass over `nodes` x `block` query tokens per sequence, `batch` sequences, each
    attending to a cached prefix of `prefix` tokens and to its own node's block (docs/projection.md).

    FLOPs: 2 per weight per token for every layer's matrices; attention 4 x heads x head_dim per (query, key) pair
    over prefix + block keys; the LM head 2 x hidden x vocab per token of `head_nodes` nodes (default: all nodes).
    Bytes: every weight once, the prefix's keys and values once per layer (the tree attention reads a prefix tile
    once for all nodes), and the logits written then read once by the scoring op.
    """
    head_nodes = nodes if head_nodes is None else head_nodes
    tokens = batch * nodes * block
    head_tokens = batch * head_nodes * block
    flops = (2 * tokens * shape.layers * shape.layer_params()
             + 4 * tokens * shape.layers * shape.heads * shape.head_dim * (prefix + block)
             + 2 * head_tokens * shape.head_params())
    weights = (shape.layers * shape.layer_params() + shape.hidden + shape.head_params()) * itemsize
    kv = 2 * shape.layers * batch * shape.kv_heads * shape.head_dim * prefix * itemsize
    logits = 2 * head_tokens * shape.vocab * itemsize
    return PassCost(float(flops), float(weights + kv + logits))


def pass_seconds(shape: Shape, gpu: GPU, nodes: float, block: int, prefix: int, batch: int = 1,
                 head_nodes: float | None = None) -> float:
    return pass_cost(shape, nodes, block, prefix, batch, head_nodes).seconds(gpu)


# ------------------------------------------------------------------------------------ measured acceptance

@dataclass(frozen=True)
class Acceptance:
    """What one method did at one budget, summed over a benchmark's sequences (per sequence, batch-independent)."""

    method: str
    budget: int
    commits: int  # positions committed
    passes: int  # (sequence, pass) pairs
    first_passes: int  # the one-node first pass of each block (design.md §2.4 step 1)
    block_size: int
    source: str
    decoder_ops: float | None = None  # ops per pass outside the target's forward (spot bench's dispatch_per_pass)
    standard_ops: float | None = None  # the same for standard, from the same report
    standard_passes: int | None = None  # the baseline's passes: standard with the decode's commit rule (None: one
    # commit per pass, `commits` of them)

    @property
    def baseline_passes(self) -> int:
        return self.commits if self.standard_passes is None else self.standard_passes

    @property
    def commits_per_pass(self) -> float:
        return self.commits / self.passes

    @property
    def chain(self) -> float:
        """Mean commits (= accepted chain nodes) of a pass after the block's first."""
        rest = self.passes - self.first_passes
        return (self.commits - self.first_passes) / rest if rest else 1.0


def _blocks(settings: dict, passes: int, path) -> int:
    """First passes: one per decoded block. Exact with --ignore-eos; with end-of-sequence stops an upper bound."""
    prompts, new, block = (_integer(path, f"settings.{name}", settings.get(name), 1)
                           for name in ("num_prompts", "max_new_tokens", "block_size"))
    return min(prompts * -(-new // block), passes)


# A report is read as data, not trusted: every figure the projection uses is checked for its JSON type and range,
# and an error names the file and the field (a report whose block size or op counts are negative projects nonsense).

def _integer(path, field: str, value, low: int) -> int:
    """A JSON integer >= low (not a bool, a string or NaN)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{path}: {field} must be an integer >= {low}, got {_short(value)}")
    return value


def _integer_key(path, field: str, key, low: int) -> int:
    """An object key that spells an integer >= low ("16")."""
    try:
        value = int(key)
    except (TypeError, ValueError):
        value = None
    if value is None or str(value) != str(key).strip() or value < low:
        raise ValueError(f"{path}: {field} keys must be integers >= {low}, got {_short(key)}")
    return value


def _object(path, field: str, value) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {field} must be a JSON object, got {_short(value)}")
    return value


def _ops(path, field: str, value) -> float:
    """A finite op count >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{path}: {field} must be a finite number >= 0, got {_short(value)}")
    return float(value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _entry(method: str, budget: int, r: dict, settings: dict, source: str, standard: dict | None = None,
           rule: str = "one") -> Acceptance:
    where = f"methods.{method}"
    passes, commits = _histogram(source, where, r)
    ops = [None if d is None or "dispatch_per_pass" not in d else
           _ops(source, f"{name}.dispatch_per_pass.decoder.ops",
                _object(source, f"{name}.dispatch_per_pass.decoder",
                        _object(source, f"{name}.dispatch_per_pass", d["dispatch_per_pass"]).get("decoder")).get("ops"))
           for d, name in ((r, where), (standard, "methods.standard"))]
    # with a commit rule the baseline is standard with it: its own passes (one commit per pass: the commits)
    baseline = (None if _same_rule(rule, "one") or standard is None
                else _histogram(source, "methods.standard", standard)[0])
    return Acceptance(method, budget, commits, passes, _blocks(settings, passes, source),
                      _integer(source, "settings.block_size", settings.get("block_size"), 1), source, *ops, baseline)


def _histogram(source, where: str, r) -> tuple[int, int]:
    """(passes, commits) of an entry's commits_per_pass ({commits: (row, pass) count})."""
    counts = _object(source, f"{where}.commits_per_pass", _object(source, where, r).get("commits_per_pass"))
    hist = {_integer_key(source, f"{where}.commits_per_pass", k, 0):
            _integer(source, f"{where}.commits_per_pass[{k!r}]", v, 0) for k, v in counts.items()}
    passes, commits = sum(hist.values()), sum(k * v for k, v in hist.items())
    if passes < 1 or commits < 1:
        raise ValueError(f"{source}: {where}.commits_per_pass holds no pass that committed anything")
    return passes, commits


def _rule_tables(data: dict, rule: str | None, path) -> tuple[str, dict, dict]:
    """(the rule, its {budget: {method: entry}}, its {method: entry} at the first budget) of a `spot bench --json`
    report: `rule` of a `--rules` report (by_rule; the only one when not given), else the report's own rule."""
    settings = data.get("settings", {})
    if "by_rule" in data:
        by_rule = _object(path, "by_rule", data["by_rule"])
        if rule is None:
            if len(by_rule) != 1:
                raise ValueError(f"{path}: holds the rules {list(by_rule)}; pick one with --rule")
            rule = next(iter(by_rule))
        found = [key for key in by_rule if _same_rule(key, rule)]
        if not found:
            raise ValueError(f"{path}: no rule {rule!r}; it holds {list(by_rule)}")
        rule = found[0]
        entry = _object(path, f"by_rule[{rule!r}]", by_rule[rule])
        where = f"by_rule[{rule!r}].methods"
    else:
        own = settings.get("rule", "one")
        if rule is not None and not _same_rule(own, rule):
            raise ValueError(f"{path}: a report of rule {own!r}, not {rule!r}")
        rule, entry, where = own, data, "methods"
    methods = _object(path, where, entry.get("methods"))
    tables = entry.get("by_budget") or {str(_integer(path, "settings.budget", settings.get("budget"), 1)): methods}
    return str(rule), tables, methods


def _same_rule(a, b) -> bool:
    """Two names of one commit rule: compared by their canonical form (spot.rules.canonical_rule: case, spaces, the
    order of terms and the spelling of numbers aside); a name that is no rule string only equals itself."""
    try:
        return canonical_rule(a) == canonical_rule(b)
    except (TypeError, ValueError):
        return a == b


def load_acceptance(paths, rule: str | None = None) -> list[Acceptance]:
    """Every (method, budget) in the given JSON files, `standard` left out (it is the baseline).

    Accepted: a `spot bench --json` report (its methods at settings.budget, or at every budget of `--budgets`,
    `by_budget`; of a `--rules` report, those of `rule`), or a `bench/budget_curve.py --json` file (commits =
    standard's passes, one commit each). With a commit rule the baseline is `standard` with that rule (its passes,
    Acceptance.standard_passes). A (method, budget) found in several files is taken from the last. Each file is
    read under spot.files' input-file rule (a regular file under a size cap, never waited on) and every figure used
    is checked (JSON types and ranges); errors name the file and the field.
    """
    found: dict[tuple[str, int], Acceptance] = {}
    for path in paths:
        try:
            data = read_json(path)
        except OSError as e:
            raise ValueError(f"{path}: cannot read a benchmark JSON ({e})") from None
        settings, src = _object(path, "settings", data.get("settings", {})), str(path)
        if "runs" in data and "standard_passes" in data:  # bench/budget_curve.py
            standard = _integer(src, "standard_passes", data["standard_passes"], 1)
            runs = data["runs"]
            if not isinstance(runs, list):
                raise ValueError(f"{src}: runs must be a JSON list, got {_short(runs)}")
            for i, r in enumerate(runs):
                r = _object(src, f"runs[{i}]", r)
                passes = _integer(src, f"runs[{i}].target_passes", r.get("target_passes"), 1)
                a = Acceptance(_name(src, f"runs[{i}].method", r.get("method")),
                               _integer(src, f"runs[{i}].budget", r.get("budget"), 1), standard, passes,
                               _blocks(settings, passes, src),
                               _integer(src, "settings.block_size", settings.get("block_size"), 1), src)
                found[a.method, a.budget] = a
        elif "methods" in data:
            own, tables, methods = _rule_tables(data, rule, src)
            for budget, table in _object(src, "by_budget", tables).items():
                budget = _integer_key(src, "by_budget", budget, 1)
                for method, r in _object(src, f"by_budget[{budget}]", table).items():
                    if method != "standard":
                        found[method, budget] = _entry(method, budget, r, settings, src, methods.get("standard"),
                                                       own)
        else:
            raise ValueError(f"{path}: neither a `spot bench --json` report nor a budget_curve.py JSON")
    if not found:
        raise ValueError("no method other than standard in the given JSON files")
    sizes = {a.block_size for a in found.values()}
    if len(sizes) > 1:
        raise ValueError(f"the JSON files mix block sizes {sorted(sizes)}: project one block size at a time")
    return sorted(found.values(), key=lambda a: (a.method, a.budget))


def _name(path, field: str, value) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{path}: {field} must be a method name, got {_short(value)}")
    return value


# ------------------------------------------------------------------------------------------- projection

def decode_seconds(acc: Acceptance, pass_time) -> float:
    """Seconds of target passes for `acc`'s decode, per sequence, given pass_time(nodes, head_nodes)."""
    return acc.first_passes * pass_time(1, 1) + (acc.passes - acc.first_passes) * pass_time(acc.budget, acc.chain)


def speedup(acc: Acceptance, pass_time) -> float:
    """Tokens/s of `acc`'s method over standard's, given pass_time(nodes, head_nodes) in seconds.

    The first pass of a block scores the all-mask root alone; every other pass is charged the full budget (trees
    that stop growing early cost less, so this is conservative). Standard takes its passes (one commit each, or
    one step of the decode's commit rule) at t(1) each."""
    return acc.baseline_passes * pass_time(1, 1) / decode_seconds(acc, pass_time)


def speedup_with_overhead(acc: Acceptance, pass_time, own_s: float, standard_s: float) -> float:
    """`speedup` with a fixed decoder cost per pass added: own_s to each of the method's passes, standard_s to
    standard's."""
    own = acc.first_passes * (pass_time(1, 1) + own_s) \
        + (acc.passes - acc.first_passes) * (pass_time(acc.budget, acc.chain) + own_s)
    return acc.baseline_passes * (pass_time(1, 1) + standard_s) / own


def project(accs, shape: Shape, gpu: GPU, prefix: int = 1024, batch: int = 1, lm_head: str = "all",
            measured: dict[int, float] | None = None) -> list[dict]:
    """One row per (method, budget): commits per pass, roofline pass time and projected speed-up over standard;
    with `measured` ({nodes: seconds per pass}) also the speed-up from the measured pass times."""
    if lm_head not in ("all", "chain"):
        raise ValueError(f"lm_head: 'all' or 'chain', got {lm_head!r}")

    rows = []
    for a in accs:
        def head(n, chain):
            return n if lm_head == "all" else min(n, chain)

        def roof(n, chain, block=a.block_size):
            return pass_seconds(shape, gpu, n, block, prefix, batch, head(n, chain))

        cost = pass_cost(shape, a.budget, a.block_size, prefix, batch, head(a.budget, a.chain))
        row = {"shape": shape.name, "gpu": gpu.name, "method": a.method, "budget": a.budget,
               "commits_per_pass": a.commits_per_pass, "pass_reduction": a.baseline_passes / a.passes,
               "pass_ms": 1e3 * roof(a.budget, a.chain), "pass_ms_standard": 1e3 * roof(1, 1),
               "bound": cost.bound(gpu), "speedup": speedup(a, roof),
               "tokens_per_second": batch * a.commits / decode_seconds(a, roof),
               "tokens_per_second_standard": batch * a.commits / a.baseline_passes / roof(1, 1)}
        if a.decoder_ops is not None and a.standard_ops is not None:
            row["decoder_ops"] = a.decoder_ops
            row["decoder_launch_ms"] = a.decoder_ops * LAUNCH_US / 1e3
            row["speedup_eager_launches"] = speedup_with_overhead(a, roof, a.decoder_ops * LAUNCH_US / 1e6,
                                                                  a.standard_ops * LAUNCH_US / 1e6)
            row["speedup_captured"] = speedup_with_overhead(a, roof, GRAPH_REPLAY_US / 1e6, GRAPH_REPLAY_US / 1e6)
        if measured:
            row["measured_pass_ms"] = 1e3 * interpolate(measured, a.budget)
            row["measured_speedup"] = speedup(a, lambda n, chain: interpolate(measured, n))
        rows.append(row)
    return rows


def interpolate(curve: dict[int, float], nodes: float) -> float:
    """The curve at `nodes`, linear between measured points (and beyond the last, along the last segment)."""
    xs = sorted(curve)
    if nodes in curve:
        return curve[nodes]
    if len(xs) == 1:
        return curve[xs[0]]
    i = max(1, min(len(xs) - 1, sum(x < nodes for x in xs)))
    x0, x1 = xs[i - 1], xs[i]
    return curve[x0] + (curve[x1] - curve[x0]) * (nodes - x0) / (x1 - x0)


def best(rows: list[dict], key: str = "speedup") -> dict[str, dict]:
    """Per method, the row with the highest `key` (ties: the smaller budget)."""
    out: dict[str, dict] = {}
    for r in rows:
        if key in r and (r["method"] not in out or r[key] > out[r["method"]][key]):
            out[r["method"]] = r
    return out


def format_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    measured = "measured_speedup" in rows[0]
    head = (f"{'shape':<11} {'method':<11} {'budget':>6} {'commits/pass':>12} {'pass ms':>8} {'std ms':>7} "
            f"{'bound':<7} {'tok/s':>7} {'std tok/s':>9} {'speed-up':>8}")
    launches = all("speedup_eager_launches" in r for r in rows)
    if measured:
        head += f" {'meas. ms':>9} {'meas. x':>8}"
    if launches:
        head += f" {'dec. ops':>8} {'launch ms':>9} {'eager x':>8} {'capt. x':>8}"
    lines = [f"{LABEL}: {rows[0]['gpu']}", head]
    for r in rows:
        line = (f"{r['shape']:<11} {r['method']:<11} {r['budget']:>6} {r['commits_per_pass']:>12.3f} "
                f"{r['pass_ms']:>8.3f} {r['pass_ms_standard']:>7.3f} {r['bound']:<7} {r['tokens_per_second']:>7.0f} "
                f"{r['tokens_per_second_standard']:>9.0f} {r['speedup']:>7.2f}x")
        if measured:
            line += f" {r['measured_pass_ms']:>9.3f} {r['measured_speedup']:>7.2f}x"
        if launches:
            line += (f" {r['decoder_ops']:>8.0f} {r['decoder_launch_ms']:>9.3f} {r['speedup_eager_launches']:>7.2f}x"
                     f" {r['speedup_captured']:>7.2f}x")
        lines.append(line)
    if launches:
        lines.append(f"eager x / capt. x: the speed-up with the decoder's launches charged per pass, eager (its ops "
                     f"outside the target's forward) or captured (one replay per round); {LAUNCH_SOURCE}")
    for shape in dict.fromkeys(r["shape"] for r in rows):
        for method, r in best([r for r in rows if r["shape"] == shape]).items():
            lines.append(f"best budget ({shape}, {method}): {r['budget']} -> {r['speedup']:.2f}x standard "
                         f"[{LABEL}]")
        if measured:
            for method, r in best([r for r in rows if r["shape"] == shape], "measured_speedup").items():
                lines.append(f"best budget ({shape}, {method}) by measured pass times: {r['budget']} -> "
                             f"{r['measured_speedup']:.2f}x standard [measured pass times x the benchmark's "
                             "commits per pass]")
    return "\n".join(lines)


def format_curve(shape: Shape, gpu: GPU, block: int, prefix: int, batch: int, measured: dict[int, float]) -> str:
    """Measured pass times beside the roofline's, per node count."""
    lines = [f"pass time per node count, {shape.name}, B = {block}, prefix {prefix}, batch {batch}: the {gpu.name} "
             f"roofline [{LABEL}] beside the measured pass",
             f"{'nodes':>5} {'roofline ms':>11} {'measured ms':>11} {'measured/roofline':>17}"]
    for n in sorted(measured):
        roof = pass_seconds(shape, gpu, n, block, prefix, batch)
        lines.append(f"{n:>5} {1e3 * roof:>11.3f} {1e3 * measured[n]:>11.3f} {measured[n] / roof:>17.2f}")
    return "\n".join(lines)


def plot(rows_by_shape: dict[str, list[dict]], path, title: str) -> None:
    """Projected speed-up against budget, one line per (shape, method); measured-curve lines dotted."""
    from .plots import budget_axis, pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    styles = {"spot": "-", "confidence": "--", "oracle": ":"}
    for i, (shape, rows) in enumerate(rows_by_shape.items()):
        color = f"C{i}"
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["budget"])
            ax.plot([r["budget"] for r in mine], [r["speedup"] for r in mine], styles.get(method, "-."), color=color,
                    marker="o", ms=3, label=f"{shape} {method}")
            if mine and "measured_speedup" in mine[0]:
                ax.plot([r["budget"] for r in mine], [r["measured_speedup"] for r in mine], styles.get(method, "-."),
                        color=color, marker="x", alpha=0.6, label=f"{shape} {method} (measured pass time)")
    ax.axhline(1.0, color="grey", lw=0.8)
    budget_axis(ax, [r["budget"] for rows in rows_by_shape.values() for r in rows])
    ax.set_ylabel("tokens/s vs standard")
    ax.set_title(f"{title}\n{LABEL}", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)


# ------------------------------------------------------------------------------------ measured pass time

def shape_config(shape: Shape, layers: int):
    """A `ModelConfig` of `shape`'s width with `layers` layers (its head_dim must be hidden / heads)."""
    from ..model import ModelConfig

    if shape.hidden != shape.heads * shape.head_dim:
        raise ValueError(f"{shape.name}: head_dim {shape.head_dim} x {shape.heads} heads != hidden {shape.hidden}; "
                         "the embedded model class ties head_dim to hidden / heads")
    return ModelConfig(vocab_size=shape.vocab, d_model=shape.hidden, n_layers=layers, n_heads=shape.heads,
                       n_kv_heads=shape.kv_heads, d_ff=shape.intermediate)


def _median_ms(fn, repeats: int = 5) -> float:
    cuda = torch.cuda.is_available()
    fn()  # warm-up: first-call costs (allocations, kernel selection) are not a pass's
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
    return sorted(times)[len(times) // 2]


@torch.no_grad()
def measure_pass_curve(shape: Shape, nodes=(1, 2, 4, 8, 16, 32, 64), block: int = 32, prefix: int = 1024,
                       layers: int = 2, batch: int = 1, device="cpu", dtype=torch.bfloat16, timer=None,
                       deadline: float | None = None, seed: int = 0, on_point=None) -> list[dict]:
    """Time one verification pass of a `layers`-layer stack of `shape`'s width (the project's own model:
    `BlockDiffusionLM` with a cached prefix of `prefix` random keys, nodes through the tree attention) and its
    final norm + LM head, per node count. Per point: ms per layer and ms of the head, and `pass_ms` scaled to the
    full depth (shape.layers x layer + head). `timer(fn) -> ms` (default: median wall time of 5 calls); stops
    early, keeping the points so far, once time.time() passes `deadline`; `on_point(point)` sees each point."""
    import spot_kernels

    from ..model import BlockDiffusionLM, KVCache, TreeLayout, linear

    torch.manual_seed(seed)
    cfg = shape_config(shape, layers)
    with torch.device(device):  # built where it runs: an 8B-wide embedding initialised on a CPU takes a while
        model = BlockDiffusionLM(cfg).to(dtype).eval()
    cache = KVCache(cfg, batch, prefix, dtype, device)
    for t in cache.k + cache.v:
        t.normal_()
    cache.hold(prefix)
    key_start = torch.zeros(batch, dtype=torch.long, device=device)
    timer = timer or _median_ms
    points = []
    for n in nodes:
        if deadline is not None and time.time() > deadline:
            break
        ids = torch.randint(3, cfg.vocab_size, (batch, n * block), device=device)
        positions = (prefix + torch.arange(block, device=device)).repeat(n)[None].expand(batch, -1)
        tree = TreeLayout(key_start, n, block)
        mask = spot_kernels.tree_mask(key_start, prefix, 0, n, block)
        x = model.embed(ids)
        rope = model.rotary_tables(positions, x.dtype)

        def stack():
            h = x
            for i, layer in enumerate(model.layers):
                h = layer(h, rope, mask, cache, i, None, tree)
            return h

        def head():
            return linear(model.norm(x), model.embed.weight)

        layer_ms = timer(stack) / layers
        head_ms = timer(head)
        points.append({"nodes": n, "layer_ms": layer_ms, "head_ms": head_ms,
                       "pass_ms": shape.layers * layer_ms + head_ms})
        if on_point is not None:
            on_point(points[-1])
    return points


def measured_curve(path, shape: Shape | None = None, block: int | None = None) -> tuple[dict, dict[int, float]]:
    """The pass-time curve bench/gpu_bench.py wrote (its "pass_curve"), as {nodes: seconds}, and its settings; read
    and checked as `load_acceptance` reads a report (errors name the file and the field)."""
    where = f"--measured {path}"
    try:
        data = read_json(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"--measured {e}") from None
    curve = data.get("pass_curve")
    if not curve or not isinstance(curve, dict) or not curve.get("points"):
        raise ValueError(f"{where}: holds no pass_curve points (bench/gpu_bench.py writes them on a GPU)")
    if not isinstance(curve["points"], list):
        raise ValueError(f"{where}: pass_curve.points must be a JSON list, got {_short(curve['points'])}")
    if curve.get("shape") not in SHAPES:
        raise ValueError(f"{where}: pass_curve.shape must be one of {','.join(SHAPES)}, got "
                         f"{_short(curve.get('shape'))}")
    for name, low in (("block", 1), ("prefix", 0), ("batch", 1), ("layers_measured", 1)):
        _integer(where, f"pass_curve.{name}", curve.get(name), low)
    if shape is not None and curve["shape"] != shape.name:
        raise ValueError(f"{where}: measured shape {curve['shape']}, not {shape.name}")
    if block is not None and curve["block"] != block:
        raise ValueError(f"{where}: measured at B = {curve['block']}, the benchmark ran B = {block}")
    seconds = {}
    for i, point in enumerate(curve["points"]):
        point = _object(where, f"pass_curve.points[{i}]", point)
        ms = _ops(where, f"pass_curve.points[{i}].pass_ms", point.get("pass_ms"))
        if ms <= 0:
            raise ValueError(f"{where}: pass_curve.points[{i}].pass_ms must be > 0, got {ms!r}")
        seconds[_integer(where, f"pass_curve.points[{i}].nodes", point.get("nodes"), 1)] = ms / 1e3
    return curve, seconds
