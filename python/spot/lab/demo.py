"""`spot demo` (what `make demo` runs): what SPOT saves and where it pays, on one screen.

One held-out prompt, decoded by the embedded target with standard, confidence and spot, all to the same tokens
(T = 0, no early stop, so every method does the same job):
  1. target passes at tree budgets a GPU runs in about one pass's time (4 and 16): the pass reduction, which is the
     product; then, over the parallel commit rules other samplers run (LLaDA's k per step, Fast-dLLM's threshold),
     the rule alone against SPOT over it (docs/rules.md);
  2. the commit order of spot's first block: which pass committed each position;
  3. this CPU: CPU time per token (time.process_time, one thread, the least of ROUNDS decodes taking turns: the work
     done, which another job's load moves far less than it moves wall time), and what `--budget auto` picks here
     and why, from the tuned table (python/spot/weights/budgets.json, written by `spot build tune`);
  4. what the pass reduction is worth for an 8B-shaped model on an H200: a roofline projection of this run's own
     commits per pass (spot/lab/project.py, docs/projection.md), labelled as one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..budgets import BUDGETS_FILE, default_budget, device_key, tuned_entry
from ..decode import generate
from .plots import format_commit_order
from .project import GPUS, LABEL, SHAPES, Acceptance, best, project

METHODS = ("standard", "confidence", "spot")
# Trees a GPU scores in about the time of one node: 4 nodes of 32 tokens keep an 8B pass memory-bound on an H200,
# 16 do for smaller models or blocks (docs/projection.md).
GPU_BUDGETS = (4, 16)
SHAPE, GPU = "qwen3-8b", "h200"
# Parallel commit rules shown beside one commit per pass: LLaDA's two commits per step at B = 32, and the threshold
# Fast-dLLM's scripts use (as SGLang and LLaDA2 compare it, strictly).
RULES = ("steps:16", "threshold:0.9")
ROUNDS = 2  # decodes of each method; the CPU time shown is the least of them


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
           block_size: int, rule: str = "one") -> Run:
    starts: dict[int, list[int]] = {}

    def on_pass(block, step, stale):
        starts.setdefault(int(block[0]), []).append(int(step[0]))

    begin = time.process_time()
    out = generate(target, [prompt], method, drafter=drafter if method == "spot" else None, budget=budget,
                   max_new_tokens=max_new_tokens, block_size=block_size, temperature=0.0, eos_id=None,
                   on_pass=on_pass, rule=rule)
    cpu = time.process_time() - begin
    return Run(method, budget, out.tokens[0], out.stats.target_passes, cpu, out.orders[0].tolist(), starts)


def decode_rounds(target, prompt: list[int], plan, drafter, max_new_tokens: int, block_size: int,
                  rounds: int) -> list[Run]:
    """Each (method, budget) of `plan` decoded `rounds` times, in turns (every other round in reverse order, so drift
    in the machine's load falls on all alike); per entry the run that took the least CPU time. The decodes of an
    entry are the same work (same tokens, same passes), so the least CPU time is the one least disturbed."""
    fastest: dict[int, Run] = {}
    for r in range(rounds):
        order = range(len(plan)) if r % 2 == 0 else reversed(range(len(plan)))
        for i in order:
            method, budget = plan[i]
            run = decode(target, prompt, method, budget, drafter, max_new_tokens, block_size)
            if i in fastest and (run.tokens, run.passes) != (fastest[i].tokens, fastest[i].passes):
                raise RuntimeError(f"spot demo: {method} at budget {budget} decoded differently in two rounds")
            if i not in fastest or run.cpu_seconds < fastest[i].cpu_seconds:
                fastest[i] = run
    return [fastest[i] for i in range(len(plan))]


def acceptance(run: Run, block_size: int) -> Acceptance:
    """The run's commits per pass as project.py reads them from a benchmark (one sequence, every block whole)."""
    blocks = -(-len(run.tokens) // block_size)
    return Acceptance(run.method, run.budget, len(run.tokens), run.passes, min(blocks, run.passes), block_size,
                      "spot demo")


def run_demo(target, drafter, prompt: list[int], max_new_tokens: int = 96, block_size: int = 32,
             budgets=GPU_BUDGETS, device="cpu", rounds: int = ROUNDS) -> str:
    """Decode `prompt` with every method (confidence and spot at each of `budgets`, and spot at the budget
    `--budget auto` picks for `device`) and return the demo's screen (see the module docstring)."""
    # One tiny decode down the drafter's path first, so one-time costs (lazy imports, first calls) are no method's.
    generate(target, [prompt], "spot", drafter=drafter, max_new_tokens=2, block_size=2, budget=2, eos_id=None)
    auto = default_budget(device, block_size, 0.0)
    plan = [("standard", 1)] + [(m, n) for n in budgets for m in METHODS[1:]] + [("spot", auto)]
    std, *trees, auto_run = decode_rounds(target, prompt, plan, drafter, max_new_tokens, block_size, rounds)
    head = [f"SPOT demo: the embedded target, one held-out prompt, {len(std.tokens)} new tokens in blocks of "
            f"{block_size}, T = 0,", "no early stop: every method decodes the same tokens."]
    largest = [r for r in trees if r.method == "spot" and r.budget == max(budgets)][0]
    over_rules = [(rule, decode(target, prompt, "standard", 1, None, max_new_tokens, block_size, rule),
                   decode(target, prompt, "spot", max(budgets), drafter, max_new_tokens, block_size, rule))
                  for rule in RULES]
    sections = [head, _passes(std, trees) + _rule_lines(over_rules), _commit_order(largest),
                _cpu(std, trees, auto_run) + _auto_lines(device, block_size, auto), _projection(trees, block_size)]
    return "\n".join(line for section in sections for line in section + [""]).rstrip()


def _passes(std: Run, trees: list[Run]) -> list[str]:
    lines = ["1. Target passes, at tree budgets (nodes one pass scores) a GPU runs in about one pass's time:",
             f"   {'standard':<11}{std.passes:>5} passes (one commit per pass)"]
    for run in trees:
        exact = "same tokens as standard" if run.tokens == std.tokens else "OTHER TOKENS THAN STANDARD (a bug)"
        lines.append(f"   {run.method:<11}{run.passes:>5} passes at budget {run.budget:<3} "
                     f"{std.passes / run.passes:.2f}x fewer than standard, {exact}")
    return lines


def _rule_lines(over_rules) -> list[str]:
    lines = ["   Over the parallel rules other samplers run, several commits per pass (docs/rules.md), at the largest "
             "budget:"]
    for rule, alone, spot in over_rules:
        exact = "same tokens" if spot.tokens == alone.tokens else "OTHER TOKENS THAN THE RULE ALONE (a bug)"
        lines.append(f"   {rule:<14} the rule alone {alone.passes:>3} passes ({len(alone.tokens) / alone.passes:.2f} "
                     f"tokens/pass), spot over it {spot.passes:>3}: {alone.passes / spot.passes:.2f}x fewer, {exact}")
    return lines


def _commit_order(run: Run) -> list[str]:
    # where blocks sit at absolute positions (SDAR's attention) the first block opens with the prompt's last tokens:
    # the first block whose positions were all generated shows the order
    whole = [b for b in sorted(run.pass_starts) if -1 not in run.orders[b]]
    first = whole[0] if whole else min(run.pass_starts)
    return [f"2. The commit order of {run.method}'s first whole block at budget {run.budget}: under each position, the "
            "pass that committed it", "   (0-9, then a-z):",
            format_commit_order(run.orders[first], run.pass_starts[first], f"{run.method} block {first}: ")]


def _cpu(std: Run, trees: list[Run], auto_run: Run) -> list[str]:
    lines = ["3. This CPU, one thread: CPU time per token, the least of each method's decodes (time.process_time",
             "   counts the work done, which other jobs' load moves far less than it moves wall time):"]
    for run in [std, *trees, auto_run]:
        label = f"budget {run.budget}" + (" (--budget auto)" if run is auto_run else "")
        lines.append(f"   {run.method:<11}{label:<24}{run.cpu_ms_per_token:>7.2f} ms/token  {run.passes:>4} passes")
    if auto_run.budget == 1:
        lines.append("   (spot at budget 1 runs standard's pass, no drafter call: identical work, so the difference "
                     "between")
        lines.append("   those two lines is this machine's noise)")
    return lines


def _projection(trees: list[Run], block_size: int) -> list[str]:
    rows = project([acceptance(r, block_size) for r in trees], SHAPES[SHAPE], GPUS[GPU])
    fastest = best(rows)  # per method, the budget with the highest projected speed-up
    lines = [f"4. A {SHAPE}-shaped model (bf16, prefix 1024, batch 1) on an {GPU.upper()}, from this run's commits "
             "per pass:", f"   {LABEL} (`spot project`, docs/projection.md)",
             f"   {'standard':<11}{rows[0]['tokens_per_second_standard']:>6.0f} tokens/s projected"]
    for r in rows:
        mark = f"  ({r['method']}'s best budget)" if fastest[r["method"]] is r else ""
        lines.append(f"   {r['method']:<11}{r['tokens_per_second']:>6.0f} tokens/s projected, {r['speedup']:.2f}x "
                     f"standard at budget {r['budget']} ({r['bound']}-bound pass){mark}")
    return lines


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
    from ..prompts import held_out_prompts

    return target.tokenizer.encode(held_out_prompts(1)[0])


def demo_screen(max_new_tokens: int = 96, block_size: int = 32, budgets=GPU_BUDGETS, device: str = "cpu",
                rounds: int = ROUNDS) -> str:
    """The demo on the shipped embedded target and drafter (what `spot demo` prints)."""
    from .. import load_drafter
    from ..loading import load_target

    target = load_target("default", device=device)
    drafter = load_drafter(device=device)
    return run_demo(target, drafter, demo_prompt(target), max_new_tokens, block_size, budgets, device, rounds)
