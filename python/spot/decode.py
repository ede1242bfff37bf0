"""`spot.generate`: standard, confidence-drafted, SPOT and oracle decoding of a block-diffusion target.

Every method runs the same loop: build a tree of candidate block states (standard: the root alone), score all of
it in ONE target pass, and let `verify_tree` accept the longest chain that equals the target's own trajectory
(docs/design.md §2.2-2.4). Commits use the coupled noise of (seed, row, absolute position, commit step), so every exact
method yields the tokens of `standard` at any temperature.
"""

from __future__ import annotations

import math
import operator
import time
from collections import Counter
from dataclasses import dataclass, field, replace

import torch

from spot_kernels import CONFIDENCE_KINDS

from . import limits
from .drafters import ConfidenceDrafter, Drafter, OracleDrafter, StaleFeatures, default_top_k, drafter_limits
from .limits import MIN_TEMPERATURE  # noqa: F401 (spot.sglang reads it here)
from .round import RoundConfig, RoundFunctions, compiled
from .rules import CommitRule, parse_rule, rule_confidence
from .target import Target, warn_if_not_batch_invariant
from .settings import Batching, TreeSettings

METHODS = ("standard", "confidence", "spot", "oracle")


@dataclass
class DecodeStats:
    method: str
    target_passes: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    commits_per_pass: Counter = field(default_factory=Counter)  # commits -> (row, pass) count
    # wall seconds per stage: "draft" (tree growth + drafter), "target" (passes up to the LM head), "verify" (the
    # LM head of the nodes scored, scoring + acceptance); host timers, so only meaningful on CPU or with
    # synchronous CUDA (CUDA_LAUNCH_BLOCKING=1)
    stage_seconds: Counter = field(default_factory=Counter)

    @property
    def passes_per_token(self) -> float:
        return self.target_passes / self.generated_tokens if self.generated_tokens else math.inf

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else math.inf


@dataclass
class GenerateOutput:
    tokens: list[list[int]]  # generated tokens per prompt, cut after the first end-of-sequence token
    stats: DecodeStats
    orders: torch.Tensor  # int64 [batch, blocks, B]: positions in commit order, per block (-1: never committed,
    # i.e. filled after an end-of-sequence token, or a block never reached)


def generate(target: Target, prompts, method: str = "standard", *, max_new_tokens: int = 256,
             block_size: int = 32, temperature: float = 0.0, seed: int = 0, drafter: Drafter | None = None,
             budget: int | None = None, tree: TreeSettings | None = None, batching: Batching | None = None,
             eos_id: int | None = -1, confidence: str = "prob", top_k: int | None = None, rows=None,
             backend: str = "auto", orders: torch.Tensor | None = None, on_pass=None, progress=None,
             allow_partial_block: bool = False, rule="one") -> GenerateOutput:
    """Decode `prompts` (a list of token-id lists) with one of METHODS.

    drafter: the order drafter for method="spot"; one with an `observe(stale, root_masked, accepted_pos, n_acc,
    rows)` method is also handed every pass's commits (spot.online.OnlineCalibrated learns from them).
    tree: the draft tree's shape and how its round runs (spot.settings.TreeSettings: budget, width, branch,
    static, compile, score_all_nodes; default TreeSettings()). budget: the one tree setting most calls change,
    the most nodes (root included) a pass may score: given, it replaces tree.budget.
    batching: how prompts share the target's rows (spot.settings.Batching: max_batch for continuous batching,
    lockstep; default Batching(), every prompt at once).
    eos_id: stop id (-1: the target's own; None: never stop).
    top_k: the stale top-K kept per position, what trees draft tokens from (None: spot.drafters.default_top_k when
    a method drafts, 512 for a commit rule other than one at T > 0, else 32; 32 for `standard`).
    rows: noise row id per prompt (default 0..batch-1) so that results do not depend on batch composition.
    orders: for method="oracle", the `orders` of a `standard` run with the same arguments (else one is run,
    uncounted, to find them).
    on_pass: an optional callable(block_index, step, stale) called after every pass with each row's block index
    and commit step before the pass (int64 [rows]) and the StaleFeatures it produced (`spot build collect` records
    trajectories with it).
    progress: an optional callable(done_blocks, total_blocks).
    allow_partial_block: a block is always decoded whole (every one of its positions costs passes) and the output
    cut to max_new_tokens, so block_size > max_new_tokens is refused (it would spend up to block_size passes on
    fewer tokens) unless this is True.
    rule: the commit rule `standard` follows and every other method speculates (spot.rules, docs/rules.md): "one"
    (one commit per step, the default), "steps:N", "threshold:T[,steps:N][,cmp:ge]", "factor:F", "dream:N[,alg:A]",
    a spot.rules.CommitRule, or "family" (a family target's own sampler default, its `default_rule`). A rule that
    names a confidence (Dream's alg) sets `confidence` unless another one is given.

    Arguments are checked before any work (spot.limits): temperature is 0 (greedy) or in [MIN_TEMPERATURE,
    the largest float32] (below it, or above it in float32, the scaled logits overflow); the estimated memory of a
    pass over the rows in flight and of the per-prompt outputs stays under SPOT_MEMORY_LIMIT_GB; integers may be
    Python or NumPy integers, never bools; rows lie in [0, 2**32) (the coupled noise reads their low 32 bits,
    docs/noise.md); eos_id is None, -1 or an id of the vocabulary.
    """
    tree, batching = _tree_settings(tree, budget), _settings_object("batching", batching, Batching)
    rule, confidence = resolve_rule(rule, target, method, block_size, confidence)
    if method == "confidence":  # before the checks: its trees take this drafter's branch
        drafter = confidence_drafter(rule)
    prompts, max_new_tokens, block_size, seed, temperature, eos_id, rows, tree = _check_args(
        target, prompts, method, max_new_tokens=max_new_tokens, block_size=block_size, temperature=temperature,
        seed=seed, tree=tree, batching=batching, drafter=drafter, confidence=confidence, top_k=top_k, eos_id=eos_id,
        rows=rows, allow_partial_block=allow_partial_block, progress=progress, on_pass=on_pass, orders=orders,
        rule=rule)
    if eos_id == -1:
        eos_id = target.eos_id
    b, dev = len(prompts), target.device
    rows = torch.arange(b, device=dev) if rows is None else rows.to(dev)
    if method == "oracle":  # the true order comes from a standard run that is not counted
        if orders is None:
            orders = generate(target, prompts, "standard", max_new_tokens=max_new_tokens, block_size=block_size,
                              temperature=temperature, seed=seed, eos_id=eos_id, confidence=confidence,
                              top_k=top_k, rows=rows, backend=backend, batching=batching,
                              allow_partial_block=allow_partial_block, rule=rule).orders
        drafter = OracleDrafter(orders.to(dev), ranked=not rule.is_one)
    round_fns = RoundFunctions() if tree.compile is None else compiled(tree.compile, target.device.type == "cuda")
    # budget 1 is the root alone: standard decoding's pass, with no drafter call and no stale features to build
    if method == "standard" or tree.budget == 1:
        drafter = None
    if top_k is None:  # what trees draft tokens from (on_pass reads standard's: pass top_k)
        top_k = default_top_k(rule.is_one, temperature, drafts=drafter is not None)
    cfg = RoundConfig(target.mask_id, seed, temperature, confidence, min(top_k, target.vocab_size), backend,
                      tree.budget, tree.width, tree.branch, eos_id, tree.static, tree.score_all_nodes,
                      None if rule.is_one else rule.tables(block_size, dev), 0 if drafter is None else tree.probes)
    stats = DecodeStats(method)

    t0 = time.perf_counter()
    width_of_batch = b if batching.max_batch is None else min(b, batching.max_batch)
    session = target.start(prompts[:width_of_batch], max_new_tokens, block_size, backend=backend)
    per_row = session.per_row and not batching.lockstep
    if width_of_batch < b and not per_row:
        raise ValueError(f"Batching.max_batch: {b} prompts through {width_of_batch} rows needs a target whose "
                         f"sessions admit rows ({type(target).__name__} keeps rows in lock-step): decode them in "
                         "groups instead")
    # A block-aligned session (SDAR, LLaDA2: spot.families) opens the first block with each prompt's last
    # len % block_size tokens (`prompt_head`): they take block positions and are not output.
    # A prompt admitted later (per-row batching) reads its head when it joins; the block count covers every prompt's.
    head = list(getattr(session, "prompt_head", None) or [0] * width_of_batch) + [0] * (b - width_of_batch)
    most_head = max((len(p) % block_size for p in prompts), default=0) if getattr(target, "aligned_blocks", False) \
        else max(head, default=0)
    n_blocks = -(-(max_new_tokens + most_head) // block_size) if max_new_tokens else 0
    commit_orders = _CommitOrders(b, n_blocks, block_size, dev)
    blocks: list[list[torch.Tensor]] = [[] for _ in range(b)]
    slots = _Slots(list(range(width_of_batch)) if n_blocks else [], block_size, target.mask_id, dev)
    slots.new_blocks(list(range(len(slots))), session.initial_block(block_size))
    waiting = list(range(width_of_batch, b)) if n_blocks else []
    done_blocks = 0
    while len(slots):
        complete, has_eos = _one_pass(cfg, drafter, target, session, slots, commit_orders, stats, on_pass, rows,
                                      round_fns)
        if not any(complete) or not (per_row or all(complete)):
            continue  # lock-step: every row waits for the slowest
        finished = [i for i, c in enumerate(complete) if c]
        finished_t = torch.tensor(finished, dtype=torch.long, device=dev)
        if per_row:
            session.append(slots.block[finished_t], rows=finished_t)
        else:
            session.append(slots.block)  # the Session contract's lock-step form: every row
        for i in finished:
            blocks[slots.sequence[i]].append(slots.block[i].clone())
            slots.block_index[i] += 1
        done_blocks += len(finished)
        over = [c and (slots.block_index[i] >= n_blocks or (eos_id is not None and e))
                for i, (c, e) in enumerate(zip(complete, has_eos))]
        if progress is not None:
            progress(done_blocks, b * n_blocks)
        if per_row:  # rows that are over leave the session; the others start their next block at once
            keep = [i for i, o in enumerate(over) if not o]
            if len(keep) < len(slots):
                session.release(torch.tensor(keep, dtype=torch.long, device=dev))
                slots.keep(keep)
                complete = [complete[i] for i in keep]
            slots.new_blocks([i for i, c in enumerate(complete) if c])
            if waiting and len(slots) < width_of_batch:  # waiting prompts take the free rows, in order
                new, waiting = waiting[:width_of_batch - len(slots)], waiting[width_of_batch - len(slots):]
                session.admit([prompts[i] for i in new])
                slots.admit(new)
                if session.prompt_head is not None:  # block-aligned: the joining prompts open their first blocks
                    for i, h in zip(new, session.prompt_head[-len(new):]):
                        head[i] = h
                    slots.new_blocks(list(range(len(slots) - len(new), len(slots))),
                                     session.initial_block(block_size))
        else:
            slots.over = [a or o for a, o in zip(slots.over, over)]
            if all(slots.over):
                break
            slots.new_blocks(list(range(len(slots))))  # every row starts a later block: no prompt head in it
            # a row that is over rides along, its block complete, until the last row is over
            riding = torch.tensor(slots.over, device=dev)
            slots.block = torch.where(riding[:, None], eos_id if eos_id is not None else target.mask_id,
                                      slots.block)
    stats.target_passes = session.passes
    # every row's tokens in one device-to-host copy; a block-aligned session's prompt head is not output
    flat = torch.cat([t for row in blocks for t in row]).tolist() if any(blocks) else []
    tokens, at = [], 0
    for i, row in enumerate(blocks):
        n = sum(len(t) for t in row)
        skip = head[i] if i < len(head) else 0
        tokens.append(_cut(flat[at + skip:at + n], max_new_tokens, eos_id))
        at += n
    stats.generated_tokens = sum(len(t) for t in tokens)
    stats.seconds = time.perf_counter() - t0
    return GenerateOutput(tokens, stats, commit_orders.tensor())


class _Slots:
    """Where every row of the session stands: the prompt it decodes and its block index (host lists, kept by the
    loop), its block state and commits so far (device), and the stale features its next tree is drafted from
    (valid once the block has had a pass: `has_stale`, on both sides)."""

    def __init__(self, sequence: list[int], block_size: int, mask_id: int, device):
        n = len(sequence)
        self.device, self.block_size, self.mask_id = device, block_size, mask_id
        self.sequence = list(sequence)  # prompt index of each row
        self.block_index = [0] * n
        self.over = [False] * n  # lock-step only: done, riding along
        self.has_stale = [False] * n
        self.block = torch.full((n, block_size), mask_id, dtype=torch.long, device=device)
        self.step = torch.zeros(n, dtype=torch.long, device=device)  # the commit rule's steps taken in each row's
        # block (one commit per step: its commits), the coupled noise's step
        self.commits = None  # [b] int64 commits in each row's block, where they differ from `step` (with a rule)
        self.stale: StaleFeatures | None = None

    def __len__(self) -> int:
        return len(self.sequence)

    def new_blocks(self, index: list[int], initial: torch.Tensor | None = None) -> None:
        """Rows `index` start a block: every position masked (or `initial`, the session's state of it)."""
        if not index:
            return
        at = torch.tensor(index, dtype=torch.long, device=self.device)
        self.block[at] = self.mask_id if initial is None else initial[at]
        self.step[at] = 0
        if self.commits is not None:
            self.commits[at] = 0
        for i in index:
            self.has_stale[i] = False

    def keep(self, index: list[int]) -> None:
        at = torch.tensor(index, dtype=torch.long, device=self.device)
        for name in ("sequence", "block_index", "over", "has_stale"):
            setattr(self, name, [getattr(self, name)[i] for i in index])
        self.commits = None if self.commits is None else self.commits[at]
        self.block, self.step = self.block[at], self.step[at]
        if self.stale is not None:
            self.stale = self.stale.select(at)

    def admit(self, sequence: list[int]) -> None:
        new = _Slots(sequence, self.block_size, self.mask_id, self.device)
        for name in ("sequence", "block_index", "over", "has_stale"):
            setattr(self, name, getattr(self, name) + getattr(new, name))
        if self.commits is not None:
            self.commits = torch.cat((self.commits, new.step))  # zeros
        self.block, self.step = torch.cat((self.block, new.block)), torch.cat((self.step, new.step))
        self.stale = None if self.stale is None else self.stale.pad(len(sequence))


def _one_pass(cfg: RoundConfig, drafter: Drafter | None, target: Target, session, slots: _Slots,
              commit_orders: _CommitOrders, stats: DecodeStats, on_pass, all_rows: torch.Tensor,
              round_fns: RoundFunctions = RoundFunctions()) -> tuple[list, list]:
    """One target pass over every row: draft a tree from the row's stale features, score it, accept the longest
    chain that equals the target's own commits (spot.round); record the commit order in `commit_orders`. Returns,
    per row, whether its block is complete and whether it holds an end-of-sequence token: the pass's one host
    sync."""
    dev = slots.block.device
    t_draft = time.perf_counter()
    sequence = torch.tensor(slots.sequence, dtype=torch.long, device=dev)
    block_index = torch.tensor(slots.block_index, dtype=torch.long, device=dev)
    rows = all_rows[sequence]
    drafted = any(slots.has_stale)  # known on the host: no tree for a pass whose rows all start a block
    has_stale = torch.tensor(slots.has_stale, device=dev) if drafted and not all(slots.has_stale) else None
    need_stale = drafter is not None or on_pass is not None  # nothing reads them otherwise
    drafter_now = drafter if drafted else None
    block_start = session.block_start
    # a compiled round runs a pass that appends nothing whole, the target's forward inside its graph (one CUDA
    # graph replay per pass on a GPU); its time is all counted as the target's
    forward = session.capturable_pass() if round_fns.whole is not None else None
    if forward is not None:
        t_target = time.perf_counter()
        tree, out = round_fns.whole(cfg, drafter_now, forward, slots.block, slots.step, rows, block_start,
                                    slots.stale, has_stale, block_index, sequence, need_stale)
        warn_if_not_batch_invariant(target, getattr(target, "compute_dtype", torch.float32))
        t_verify = time.perf_counter()
    else:
        tree = round_fns.draft(cfg, drafter_now, slots.block, slots.step, rows, slots.stale, has_stale)
        t_target = time.perf_counter()
        logits = session.score_lazily(tree.states)  # the LM head runs in the scorer, for the nodes it scores
        warn_if_not_batch_invariant(target, logits.dtype)
        if cfg.static:  # every node is scored: the LM head's projection is the target's, outside the round
            logits = logits.full()
        t_verify = time.perf_counter()
        out = round_fns.settle(cfg, tree, logits, slots.block, slots.step, rows, block_start, block_index, sequence,
                               need_stale)
    commits = slots.step if slots.commits is None else slots.commits
    commit_orders.record(sequence, block_index, commits, out.accepted_pos, out.n_acc)
    active = out.root_masked.any(1)
    complete = ~(out.block == cfg.mask_id).any(1)
    has_eos = (out.block == cfg.eos_id).any(1) if cfg.eos_id is not None else complete
    columns = (active.long(), out.n_acc, complete.long(), has_eos.long())
    if out.stuck is not None:  # a rule's step may commit nothing (quota 0): stuck is told apart from it
        columns += (out.stuck.long(),)
    active_l, n_acc_l, complete_l, eos_l, *stuck_l = torch.stack(columns).tolist()  # the one sync
    stuck_l = stuck_l[0] if stuck_l else [a and n == 0 for a, n in zip(active_l, n_acc_l)]
    if any(stuck_l):
        raise RuntimeError("target produced no valid commit (NaN or all -inf logits) for a masked block")
    stats.commits_per_pass.update(n for a, n in zip(active_l, n_acc_l) if a)
    observe = getattr(drafter, "observe", None) if cfg.rule is None else None  # it learns one-commit orders
    if observe is not None and slots.stale is not None and drafted:
        # a drafter that learns from the target's commits (spot.online.OnlineCalibrated): the stale features its
        # tree was grown from, the root's masked flags and the accepted chain, for the rows it drafted
        rows_drafted = torch.tensor([h and a for h, a in zip(slots.has_stale, active_l)], device=dev)
        observe(slots.stale, out.root_masked, out.accepted_pos, out.n_acc, rows_drafted)
    if need_stale:
        slots.stale = out.stale
        slots.has_stale = [True] * len(slots)
    if on_pass is not None:
        on_pass(block_index, slots.step, slots.stale)
    if cfg.rule is not None:
        slots.commits = commits + out.n_acc
    slots.block, slots.step = out.block, out.step
    t_end = time.perf_counter()
    stats.stage_seconds.update(draft=t_target - t_draft, target=t_verify - t_target, verify=t_end - t_verify)
    return [bool(c) for c in complete_l], [bool(e) for e in eos_l]


class _CommitOrders:
    """Every row's commit order per block, flat [batch * blocks * B + 1] on the device, with one spare entry last: a
    pass writes every row's accepted positions at once, those past its commits into the spare entry (no host sync
    to find which to write)."""

    def __init__(self, batch: int, n_blocks: int, block_size: int, device):
        self.shape = (batch, n_blocks, block_size)
        self.flat = torch.full((batch * n_blocks * block_size + 1,), -1, dtype=torch.long, device=device)

    def record(self, sequence, block_index, step, acc_pos: torch.Tensor, n_acc: torch.Tensor) -> None:
        """This pass's accepted positions into entries step .. step + n_acc - 1 of each row's block order."""
        _, n_blocks, block_size = self.shape
        c = torch.arange(acc_pos.shape[1], device=acc_pos.device)[None]
        at = ((sequence * n_blocks + block_index) * block_size)[:, None] + step[:, None] + c
        self.flat.index_put_((torch.where(c < n_acc[:, None], at, self.flat.shape[0] - 1),), acc_pos)

    def tensor(self) -> torch.Tensor:
        """int64 [batch, blocks, B] (-1: never committed)."""
        return self.flat[:-1].view(self.shape)


def confidence_drafter(rule: CommitRule) -> ConfidenceDrafter:
    """The drafter method="confidence" runs: over a rule other than one, ranked by the resampled confidence and
    eight children per node (docs/rules.md section 3)."""
    return ConfidenceDrafter(resampled=not rule.is_one)


def resolve_rule(rule, target, method: str, block_size, confidence: str) -> tuple[CommitRule, str]:
    """(the commit rule, the confidence kind) of a decode: `rule` parsed (spot.rules.parse_rule; "family": the
    target's `default_rule`, a rule or a callable of the block size that returns one), checked against the block
    size and the method, and the rule's own confidence kind (Dream's alg) taken unless `confidence` names another."""
    if rule == "family":
        family_rule = getattr(target, "default_rule", None)
        if family_rule is None:
            raise ValueError(f"rule='family': {type(target).__name__} names no sampler default (the LLaDA, Dream, "
                             "SDAR and LLaDA2 targets of spot.families do); give a rule such as 'steps:16' or "
                             "'threshold:0.9'")
        # a default may depend on the block (LLaDA's B / 2 steps per block): a callable of the block size
        rule = family_rule(limits.integer("block_size", block_size)) if callable(family_rule) else family_rule
    rule = parse_rule(rule)
    if isinstance(block_size, int) and not isinstance(block_size, bool) and block_size >= 1:
        rule.check_block(block_size)
    return rule, rule_confidence(rule, confidence)


def _cut(row: list[int], max_new_tokens: int, eos_id: int | None) -> list[int]:
    row = row[:max_new_tokens]
    if eos_id is not None and eos_id in row:
        row = row[: row.index(eos_id) + 1]
    return row


ROW_LIMIT = 2**32  # rows lie in [0, ROW_LIMIT): the coupled noise reads their low 32 bits (docs/noise.md)


def _token_ids(name: str, p) -> list[int]:
    """A prompt as a list of ints: a list/tuple of ints, or a 1-D integer tensor / NumPy array."""
    if isinstance(p, torch.Tensor) or type(p).__module__ == "numpy":
        if p.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D sequence of token ids, got shape {tuple(p.shape)}")
        p = p.tolist()
    if not isinstance(p, (list, tuple)):
        raise TypeError(f"{name}: expected a list of token ids, got {type(p).__name__}")
    ids = []
    for t in p:
        if isinstance(t, bool) or not hasattr(t, "__index__"):
            raise TypeError(f"{name}: expected integer token ids, got {type(t).__name__} ({t!r})")
        ids.append(operator.index(t))
    return ids


def _rows(rows, b: int) -> torch.Tensor:
    """rows: b integers in [0, ROW_LIMIT) (a list, tuple, 1-D integer tensor or array) -> int64 tensor."""
    if isinstance(rows, torch.Tensor):
        if rows.dtype.is_floating_point or rows.dtype.is_complex or rows.dtype == torch.bool:
            raise TypeError(f"rows: expected integer row ids, got a {rows.dtype} tensor")
        if rows.shape != (b,):
            raise ValueError(f"rows: expected {b} row ids, got shape {tuple(rows.shape)}")
        values = rows.tolist()
    else:
        values = _token_ids("rows", rows) if isinstance(rows, (list, tuple)) or type(rows).__module__ == "numpy" \
            else None
        if values is None:
            raise TypeError(f"rows: expected a list of {b} integer row ids, got {type(rows).__name__}")
        if len(values) != b:
            raise ValueError(f"rows: expected {b} row ids, got {len(values)}")
    bad = [r for r in values if not 0 <= r < ROW_LIMIT]
    if bad:
        raise ValueError(f"rows: row ids must lie in [0, 2**32) (the noise reads their low 32 bits), got {bad[0]}")
    return rows.long() if isinstance(rows, torch.Tensor) else torch.tensor(values, dtype=torch.long)


def _check_pass_memory(target, batch: int, block_size: int, tree: TreeSettings) -> None:
    """Estimate one pass's largest tensors before any is allocated: the logits of `tree.budget` nodes ([batch,
    budget, B, V], float32 or float64) and a tree depth's drafted children (`width` x `branch` states and their
    bookkeeping). `batch` counts the rows in flight (`Batching.max_batch` of them at most), not the prompts waiting
    for a row."""
    itemsize = 8 if getattr(target, "dtype", None) == torch.float64 else 4
    logits = batch * tree.budget * block_size * target.vocab_size * itemsize
    children = batch * tree.width * tree.branch * (block_size + 8) * 8
    limits.size(f"budget / width / branch: a pass over budget={tree.budget} nodes with width={tree.width} x "
                f"branch={tree.branch} children per depth (batch {batch}, block {block_size}, vocabulary "
                f"{target.vocab_size}) needs about", max(logits, children))


def _tree_settings(tree, budget) -> TreeSettings:
    """`tree` (default TreeSettings()) with `budget`, when given, in place of its own."""
    tree = _settings_object("tree", tree, TreeSettings)
    if budget is None:
        return tree
    budget = limits.integer("budget", budget)  # named as the caller gave it, before TreeSettings names its field
    if budget < 1:
        raise ValueError(f"budget: expected >= 1, got {budget}")
    return replace(tree, budget=budget)


def _settings_object(name: str, value, kind: type):
    """None (the defaults) or an instance of `kind`: a dict or a stray value is refused by name."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise TypeError(f"{name}: expected a spot.{kind.__name__} or None, got {type(value).__name__}")
    return value


def _check_output_memory(prompts: int, max_new_tokens: int, block_size: int) -> None:
    """What `generate` keeps per prompt until it returns: the commit orders (int64 [prompts, blocks, B]) and the
    blocks decoded (int64 tokens), estimated before decoding."""
    blocks = -(-max_new_tokens // block_size)
    limits.size(f"max_new_tokens: {max_new_tokens} new tokens in blocks of {block_size} for {prompts} prompt(s) "
                "give commit orders and tokens of", 2 * prompts * blocks * block_size * 8)


def _check_orders(orders, prompts: list[list[int]], max_new_tokens: int, block_size: int, aligned: bool) -> None:
    """`orders` of method="oracle": the int64 [prompts, blocks, B] `orders` of a `standard` run with these
    arguments, every entry -1 or a block position. On a target with `aligned_blocks` the decode also spans each
    prompt's partial last block (`Session.prompt_head`)."""
    head = max((len(p) % block_size for p in prompts), default=0) if aligned else 0
    blocks = -(-(max_new_tokens + head) // block_size) if max_new_tokens else 0
    n = len(prompts)
    if not isinstance(orders, torch.Tensor) or orders.dtype != torch.long:
        raise TypeError(f"orders: expected an int64 tensor (a standard run's GenerateOutput.orders), got "
                        f"{getattr(orders, 'dtype', type(orders).__name__)}")
    if tuple(orders.shape) != (n, blocks, block_size):
        raise ValueError(f"orders: expected shape {[n, blocks, block_size]} (prompts, blocks, block_size), got "
                         f"{list(orders.shape)}")
    if bool(((orders < -1) | (orders >= block_size)).any()):
        raise ValueError(f"orders: entries must be -1 or a block position in [0, {block_size})")


def _check_args(target, prompts, method, *, max_new_tokens, block_size, temperature, seed, tree: TreeSettings,
                batching: Batching, drafter, confidence, top_k, eos_id=-1, rows=None, allow_partial_block=False,
                progress=None, on_pass=None, orders=None, rule=None):
    """Every argument of `generate` checked (errors name the argument; `tree` and `batching` checked their fields
    when made) and normalised: returns (prompts, max_new_tokens, block_size, seed, temperature, eos_id, rows, tree),
    the tree settings resolved for this decode (`TreeSettings.resolved`)."""
    if not isinstance(target, Target):
        raise TypeError(f"target: expected a spot.Target, got {type(target).__name__}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    if method == "spot" and drafter is None:
        raise ValueError("drafter: method='spot' needs an order drafter (see spot.load_drafter)")
    if drafter is not None and not isinstance(drafter, Drafter):
        raise TypeError("drafter: expected an object with position_logits(stale, node_masked, node_row, depth)")
    if isinstance(prompts, torch.Tensor):
        prompts = [prompts] if prompts.dim() == 1 else list(prompts)
    if not isinstance(prompts, (list, tuple)):
        raise TypeError(f"prompts: expected a list of token-id lists, got {type(prompts).__name__}")
    clean = []
    for i, p in enumerate(prompts):
        p = _token_ids(f"prompts[{i}]", p)
        if any(not 0 <= t < target.vocab_size for t in p):
            raise ValueError(f"prompts[{i}]: token ids must lie in [0, {target.vocab_size})")
        clean.append(p)
    ints = {}
    for name, value, low in (("max_new_tokens", max_new_tokens, 0), ("block_size", block_size, 1),
                             ("top_k", 1 if top_k is None else top_k, 1)):
        value = ints[name] = limits.integer(name, value)
        if value < low:
            raise ValueError(f"{name}: expected >= {low}, got {value}")
    max_new_tokens, block_size = ints["max_new_tokens"], ints["block_size"]
    tables = None if rule is None or rule.is_one else rule.tables(block_size, "cpu")  # the probes' default
    tree = tree.resolved(drafter if method in ("spot", "confidence") else None, target.device, tables)
    in_flight = len(clean) if batching.max_batch is None else min(len(clean), batching.max_batch)
    _check_pass_memory(target, in_flight, block_size, tree)
    _check_output_memory(len(clean), max_new_tokens, block_size)
    limits.callable_or_none("progress", progress)
    limits.callable_or_none("on_pass", on_pass)
    if orders is not None and method == "oracle":
        _check_orders(orders, clean, max_new_tokens, block_size, getattr(target, "aligned_blocks", False))
    if block_size > max_new_tokens > 0 and not allow_partial_block:
        raise ValueError(f"block_size ({block_size}) exceeds max_new_tokens ({max_new_tokens}): a block is decoded "
                         f"whole, up to {block_size} target passes for {max_new_tokens} token(s); use block_size <= "
                         "max_new_tokens, or pass allow_partial_block=True to decode it whole and keep its first "
                         "max_new_tokens tokens")
    seed = limits.integer("seed", seed)
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed: expected an int in [0, 2**63), got {seed!r}")
    temperature = limits.temperature("temperature", temperature)
    if eos_id is not None:
        eos_id = limits.integer("eos_id", eos_id)
        if eos_id != -1 and not 0 <= eos_id < target.vocab_size:
            raise ValueError(f"eos_id: expected None, -1 (the target's own) or an id in [0, {target.vocab_size}), "
                             f"got {eos_id}")
    if rows is not None:
        rows = _rows(rows, len(clean))
    if confidence not in CONFIDENCE_KINDS:
        raise ValueError(f"confidence: expected one of {CONFIDENCE_KINDS}, got {confidence!r}")
    max_block, trained_vocab = drafter_limits(drafter)
    if method == "spot" and trained_vocab and trained_vocab != target.vocab_size:
        raise ValueError(f"drafter: it reads token ids of a {trained_vocab}-token vocabulary (token buckets) and "
                         f"this target's vocabulary has {target.vocab_size}; use a drafter trained without "
                         "--token-buckets (it reads no token ids) or train one on this target")
    if method == "spot" and isinstance(max_block, int) and block_size > max_block:
        raise ValueError(f"block_size: {block_size} exceeds the drafter's max_block {max_block}")
    return clean, max_new_tokens, block_size, seed, temperature, eos_id, rows, tree
