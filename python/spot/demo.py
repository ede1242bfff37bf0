"""`spot demo` (what `make demo` runs): what SPOT saves and where it pays, on one screen.

One held-out prompt, decoded by the embedded target with standard, confidence and spot, all to the same tokens
(T = 0, no early stop, so every method does the same job):
  1. target passes at tree budgets a GPU runs in about one pass's time (4 and 16): the pass reduction, which is the
     product;
  2. the commit order of spot's first block: which pass committed each position;
  3. this CPU: CPU time per token (time.process_time, one thread: the work done, which another job's load does not
     move the way it moves wall time), and what `--budget auto` picks here and why, from the tuned table
     (python/spot/weights/budgets.json, written by `spot build tune`);
  4. what the pass reduction is worth for an 8B-shaped model on an H200: a roofline projection of this run's own
     commits per pass (spot/project.py, docs/projection.md), labelled as one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .budgets import BUDGETS_FILE, default_budget, device_key, tuned_entry
from .decode import generate
from .plots import format_commit_order
from .project import GPUS, LABEL, SHAPES, Acceptance, best, project

METHODS = ("standard", "confidence", "spot")
# Trees a GPU scores in about the time of one node: 4 nodes of 32 tokens keep an 8B pass memory-bound on an H200,
# 16 do for smaller models or blocks (docs/projection.md).
GPU_BUDGETS = (4, 16)
SHAPE, GPU = "qwen3-8b", "h200"


@dataclass
class Run:
    """One method's decode of the demo prompt."""

    method: str
    budget: int
    tokens: list[int]
    passes: int
    cpu_seconds: float  # time.process_time over the decode
    orders: list[list[int]]  # per block, positions in commit order
    pass_starts: dict[int, list[int]]  # block -> commit step before each of its passes

    @property
    def cpu_ms_per_token(self) -> float:
        return 1e3 * self.cpu_seconds / len(self.tokens)


def decode(target, prompt: list[int], method: str, budget: int, drafter, max_new_tokens: int,
           block_size: int) -> Run:
    starts: dict[int, list[int]] = {}

    def on_pass(block, step, stale):
        starts.setdefault(int(block[0]), []).append(int(step[0]))

    begin = time.process_time()
    out = generate(target, [prompt], method, drafter=drafter if method == "spot" else None, budget=budget,
                   max_new_tokens=max_new_tokens, block_size=block_size, temperature=0.0, eos_id=None,
                   on_pass=on_pass)
    cpu = time.process_time() - begin
    return Run(method, budget, out.tokens[0], out.stats.target_passes, cpu, out.orders[0].tolist(), starts)


def acceptance(run: Run, block_size: int) -> Acceptance:
    """The run's commits per pass as project.py reads them from a benchmark (one sequence, every block whole)."""
    blocks = -(-len(run.tokens) // block_size)
    return Acceptance(run.method, run.budget, len(run.tokens), run.passes, min(blocks, run.passes), block_size,
                      "spot demo")


def run_demo(target, drafter, prompt: list[int], max_new_tokens: int = 96, block_size: int = 32,
             budgets=GPU_BUDGETS, device="cpu") -> str:
    """Decode `prompt` with every method (confidence and spot at each of `budgets`, and spot at the budget
    `--budget auto` picks for `device`) and return the demo's screen (see the module docstring)."""
    # One tiny decode down the drafter's path first, so one-time costs (lazy imports, first calls) are no method's.
    generate(target, [prompt], "spot", drafter=drafter, max_new_tokens=2, block_size=2, budget=2, eos_id=None)
    std = decode(target, prompt, "standard", 1, None, max_new_tokens, block_size)
    runs = {(m, n): decode(target, prompt, m, n, drafter, max_new_tokens, block_size)
            for n in budgets for m in METHODS[1:]}
    auto = default_budget(device, block_size, 0.0)
    auto_run = decode(target, prompt, "spot", auto, drafter, max_new_tokens, block_size)
    lines = [f"SPOT demo: the embedded target, one held-out prompt, {len(std.tokens)} new tokens in blocks of "
             f"{block_size}, T = 0,", "no early stop: every method decodes the same tokens.", ""]

    lines.append("1. Target passes, at tree budgets (nodes one pass scores) a GPU runs in about one pass's time:")
    lines.append(f"   {'standard':<11}{std.passes:>5} passes (one commit per pass)")
    for (method, budget), run in runs.items():
        exact = "same tokens as standard" if run.tokens == std.tokens else "OTHER TOKENS THAN STANDARD (a bug)"
        lines.append(f"   {method:<11}{run.passes:>5} passes at budget {budget:<3} {std.passes / run.passes:.2f}x "
                     f"fewer than standard, {exact}")

    spot = runs["spot", max(budgets)]
    first = min(spot.pass_starts)
    lines += ["", f"2. The commit order of spot's first block at budget {spot.budget}: under each position, the pass "
              "that committed it", "   (0-9, then a-z):",
              format_commit_order(spot.orders[first], spot.pass_starts[first], f"spot block {first}: ")]

    lines += ["", "3. This CPU, one thread: CPU time per token (time.process_time counts the work done, which other "
              "jobs' load", "   moves far less than it moves wall time; the same work costs about the same):"]
    for run in [std, *runs.values(), auto_run]:
        label = f"budget {run.budget}" + (" (--budget auto)" if run is auto_run else "")
        lines.append(f"   {run.method:<11}{label:<24}{run.cpu_ms_per_token:>7.2f} ms/token  {run.passes:>4} passes")
    lines += _auto_lines(device, block_size, auto)

    rows = project([acceptance(r, block_size) for r in runs.values()], SHAPES[SHAPE], GPUS[GPU])
    fastest = best(rows)  # per method, the budget with the highest projected speed-up
    lines += ["", f"4. A {SHAPE}-shaped model (bf16, prefix 1024, batch 1) on an {GPU.upper()}, from this run's "
              "commits per pass:", f"   {LABEL} (`spot project`, docs/projection.md)",
              f"   {'standard':<11}{rows[0]['tokens_per_second_standard']:>6.0f} tokens/s projected"]
    for r in rows:
        mark = "  (best)" if fastest[r["method"]] is r else ""
        lines.append(f"   {r['method']:<11}{r['tokens_per_second']:>6.0f} tokens/s projected, {r['speedup']:.2f}x "
                     f"standard at budget {r['budget']} ({r['bound']}-bound pass){mark}")
    return "\n".join(lines)


def _auto_lines(device, block_size: int, auto: int) -> list[str]:
    """What --budget auto picked on this machine, and why: the tuned table's measurements."""
    where = f"{device_key(device)}, B = {block_size}, T = 0"
    entry = tuned_entry(device, block_size, 0.0)
    if entry is None:
        return [f"   --budget auto picks {auto} for {where}: nothing was tuned for it in {BUDGETS_FILE.name} (the "
                "fallback; `spot build tune` measures it)"]
    gain = entry.get("min_gain", 0.0)
    lines = [f"   --budget auto picks {auto} for {where} (python/spot/weights/{BUDGETS_FILE.name}):",
             f"   `spot build tune` ({entry.get('prompts', '?')} prompts, one thread) keeps the root alone (budget 1) "
             f"unless a tree", f"   beats it by {gain:.0%} on both clocks:"]
    for key, name, fmt in (("tokens_per_second", "tokens/s", "{:.1f}"),
                           ("cpu_tokens_per_second", "tokens per CPU s", "{:.1f}"),
                           ("commits_per_pass", "commits/pass", "{:.2f}")):
        if key in entry:
            lines.append(f"     {name:<17}" + "  ".join(f"{n}: {fmt.format(v):>5}" for n, v in
                                                     sorted((int(n), v) for n, v in entry[key].items())))
    lines += ["   why: on a CPU a pass costs about nodes x block tokens, so beyond a few nodes a bigger tree",
              "   costs more than the passes it saves; on a GPU a memory-bound pass carries extra nodes nearly free,",
              "   which is where SPOT pays (4. below)."]
    return lines


def demo_prompt(target) -> list[int]:
    """The first shipped held-out prompt (spot/assets), encoded."""
    from .prompts import held_out_prompts

    return target.tokenizer.encode(held_out_prompts(1)[0])


def main(max_new_tokens: int = 96, block_size: int = 32, budgets=GPU_BUDGETS, device: str = "cpu") -> str:
    from . import load_drafter
    from .loading import load_target

    torch.manual_seed(0)
    target = load_target("default", device=device)
    drafter = load_drafter(device=device)
    return run_demo(target, drafter, demo_prompt(target), max_new_tokens, block_size, budgets, device)
