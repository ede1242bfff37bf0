"""One decoding round, written once: draft -> (the target's forward) -> score -> verify -> stale features.

`spot.generate` (every target: embedded, Hugging Face, diffusers) and the SGLang plug-in (spot.sglang.rounds) run
these functions; nothing else implements a round (docs/round.md). A round reads a batch of rows, each a block
being decoded:

    block [b, B] int64      the block's state (mask_id where undecided)
    step [b] int64          commits already made in the block (the coupled noise's step, docs/noise.md)
    rows [b] int64          each row's noise row
    block_start [b] int64   absolute position of block position 0
    stale, has_stale        the outputs of the row's previous pass that its tree is drafted from (StaleFeatures
                            [b, ...]) and whether a row has them (bool [b]; False at a block's first pass)

and returns the block after the target's commits, the commits, and the next round's stale features. With
`RoundConfig.static` the round has fixed shapes and never synchronises with the host (no .item(), .tolist(),
nonzero, boolean-mask indexing or Python branching on tensor values): a tree of exactly `budget` node slots, a
fixed number of depths, the drafter on fixed frontier shapes; so CUDA graphs can capture it per (rows, budget,
block size) and torch.compile(fullgraph=True) traces it whole. Without it (the CPU default) the host trims the
tree and stops its growth early, which saves a CPU drafter and target work; both give the same trees and tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

import spot_kernels
from spot_kernels import ScoreOutput

from .drafters import TOP_K, Drafter, NoiseCoordinates, StaleFeatures
from .rules import RuleTables
from .target import NodeLogits
from .tree import BRANCH, WIDTH, Tree, grow_tree


@dataclass(frozen=True)
class RoundConfig:
    """What every round of one decode shares (one per temperature in a batch of several); `grow_tree` takes it
    whole (its budget, width, branch, seed, temperature, mask_id, backend and static fields)."""

    mask_id: int
    seed: int
    temperature: float
    confidence: str = "prob"
    top_k: int = TOP_K  # stale top-K kept per position (at most the vocabulary; spot.drafters.default_top_k)
    backend: str = "auto"  # spot_kernels backend
    budget: int = 16  # most nodes a tree may hold, root included (1: the root alone)
    width: int = WIDTH
    branch: int = BRANCH
    eos_id: int | None = None  # a row whose block holds it after committed positions only is closed
    static: bool = True  # fixed shapes, no host sync (see the module docstring)
    score_all_nodes: bool = True  # without `static`: False scores only the chain verification can reach
    # the commit rule as data (spot.rules.RuleTables) for every rule but one commit per step (None: the one-commit
    # path, spot_kernels.verify_tree); with it a node is the block after a whole step of the rule
    rule: RuleTables | None = None
    probes: int = 0  # with a rule: nodes of each tree's budget that are probes (spot.tree.default_probes)

    def __post_init__(self):
        if self.probes and (self.rule is None or not 0 <= self.probes < self.budget):
            raise ValueError(f"RoundConfig.probes: {self.probes} probes need a commit rule (they are partial steps) "
                             f"and fewer than the budget's {self.budget} nodes")


class Settled(NamedTuple):
    """A round's outcome after the target's forward."""

    block: torch.Tensor  # [b, B] int64, the blocks after the accepted commits
    step: torch.Tensor  # [b] int64, commits in each block now
    accepted_pos: torch.Tensor  # [b, N] int64 ([b, B] with a rule), positions committed this round, in order
    # (-1 padding)
    n_acc: torch.Tensor  # [b] int64, commits this round (0 only for a row with no masked position, or a rule step
    # whose quota is 0)
    stale: StaleFeatures | None  # the deepest accepted node's outputs: what the next tree is drafted from
    root_masked: torch.Tensor  # [b, B] bool, the root's masked flags (before this round's commits)
    stuck: torch.Tensor | None = None  # [b] bool, with a rule: masked positions but none with a valid token (with
    # one commit per step that is n_acc == 0 on a row with a masked position)


def draft(cfg: RoundConfig, drafter: Drafter | None, block: torch.Tensor, step: torch.Tensor, rows: torch.Tensor,
          stale: StaleFeatures | None, has_stale: torch.Tensor | None = None) -> Tree:
    """The round's tree: the root alone without a drafter (standard decoding, budget 1) or stale features, else
    grown under the node budget from the rows that have stale features (`has_stale`; the others keep their root
    alone, padded)."""
    if drafter is None or stale is None or cfg.budget == 1:
        return Tree.root_only(block)
    return grow_tree(block, step, stale, drafter, cfg, rows=rows, draft_rows=has_stale)


def settle(cfg: RoundConfig, tree: Tree, logits: NodeLogits | torch.Tensor, block: torch.Tensor,
           step: torch.Tensor, rows: torch.Tensor, block_start: torch.Tensor, block_index=0,
           sequence: torch.Tensor | None = None, need_stale: bool = True) -> Settled:
    """Score the tree's nodes from the target's `logits` ([b, N, B, V] or a pass's NodeLogits), accept the longest
    chain equal to the target's own commits, close rows past an end-of-sequence token, and keep the deepest
    accepted node's outputs (unless `need_stale` is False: nothing will draft from them, Settled.stale is None;
    with a rule, the outputs of `freshest_node`). block_index / sequence are recorded on the stale features
    (StaleFeatures)."""
    masked = tree.states == cfg.mask_id
    all_nodes = cfg.static or cfg.score_all_nodes
    stuck = None
    if cfg.rule is None:
        scored = score_nodes(cfg, logits, masked, tree, rows, block_start, step) if all_nodes else \
            score_chain(cfg, logits, masked, tree, rows, block_start, step)
        accepted_pos, n_acc, new_block, last = verify(cfg, tree, scored, block)
        new_step = step + n_acc
    else:
        if all_nodes:
            scored = score_nodes(cfg, logits, masked, tree, rows, block_start, step)
            commit = rule_commits(cfg, scored, masked, step[:, None] + tree.depth)
        else:
            scored, commit = score_step_chain(cfg, logits, masked, tree, rows, block_start, step)
        accepted_pos, n_acc, n_steps, new_block, last, stuck = verify_steps(cfg, tree, scored, commit, masked)
        new_step = step + n_steps
        if need_stale:  # the next tree is drafted from the node that has seen most of the new block
            last = freshest_node(tree, masked, new_block, last)
            if not all_nodes:
                scored = score_nodes_at(cfg, logits, masked, tree, rows, block_start, step, scored, last)
    if cfg.eos_id is not None:
        new_block = close_after_eos(new_block, cfg.eos_id, cfg.mask_id)
    stale = stale_features(cfg, scored, masked, last, rows, block_start, block_index, new_step, sequence) \
        if need_stale else None
    return Settled(new_block, new_step, accepted_pos, n_acc, stale, masked[:, 0], stuck)


def run_round(cfg: RoundConfig, drafter: Drafter | None, forward: Callable, block, step, rows, block_start,
              stale: StaleFeatures | None, has_stale: torch.Tensor | None = None, block_index=0,
              sequence: torch.Tensor | None = None, need_stale: bool = True) -> tuple[Tree, Settled]:
    """draft -> forward(tree.states [b, N, B]) -> settle: the whole round, for one target forward `forward`
    returning logits [b, N, B, V] (or NodeLogits). With cfg.static and a capturable forward (the embedded
    target's, `Session.capturable_pass`), this is what CUDA graphs capture and torch.compile(fullgraph=True)
    traces whole (`compiled`)."""
    tree = draft(cfg, drafter, block, step, rows, stale, has_stale)
    return tree, settle(cfg, tree, forward(tree.states), block, step, rows, block_start, block_index, sequence,
                        need_stale)


class RoundFunctions(NamedTuple):
    """What a decode loop calls: the round's two halves around a target forward it runs itself, and (compiled
    only) the whole round with a capturable forward inside, `run_round`."""

    draft: Callable = draft
    settle: Callable = settle
    whole: Callable | None = None


def compiled(backend="inductor", cuda_graphs: bool = False) -> RoundFunctions:
    """`draft`, `settle` and `run_round` through torch.compile(fullgraph=True, dynamic=False): one graph each, no
    break (a break raises), recompiled per shape bucket (rows, node slots, block size, and for `run_round` the
    embedded target's cache capacity) and configuration. For static configurations only (`RoundConfig.static`).
    backend: a torch.compile backend ("inductor", "aot_eager", ... or a callable). cuda_graphs: with "inductor",
    the whole round is compiled with mode="reduce-overhead", which captures each bucket in a CUDA graph and replays
    it (for CUDA tensors)."""
    mode = "reduce-overhead" if cuda_graphs and backend == "inductor" else None
    return RoundFunctions(torch.compile(draft, fullgraph=True, dynamic=False, backend=backend),
                          torch.compile(settle, fullgraph=True, dynamic=False, backend=backend),
                          torch.compile(run_round, fullgraph=True, dynamic=False, backend=backend, mode=mode))


def _without_mask_token(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    logits[..., mask_id] = float("-inf")  # committing the mask token would undo a commit
    return logits


def score_nodes(cfg: RoundConfig, logits: NodeLogits | torch.Tensor, masked, tree: Tree, rows, block_start,
                step) -> ScoreOutput:
    """Every node of the tree in one `score` call (one launch on a GPU, no host synchronisation)."""
    b, n = masked.shape[:2]
    logits = logits.full() if isinstance(logits, NodeLogits) else logits
    return spot_kernels.score(_without_mask_token(logits, cfg.mask_id), masked, cfg.seed, rows[:, None].expand(b, n),
                              block_start[:, None].expand(b, n), step[:, None] + tree.depth, cfg.temperature,
                              confidence=cfg.confidence, top_k=cfg.top_k, backend=cfg.backend)


def _score_one_node_per_row(cfg: RoundConfig, logits: NodeLogits, masked, rows, block_start, r: torch.Tensor,
                            at: torch.Tensor, node_steps: torch.Tensor) -> ScoreOutput:
    """`score` of node at[i] of row r[i] alone at its step node_steps[i] ([R, 1]), its LM head projected for it only
    (the CPU path's scorers): outputs [R, 1, ...]."""
    return spot_kernels.score(_without_mask_token(logits.of(r, at), cfg.mask_id)[:, None], masked[r, at, None],
                              cfg.seed, rows[r, None], block_start[r, None], node_steps, cfg.temperature,
                              confidence=cfg.confidence, top_k=cfg.top_k, backend=cfg.backend)


def score_chain(cfg: RoundConfig, logits: NodeLogits, masked, tree: Tree, rows, block_start, step) -> ScoreOutput:
    """Only the nodes verification can reach: the root, then the child carrying each scored node's commit (the
    CPU path: a host sync per depth).

    On a CPU every row costs time, and a tree's accepted chain is a few of its nodes, so this does a fraction of
    `score_nodes`' work; the target's LM head, too, projects only these nodes (`Session.score_lazily`). Nodes left
    unscored get commit -1 (no token, NaN confidence): their parent's commit did not match them, so `verify_tree`
    rejects them either way, and the results equal `score_nodes`' on every node that matters."""
    if not isinstance(logits, NodeLogits):
        logits = NodeLogits(logits)
    b, n, B = masked.shape
    dev, k = masked.device, cfg.top_k
    tok = torch.full((b, n, B), -1, dtype=torch.long, device=dev)
    commit_pos = torch.full((b, n), -1, dtype=torch.long, device=dev)
    conf = topk_p = topk_i = None
    node = torch.zeros(b, dtype=torch.long, device=dev)
    r = torch.arange(b, device=dev)  # rows whose chain is still growing
    while len(r):
        at = node[r]
        out = _score_one_node_per_row(cfg, logits, masked, rows, block_start, r, at,
                                      (step[r] + tree.depth[r, at])[:, None])
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


def rule_commits(cfg: RoundConfig, scored: ScoreOutput, masked: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """The positions the rule commits from each scored node (bool, masked's shape): spot::commit_rule on the
    nodes' confidences at their steps (the root's step + depth)."""
    rule = cfg.rule
    return spot_kernels.commit_rule(scored.confidence, masked, steps, rule.quota, rule.thresholds, rule.inclusive,
                                    backend=cfg.backend)


def score_step_chain(cfg: RoundConfig, logits: NodeLogits, masked, tree: Tree, rows, block_start,
                     step) -> tuple[ScoreOutput, torch.Tensor]:
    """score_chain for a rule's step tree: the root, then the child whose state is the scored node's successor
    (its state after the rule's step), until none is. Returns the scores (unscored nodes: token -1, NaN
    confidence) and the rule's commits of every node (none on unscored nodes), equal to score_nodes' and
    rule_commits' on every node verification can reach."""
    if not isinstance(logits, NodeLogits):
        logits = NodeLogits(logits)
    b, n, B = masked.shape
    dev, k, rule = masked.device, cfg.top_k, cfg.rule
    tok = torch.full((b, n, B), -1, dtype=torch.long, device=dev)
    commit = torch.zeros((b, n, B), dtype=torch.bool, device=dev)
    commit_pos = torch.full((b, n), -1, dtype=torch.long, device=dev)
    conf = topk_p = topk_i = None
    node = torch.zeros(b, dtype=torch.long, device=dev)
    r = torch.arange(b, device=dev)  # rows whose chain is still growing
    while len(r):
        at = node[r]
        node_steps = (step[r] + tree.depth[r, at])[:, None]
        out = _score_one_node_per_row(cfg, logits, masked, rows, block_start, r, at, node_steps)
        if conf is None:
            conf = torch.full((b, n, B), math.nan, dtype=out.confidence.dtype, device=dev)
            topk_p = torch.zeros((b, n, B, k), dtype=out.topk_probs.dtype, device=dev)
            topk_i = torch.full((b, n, B, k), -1, dtype=torch.long, device=dev)
        tok[r, at], conf[r, at], topk_p[r, at], topk_i[r, at], commit_pos[r, at] = (x[:, 0] for x in out)
        c = spot_kernels.commit_rule(out.confidence, masked[r, at, None], node_steps, rule.quota, rule.thresholds,
                                     rule.inclusive, backend=cfg.backend)[:, 0]
        commit[r, at] = c
        successor = torch.where(c, out.tokens[:, 0], tree.states[r, at])
        child = (tree.parents[r] == at[:, None]) & (tree.states[r] == successor[:, None]).all(2)
        found = child.any(1)
        node[r] = torch.where(found, child.to(torch.int8).argmax(1), at)
        r = r[found]
    return ScoreOutput(tok, conf, topk_p, topk_i, commit_pos), commit


def freshest_node(tree: Tree, masked: torch.Tensor, block: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """[b] the node a rule's next tree is drafted from: of the nodes whose commits the new `block` holds (the
    accepted chain, and a probe whose one commit the target's step made too), the one with the most commits, ties
    to the deepest accepted node `last`. Its outputs have seen more of the new block than `last`'s (docs/rules.md,
    "Probes"); drafting reads nothing else of it, so the tokens do not change. Fixed shapes, no host sync."""
    n = masked.shape[1]
    within = ((tree.states == block[:, None]) | masked).all(2)
    is_last = torch.arange(n, device=last.device)[None] == last[:, None]
    key = torch.where(within, 2 * (~masked).sum(2) + is_last, -1)  # the first of equal keys: the root, not padding
    return key.argmax(1)


def score_nodes_at(cfg: RoundConfig, logits: NodeLogits | torch.Tensor, masked, tree: Tree, rows, block_start, step,
                   scored: ScoreOutput, nodes: torch.Tensor) -> ScoreOutput:
    """The CPU path's `scored` (score_step_chain) with node `nodes[i]` of row i scored too where it is not yet
    (its token is -1 at every position: a node off the chain). A host sync; rows whose node is scored cost
    nothing."""
    r = torch.nonzero((scored.tokens[torch.arange(len(nodes), device=nodes.device), nodes] < 0).all(1)).flatten()
    if not len(r):
        return scored
    if not isinstance(logits, NodeLogits):
        logits = NodeLogits(logits)
    at = nodes[r]
    out = _score_one_node_per_row(cfg, logits, masked, rows, block_start, r, at, (step[r] + tree.depth[r, at])[:, None])
    for have, new in zip(scored, out):
        have[r, at] = new[:, 0]
    return scored


def verify(cfg: RoundConfig, tree: Tree, scored: ScoreOutput, block: torch.Tensor):
    """Accept the longest drafted chain equal to the target's commits: (accepted_pos [b, N], n_acc [b], the new
    block [b, B], the deepest accepted node [b])."""
    commit_tokens = torch.where(scored.commit_pos >= 0,
                                scored.tokens.gather(2, scored.commit_pos.clamp_min(0)[..., None]).squeeze(2), -1)
    accepted_pos, _, n_acc, new_block, last = spot_kernels.verify_tree(
        tree.parents, tree.positions, tree.tokens, scored.commit_pos, commit_tokens, block, backend=cfg.backend)
    return accepted_pos, n_acc, new_block, last


def verify_steps(cfg: RoundConfig, tree: Tree, scored: ScoreOutput, commit: torch.Tensor, masked: torch.Tensor):
    """A rule's step tree: accept the longest drafted chain of the target's own steps (spot::verify_steps).
    Returns (accepted_pos [b, B], n_acc [b], n_steps [b], the new block [b, B], the deepest accepted node [b],
    stuck [b]: a root whose masked positions all lack a valid token (NaN or -inf logits), which cannot take a
    step)."""
    out = spot_kernels.verify_steps(tree.parents, tree.states, commit, scored.tokens, backend=cfg.backend)
    stuck = masked[:, 0].any(1) & ~(masked[:, 0] & ~scored.confidence[:, 0].isnan()).any(1)
    return (*out, stuck)


def stale_features(cfg: RoundConfig, scored: ScoreOutput, masked: torch.Tensor, last: torch.Tensor, rows,
                   block_start, block_index, step, sequence=None) -> StaleFeatures:
    """The deepest accepted node's outputs [b, B, ...]: what the next tree is drafted from."""
    b = last.shape[0]
    at = last[:, None]

    def pick(x):  # x [b, N, ...] -> x[i, last[i]], by gather (fixed shapes)
        index = at.view(b, 1, *([1] * (x.dim() - 2))).expand(b, 1, *x.shape[2:])
        return x.gather(1, index).squeeze(1)

    return StaleFeatures(
        topk_probs=pick(scored.topk_probs), topk_ids=pick(scored.topk_ids), tokens=pick(scored.tokens),
        confidence=pick(scored.confidence), masked=pick(masked), block_start=block_start,
        block_index=block_index, confidence_kind=cfg.confidence,
        noise=NoiseCoordinates(cfg.seed, rows, step, cfg.temperature), sequence=sequence)


def close_after_eos(block: torch.Tensor, eos_id: int, mask_id: int) -> torch.Tensor:
    """Rows whose block holds an end-of-sequence token with every position before it committed are done: the
    output is cut there, so their still-masked positions are filled with end-of-sequence instead of spending
    passes on them. Every method reaches such a state on the same trajectory, so the returned tokens do not change;
    only the passes after it (and the commits recorded in `orders`) are saved."""
    masked = block == mask_id
    done = ((block == eos_id) & (masked.cumsum(1) == 0)).any(1)
    return torch.where(done[:, None] & masked, eos_id, block)
