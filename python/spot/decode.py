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
from dataclasses import dataclass, field
from typing import Callable

import torch

import spot_kernels
from spot_kernels import CONFIDENCE_KINDS, ScoreOutput

from .drafters import ConfidenceDrafter, Drafter, NoiseCoordinates, OracleDrafter, StaleFeatures
from . import limits
from .limits import MIN_TEMPERATURE  # noqa: F401 (spot.sglang reads it here)
from .target import NodeLogits, Target, warn_if_not_batch_invariant
from .tree import WIDTH, Tree, grow_tree, tree_branch

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
             block_size: int = 32, temperature: float = 0.0, seed: int = 0, budget: int = 16,
             width: int = WIDTH, branch: int | None = None, drafter: Drafter | None = None, eos_id: int | None = -1,
             confidence: str = "prob", top_k: int = 32, rows=None, progress=None,
             backend: str = "auto", orders: torch.Tensor | None = None, on_pass=None,
             score_all_nodes: bool | None = None, allow_partial_block: bool = False, max_batch: int | None = None,
             lockstep: bool = False) -> GenerateOutput:
    """Decode `prompts` (a list of token-id lists) with one of METHODS.

    budget: the most nodes (root included) one verification pass may score; width/branch shape the tree (branch
    None: the spot drafter's own `branch`, else spot.tree.BRANCH).
    drafter: the order drafter for method="spot"; one with an `observe(stale, root_masked, accepted_pos, n_acc,
    rows)` method is also handed every pass's commits (spot.online.OnlineCalibrated learns from them).
    eos_id: stop id (-1: the target's own; None: never stop).
    rows: noise row id per prompt (default 0..batch-1) so that results do not depend on batch composition.
    progress: an optional callable(done_blocks, total_blocks).
    orders: for method="oracle", the `orders` of a `standard` run with the same arguments (else one is run,
    uncounted, to find them).
    on_pass: an optional callable(block_index, step, stale) called after every pass with each row's block index
    and commit step before the pass (int64 [rows]) and the StaleFeatures it produced (`spot build collect` records
    trajectories with it).
    score_all_nodes: score every tree node in one call (default on accelerators) or only the chain verification
    can reach (default on CPU, where each scored row costs time); the tokens are the same either way.
    allow_partial_block: a block is always decoded whole (every one of its positions costs passes) and the output
    cut to max_new_tokens, so block_size > max_new_tokens is refused (it would spend up to block_size passes on
    fewer tokens) unless this is True.
    max_batch: decode at most this many prompts at once (default: all); a row that is done (its blocks, or an
    end-of-sequence token) leaves and the next prompt takes its place (continuous batching). Needs a target
    whose sessions advance rows at their own pace (`Session.per_row`, the embedded target's).
    lockstep: keep rows in lock-step even where the session could let each row start its next block as soon as
    it finishes one (per-row progress, the default there); the tokens are the same either way.

    Arguments are checked before any work (spot.limits): temperature is 0 (greedy) or in [MIN_TEMPERATURE,
    the largest float32] (below it, or above it in float32, the scaled logits overflow); the estimated memory of a
    pass over the rows in flight and of the per-prompt outputs stays under SPOT_MEMORY_LIMIT_GB; integers may be
    Python or NumPy integers, never bools; rows lie in [0, 2**32) (the coupled noise reads their low 32 bits,
    docs/noise.md); eos_id is None, -1 or an id of the vocabulary.
    """
    branch = tree_branch(drafter if method == "spot" else None, branch)
    prompts, max_new_tokens, block_size, seed, temperature, eos_id, rows = _check_args(
        target, prompts, method, max_new_tokens, block_size, temperature, seed, budget, width, branch, drafter,
        confidence, top_k, eos_id, rows, allow_partial_block, max_batch=max_batch, progress=progress,
        on_pass=on_pass, orders=orders)
    if eos_id == -1:
        eos_id = target.eos_id
    b, dev = len(prompts), target.device
    rows = torch.arange(b, device=dev) if rows is None else rows.to(dev)
    if method == "oracle":  # the true order comes from a standard run that is not counted
        if orders is None:
            orders = generate(target, prompts, "standard", max_new_tokens=max_new_tokens, block_size=block_size,
                              temperature=temperature, seed=seed, eos_id=eos_id, confidence=confidence,
                              top_k=top_k, rows=rows, backend=backend,
                              allow_partial_block=allow_partial_block, max_batch=max_batch,
                              lockstep=lockstep).orders
        drafter = OracleDrafter(orders.to(dev))
    elif method == "confidence":
        drafter = ConfidenceDrafter()
    if score_all_nodes is None:
        score_all_nodes = dev.type != "cpu"
    # budget 1 is the root alone: standard decoding's pass, with no drafter call and no stale features to build
    run = _Run(target, None if method == "standard" or budget == 1 else drafter, seed, rows, temperature, confidence,
               min(top_k, target.vocab_size), backend, budget, width, branch, eos_id,
               _score_all_nodes if score_all_nodes else _score_accepted_chain, on_pass, DecodeStats(method))

    t0 = time.perf_counter()
    width_of_batch = b if max_batch is None else min(b, max_batch)
    session = target.start(prompts[:width_of_batch], max_new_tokens, block_size)
    per_row = session.per_row and not lockstep
    if width_of_batch < b and not per_row:
        raise ValueError(f"max_batch: {b} prompts through {width_of_batch} rows needs a target whose sessions admit "
                         f"rows ({type(target).__name__} keeps rows in lock-step): decode them in groups instead")
    # A block-aligned session (SDAR, LLaDA2: spot.families) opens the first block with each prompt's last
    # len % block_size tokens (`prompt_head`): they take block positions and are not output.
    head = list(getattr(session, "prompt_head", None) or [0] * width_of_batch)
    n_blocks = -(-(max_new_tokens + max(head, default=0)) // block_size) if max_new_tokens else 0
    orders = torch.full((b, n_blocks, block_size), -1, dtype=torch.long, device=dev)
    blocks: list[list[torch.Tensor]] = [[] for _ in range(b)]
    slots = _Slots(torch.arange(width_of_batch if n_blocks else 0, device=dev), block_size, target.mask_id)
    slots.new_blocks(slots.all(), session.initial_block(block_size))
    waiting = list(range(width_of_batch, b)) if n_blocks else []
    done_blocks = 0
    while len(slots):
        run.rows = rows[slots.sequence]
        _one_pass(run, session, slots, orders)
        complete = ~(slots.block == target.mask_id).any(1)
        if not bool(complete.any()) or not (per_row or bool(complete.all())):
            continue  # lock-step: every row waits for the slowest
        finished = torch.nonzero(complete).flatten()
        if per_row:
            session.append(slots.block[finished], rows=finished)
        else:
            session.append(slots.block)  # the Session contract's lock-step form: every row
        for i, seq in zip(finished.tolist(), slots.sequence[finished].tolist()):
            blocks[seq].append(slots.block[i].clone())
        done_blocks += len(finished)
        slots.block_index[finished] += 1
        over = complete & (slots.block_index >= n_blocks)
        if eos_id is not None:
            over |= complete & (slots.block == eos_id).any(1)
        if progress is not None:
            progress(done_blocks, b * n_blocks)
        if per_row:  # rows that are over leave the session; the others start their next block at once
            keep = torch.nonzero(~over).flatten()
            if len(keep) < len(slots):
                session.release(keep)
                slots.keep(keep)
                complete = complete[keep]
            slots.new_blocks(torch.nonzero(complete).flatten())
            if waiting and len(slots) < width_of_batch:  # waiting prompts take the free rows, in order
                new, waiting = waiting[:width_of_batch - len(slots)], waiting[width_of_batch - len(slots):]
                session.admit([prompts[i] for i in new])
                slots.admit(torch.tensor(new, dtype=torch.long, device=dev))
        else:
            slots.over |= over
            if bool(slots.over.all()):
                break
            slots.new_blocks(slots.all(), session.initial_block(block_size))
            # a row that is over rides along, its block complete, until the last row is over
            slots.block[slots.over] = eos_id if eos_id is not None else target.mask_id
    stats = run.stats
    stats.target_passes = session.passes
    out = [torch.cat(row) if row else torch.empty(0, dtype=torch.long, device=dev) for row in blocks]
    tokens = [_cut(row.tolist()[head[i] if i < len(head) else 0:], max_new_tokens, eos_id) for i, row in enumerate(out)]
    stats.generated_tokens = sum(len(t) for t in tokens)
    stats.seconds = time.perf_counter() - t0
    return GenerateOutput(tokens, stats, orders)


class _Slots:
    """Where every row of the session stands: the prompt it decodes, its block (index, state, commits so far) and
    the stale features its next tree is drafted from (valid once the block has had a pass)."""

    def __init__(self, sequence: torch.Tensor, block_size: int, mask_id: int):
        n, dev = len(sequence), sequence.device
        self.sequence = sequence  # [s] prompt index of each row
        self.block_size, self.mask_id = block_size, mask_id
        self.block = torch.full((n, block_size), mask_id, dtype=torch.long, device=dev)
        self.step = torch.zeros(n, dtype=torch.long, device=dev)  # commits already in each row's block
        self.block_index = torch.zeros(n, dtype=torch.long, device=dev)
        self.has_stale = torch.zeros(n, dtype=torch.bool, device=dev)
        self.over = torch.zeros(n, dtype=torch.bool, device=dev)  # lock-step only: done, riding along
        self.stale: StaleFeatures | None = None

    def __len__(self) -> int:
        return len(self.sequence)

    def all(self) -> torch.Tensor:
        return torch.arange(len(self), device=self.sequence.device)

    def new_blocks(self, index: torch.Tensor, initial: torch.Tensor | None = None) -> None:
        """Rows `index` start a block: every position masked (or `initial`, the session's state of it)."""
        self.block[index] = self.mask_id if initial is None else initial[index]
        self.step[index] = 0
        self.has_stale[index] = False

    def keep(self, index: torch.Tensor) -> None:
        for name in ("sequence", "block", "step", "block_index", "has_stale", "over"):
            setattr(self, name, getattr(self, name)[index])
        if self.stale is not None:
            self.stale = self.stale.select(index)

    def admit(self, sequence: torch.Tensor) -> None:
        new = _Slots(sequence, self.block_size, self.mask_id)
        for name in ("sequence", "block", "step", "block_index", "has_stale", "over"):
            setattr(self, name, torch.cat((getattr(self, name), getattr(new, name))))
        self.stale = None if self.stale is None else self.stale.pad(len(sequence))


@dataclass
class _Run:
    """What every pass of one `generate` call shares."""

    target: Target
    drafter: Drafter | None  # None: the root alone (standard decoding)
    seed: int
    rows: torch.Tensor  # [b] noise row of each sequence
    temperature: float
    confidence: str
    top_k: int
    backend: str
    budget: int
    width: int
    branch: int
    eos_id: int | None
    scorer: Callable  # _score_all_nodes or _score_accepted_chain
    on_pass: Callable | None
    stats: DecodeStats


def _one_pass(run: _Run, session, slots: _Slots, orders: torch.Tensor) -> None:
    """One target pass over every row: draft a tree from the row's stale features, score it, accept the longest
    chain that equals the target's own commits; record the commit order in `orders` [b, blocks, B]."""
    target = run.target
    t_draft = time.perf_counter()
    tree = _draft(run, slots)
    block_start = session.block_start
    t_target = time.perf_counter()
    logits = session.score_lazily(tree.states)  # the LM head runs in the scorer, for the nodes it scores
    warn_if_not_batch_invariant(target, logits.dtype)
    t_verify = time.perf_counter()
    masked = tree.states == target.mask_id
    scored = run.scorer(run, logits, masked, tree, block_start, slots.step)
    commit_tokens = torch.where(scored.commit_pos >= 0,
                                scored.tokens.gather(2, scored.commit_pos.clamp_min(0)[..., None]).squeeze(2), -1)
    accepted_pos, _, n_acc, block, last = spot_kernels.verify_tree(
        tree.parents, tree.positions, tree.tokens, scored.commit_pos, commit_tokens, slots.block,
        backend=run.backend)
    active = masked[:, 0].any(1)
    if bool((active & (n_acc == 0)).any()):
        raise RuntimeError("target produced no valid commit (NaN or all -inf logits) for a masked block")
    _record_order(orders, slots, accepted_pos, n_acc)
    run.stats.commits_per_pass.update(n_acc[active].tolist())
    observe = getattr(run.drafter, "observe", None)
    if observe is not None and slots.stale is not None and bool(slots.has_stale.any()):
        # a drafter that learns from the target's commits (spot.online.OnlineCalibrated): the stale features its
        # tree was grown from, the root's masked flags and the accepted chain, for the rows it drafted
        observe(slots.stale, masked[:, 0], accepted_pos, n_acc, slots.has_stale & active)
    step = slots.step + n_acc
    if run.eos_id is not None:
        block = _close_after_eos(block, run.eos_id, target.mask_id)
    if run.drafter is not None or run.on_pass is not None:  # nothing reads them otherwise
        slots.stale = _stale_features(run, scored, masked, last, block_start, slots.block_index.clone(), step,
                                      slots.sequence)
        slots.has_stale[:] = True
    if run.on_pass is not None:
        run.on_pass(slots.block_index, slots.step, slots.stale)
    slots.block, slots.step = block, step
    t_end = time.perf_counter()
    run.stats.stage_seconds.update(draft=t_target - t_draft, target=t_verify - t_target, verify=t_end - t_verify)


def _close_after_eos(block: torch.Tensor, eos_id: int, mask_id: int) -> torch.Tensor:
    """Rows whose block holds an end-of-sequence token with every position before it committed are done: the
    output is cut there, so their still-masked positions are filled with end-of-sequence instead of spending
    passes on them. Every method reaches such a state on the same trajectory, so the returned tokens do not change;
    only the passes after it (and the commits recorded in `orders`) are saved."""
    masked = block == mask_id
    done = ((block == eos_id) & (masked.cumsum(1) == 0)).any(1)
    return torch.where(done[:, None] & masked, eos_id, block)


def _draft(run: _Run, slots: _Slots) -> Tree:
    return draft_tree(run, slots.block, slots.step, slots.stale, slots.has_stale)


def draft_tree(run, block: torch.Tensor, step: torch.Tensor, stale: StaleFeatures | None,
               draft_rows: torch.Tensor | None = None) -> Tree:
    """The tree of a pass: the root alone for standard decoding, for budget 1 (`run.drafter` is None for both)
    and for rows at a block's first pass (no stale features yet: `draft_rows` False), else grown by the drafter
    under the node budget. `run` needs drafter, budget, width, branch, seed, rows, temperature, target.mask_id
    and backend (the SGLang plug-in hands its own)."""
    if run.drafter is None or stale is None or (draft_rows is not None and not bool(draft_rows.any())):
        return Tree.root_only(block)
    return grow_tree(block, step, stale, run.drafter, budget=run.budget, width=run.width, branch=run.branch,
                     seed=run.seed, rows=run.rows, temperature=run.temperature, mask_id=run.target.mask_id,
                     backend=run.backend, draft_rows=draft_rows)


def _stale_features(run: _Run, scored: ScoreOutput, masked: torch.Tensor, last: torch.Tensor,
                    block_start: torch.Tensor, block_index, step: torch.Tensor, sequence=None) -> StaleFeatures:
    """The deepest accepted node's outputs [b, B, ...]: what the next tree is drafted from."""
    at_last = (torch.arange(last.shape[0], device=last.device), last)
    return StaleFeatures(
        topk_probs=scored.topk_probs[at_last], topk_ids=scored.topk_ids[at_last], tokens=scored.tokens[at_last],
        confidence=scored.confidence[at_last], masked=masked[at_last], block_start=block_start,
        block_index=block_index, confidence_kind=run.confidence,
        noise=NoiseCoordinates(run.seed, run.rows, step, run.temperature), sequence=sequence)


def _without_mask_token(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    logits[..., mask_id] = float("-inf")  # committing the mask token would undo a commit
    return logits


def _score_all_nodes(run: _Run, logits: NodeLogits | torch.Tensor, masked, tree: Tree, block_start,
                     step) -> ScoreOutput:
    """Every node of the tree in one `score` call (one launch on a GPU, no host synchronisation). `logits`: a
    pass's NodeLogits, or its logits [b, N, B, V] (the SGLang round passes its forward's)."""
    b, n = masked.shape[:2]
    logits = logits.full() if isinstance(logits, NodeLogits) else logits
    return spot_kernels.score(_without_mask_token(logits, run.target.mask_id), masked, run.seed,
                              run.rows[:, None].expand(b, n),
                              block_start[:, None].expand(b, n), step[:, None] + tree.depth, run.temperature,
                              confidence=run.confidence, top_k=run.top_k, backend=run.backend)


def _score_accepted_chain(run: _Run, logits: NodeLogits, masked, tree: Tree, block_start, step) -> ScoreOutput:
    """Only the nodes verification can reach: the root, then the child carrying each scored node's commit.

    On a CPU every row costs time, and a tree's accepted chain is a few of its nodes, so this does a fraction of
    `_score_all_nodes`' work; the target's LM head, too, projects only these nodes (`Session.score_lazily`).
    Nodes left unscored get commit -1 (no token, NaN confidence): their parent's commit did not match them, so
    `verify_tree` rejects them either way, and the results equal `_score_all_nodes`' on every node that matters."""
    b, n, B = masked.shape
    dev, k = masked.device, run.top_k
    tok = torch.full((b, n, B), -1, dtype=torch.long, device=dev)
    commit_pos = torch.full((b, n), -1, dtype=torch.long, device=dev)
    conf = topk_p = topk_i = None
    node = torch.zeros(b, dtype=torch.long, device=dev)
    r = torch.arange(b, device=dev)  # rows whose chain is still growing
    while len(r):
        at = node[r]
        node_logits = _without_mask_token(logits.of(r, at), run.target.mask_id)
        out = spot_kernels.score(node_logits[:, None], masked[r, at, None], run.seed, run.rows[r, None],
                                 block_start[r, None], (step[r] + tree.depth[r, at])[:, None], run.temperature,
                                 confidence=run.confidence, top_k=k, backend=run.backend)
        if conf is None:
            conf = torch.full((b, n, B), math.nan, dtype=out.confidence.dtype, device=dev)
            topk_p = torch.zeros((b, n, B, k), dtype=out.topk_probs.dtype, device=dev)
            topk_i = torch.full((b, n, B, k), -1, dtype=torch.long, device=dev)
        tok[r, at], conf[r, at], topk_p[r, at], topk_i[r, at] = (x[:, 0] for x in out[:4])
        c = out.commit_pos[:, 0]
        commit_pos[r, at] = c
        c_tok = torch.where(c >= 0, out.tokens[:, 0].gather(1, c.clamp_min(0)[:, None])[:, 0], -1)
        child = ((tree.parents[r] == at[:, None]) & (tree.positions[r] == c[:, None]) & (c[:, None] >= 0)
                 & (tree.tokens[r] == c_tok[:, None]))
        found = child.any(1)
        node[r] = torch.where(found, child.to(torch.int8).argmax(1), at)
        r = r[found]
    return ScoreOutput(tok, conf, topk_p, topk_i, commit_pos)


def _record_order(orders: torch.Tensor, slots: _Slots, acc_pos: torch.Tensor, n_acc: torch.Tensor):
    """Write this pass's accepted positions into entries step .. step + n_acc - 1 of each row's block order."""
    n = acc_pos.shape[1]
    at = slots.step[:, None] + torch.arange(n, device=acc_pos.device)
    ok = torch.arange(n, device=acc_pos.device)[None] < n_acc[:, None]
    r, c = torch.nonzero(ok, as_tuple=True)
    orders[slots.sequence[r], slots.block_index[r], at[r, c]] = acc_pos[r, c]


def _cut(row: list[int], max_new_tokens: int, eos_id: int | None) -> list[int]:
    row = row[:max_new_tokens]
    if eos_id is not None and eos_id in row:
        row = row[: row.index(eos_id) + 1]
    return row


ROW_LIMIT = 2**32  # rows lie in [0, ROW_LIMIT): the coupled noise reads their low 32 bits (docs/noise.md)
_integer = limits.integer  # Python and NumPy integers, never bools


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


def _check_pass_memory(target, batch: int, block_size: int, budget: int, width: int, branch: int) -> None:
    """Estimate one pass's largest tensors before any is allocated: the logits of `budget` nodes ([batch, budget, B,
    V], float32 or float64) and a tree depth's drafted children (`width` x `branch` states and their bookkeeping).
    `batch` counts the rows in flight (`max_batch` of them at most), not the prompts waiting for a row."""
    itemsize = 8 if getattr(target, "dtype", None) == torch.float64 else 4
    logits = batch * budget * block_size * target.vocab_size * itemsize
    children = batch * width * branch * (block_size + 8) * 8
    limits.size(f"budget / width / branch: a pass over budget={budget} nodes with width={width} x branch={branch} "
                f"children per depth (batch {batch}, block {block_size}, vocabulary {target.vocab_size}) needs about",
                max(logits, children))


def _check_output_memory(prompts: int, max_new_tokens: int, block_size: int) -> None:
    """What `generate` keeps per prompt until it returns: the commit orders (int64 [prompts, blocks, B]) and the
    blocks decoded (int64 tokens), estimated before decoding."""
    blocks = -(-max_new_tokens // block_size)
    limits.size(f"max_new_tokens: {max_new_tokens} new tokens in blocks of {block_size} for {prompts} prompt(s) "
                "give commit orders and tokens of", 2 * prompts * blocks * block_size * 8)


def _check_orders(orders, prompts: int, max_new_tokens: int, block_size: int) -> None:
    """`orders` of method="oracle": the int64 [prompts, blocks, B] `orders` of a `standard` run with these
    arguments, every entry -1 or a block position."""
    blocks = -(-max_new_tokens // block_size) if max_new_tokens else 0
    if not isinstance(orders, torch.Tensor) or orders.dtype != torch.long:
        raise TypeError(f"orders: expected an int64 tensor (a standard run's GenerateOutput.orders), got "
                        f"{getattr(orders, 'dtype', type(orders).__name__)}")
    if tuple(orders.shape) != (prompts, blocks, block_size):
        raise ValueError(f"orders: expected shape {[prompts, blocks, block_size]} (prompts, blocks, block_size), got "
                         f"{list(orders.shape)}")
    if bool(((orders < -1) | (orders >= block_size)).any()):
        raise ValueError(f"orders: entries must be -1 or a block position in [0, {block_size})")


def _check_args(target, prompts, method, max_new_tokens, block_size, temperature, seed, budget, width, branch,
                drafter, confidence, top_k, eos_id=-1, rows=None, allow_partial_block=False, *, max_batch=None,
                progress=None, on_pass=None, orders=None):
    """Every argument of `generate` checked (errors name the argument) and normalised: returns (prompts,
    max_new_tokens, block_size, seed, temperature, eos_id, rows)."""
    if not isinstance(target, Target):
        raise TypeError(f"target: expected a spot.Target, got {type(target).__name__}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
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
                             ("budget", budget, 1), ("width", width, 1), ("branch", branch, 1),
                             ("top_k", top_k, 1)):
        value = ints[name] = _integer(name, value)
        if value < low:
            raise ValueError(f"{name}: expected >= {low}, got {value}")
    max_new_tokens, block_size = ints["max_new_tokens"], ints["block_size"]
    if max_batch is not None and _integer("max_batch", max_batch) < 1:
        raise ValueError(f"max_batch: expected None or >= 1, got {max_batch}")
    in_flight = len(clean) if max_batch is None else min(len(clean), _integer("max_batch", max_batch))
    _check_pass_memory(target, in_flight, block_size, ints["budget"], ints["width"], ints["branch"])
    _check_output_memory(len(clean), max_new_tokens, block_size)
    limits.callable_or_none("progress", progress)
    limits.callable_or_none("on_pass", on_pass)
    if orders is not None and method == "oracle":
        _check_orders(orders, len(clean), max_new_tokens, block_size)
    if block_size > max_new_tokens > 0 and not allow_partial_block:
        raise ValueError(f"block_size ({block_size}) exceeds max_new_tokens ({max_new_tokens}): a block is decoded "
                         f"whole, up to {block_size} target passes for {max_new_tokens} token(s); use block_size <= "
                         "max_new_tokens, or pass allow_partial_block=True to decode it whole and keep its first "
                         "max_new_tokens tokens")
    seed = _integer("seed", seed)
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed: expected an int in [0, 2**63), got {seed!r}")
    temperature = limits.temperature("temperature", temperature)
    if eos_id is not None:
        eos_id = _integer("eos_id", eos_id)
        if eos_id != -1 and not 0 <= eos_id < target.vocab_size:
            raise ValueError(f"eos_id: expected None, -1 (the target's own) or an id in [0, {target.vocab_size}), "
                             f"got {eos_id}")
    if rows is not None:
        rows = _rows(rows, len(clean))
    if confidence not in CONFIDENCE_KINDS:
        raise ValueError(f"confidence: expected one of {CONFIDENCE_KINDS}, got {confidence!r}")
    if method == "spot" and drafter is None:
        raise ValueError("drafter: method='spot' needs an order drafter (see spot.load_drafter)")
    if drafter is not None and not isinstance(drafter, Drafter):
        raise TypeError("drafter: expected an object with position_logits(stale, node_masked, node_row, depth)")
    drafter_cfg = getattr(getattr(drafter, "model", None), "cfg", None)
    max_block = getattr(drafter_cfg, "max_block", None)
    trained_vocab = getattr(drafter_cfg, "vocab_size", 0) if getattr(drafter_cfg, "token_buckets", 0) else 0
    if method == "spot" and trained_vocab and trained_vocab != target.vocab_size:
        raise ValueError(f"drafter: it reads token ids of a {trained_vocab}-token vocabulary (token buckets) and "
                         f"this target's vocabulary has {target.vocab_size}; use a drafter trained without "
                         "--token-buckets (it reads no token ids) or train one on this target")
    if method == "spot" and isinstance(max_block, int) and block_size > max_block:
        raise ValueError(f"block_size: {block_size} exceeds the drafter's max_block {max_block}")
    return clean, max_new_tokens, block_size, seed, temperature, eos_id, rows
