"""Order drafters: who predicts WHICH masked position the target commits next (docs/design.md §2.4).

A drafter reads the stale features of the target's previous pass and a draft node's masked flags, and returns
one logit per block position: log P(next commit = j) up to a constant. Ineligible (committed) positions are
masked out by `spot_kernels.select_children`, so a drafter need not care about them. Tokens for drafted
children always come from the stale top-K with coupled noise, never from the drafter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol, runtime_checkable

import torch

import spot_kernels


# The stale top-K a decode keeps per position (`RoundConfig.top_k`; generate's top_k=None picks `default_top_k`).
# At T > 0 a drafted token is the coupled Gumbel-max over the stale top-K: the target's own draw only where that
# falls among those K tokens. A commit rule ranks a step's set by the drawn tokens' probabilities, so one draw in
# the tail wrongly ranks a position in or out of the whole set (docs/rules.md, "The stale top-K"): a rule at T > 0
# keeps SAMPLED_RULE_TOP_K. One commit per step keeps TOP_K (its figures were measured with it); at T 0 the draw is
# the top-1 token whatever K is; a decode that drafts nothing (standard) reads no stale features.
TOP_K = 32
SAMPLED_RULE_TOP_K = 512


def default_top_k(rule_is_one: bool, temperature: float, drafts: bool = True) -> int:
    """The stale top-K of a decode that names none: SAMPLED_RULE_TOP_K for a commit rule other than one commit per
    step at T > 0 when something drafts from it (`drafts`), else TOP_K (a decode keeps at most the vocabulary,
    whatever this says)."""
    return SAMPLED_RULE_TOP_K if drafts and not rule_is_one and temperature > 0 else TOP_K


class NoiseCoordinates(NamedTuple):
    """The coupled noise of a tree grown from a pass (docs/design.md §2.3): a node at depth d commits with step
    root_step + d."""

    seed: int
    rows: torch.Tensor  # [batch] int64 noise row of each sequence
    root_step: torch.Tensor  # [batch] int64 commits already in the root's block
    temperature: float


@dataclass
class StaleFeatures:
    """Outputs of the target's previous pass at the node whose state seeds this round. All [batch, B, ...]."""

    topk_probs: torch.Tensor  # [batch, B, K] tempered probabilities, descending
    topk_ids: torch.Tensor  # [batch, B, K] int64 (-1 = padding)
    tokens: torch.Tensor  # [batch, B] int64, the token sampled at each position
    confidence: torch.Tensor  # [batch, B] confidence of that token (the decode's confidence kind)
    masked: torch.Tensor  # [batch, B] bool, positions masked in the scored state
    block_start: torch.Tensor  # [batch] int64, absolute position of block position 0
    block_index: torch.Tensor | int  # [batch] int64 (or one int for every row): which block of its generation
    confidence_kind: str = "prob"
    noise: NoiseCoordinates | None = None  # None when unknown
    sequence: torch.Tensor | None = None  # [batch] int64: the prompt each row decodes (None: row i is prompt i)

    _PER_ROW = ("topk_probs", "topk_ids", "tokens", "confidence", "masked", "block_start")

    def select(self, index: torch.Tensor) -> "StaleFeatures":
        """The features of rows `index` (rows leaving a batch)."""
        def pick(x):
            return x[index] if isinstance(x, torch.Tensor) else x
        noise = self.noise and NoiseCoordinates(self.noise.seed, self.noise.rows[index], self.noise.root_step[index],
                                                self.noise.temperature)
        return replace(self, **{name: getattr(self, name)[index] for name in self._PER_ROW},
                       block_index=pick(self.block_index), sequence=pick(self.sequence), noise=noise)

    def pad(self, count: int) -> "StaleFeatures":
        """`count` more rows of neutral features (rows joining a batch; never drafted from before their first
        pass)."""
        def grow(x, fill):
            return torch.cat((x, x.new_full((count,) + tuple(x.shape[1:]), fill)))
        out = replace(self, topk_probs=grow(self.topk_probs, 0), topk_ids=grow(self.topk_ids, -1),
                      tokens=grow(self.tokens, -1), confidence=grow(self.confidence, 0),
                      masked=grow(self.masked, False), block_start=grow(self.block_start, 0))
        if isinstance(self.block_index, torch.Tensor):
            out.block_index = grow(self.block_index, 0)
        if self.sequence is not None:
            out.sequence = grow(self.sequence, -1)
        if self.noise is not None:
            out.noise = NoiseCoordinates(self.noise.seed, grow(self.noise.rows, 0), grow(self.noise.root_step, 0),
                                         self.noise.temperature)
        return out


@runtime_checkable
class Drafter(Protocol):
    """What the decoder asks of an order drafter: `position_logits`. Optional attributes it reads when present
    (`drafter_limits`, spot.tree.tree_branch, spot.round): `branch` (children per frontier node of its trees),
    `max_block` (the largest block it reads), `token_vocab` (the vocabulary size whose token ids it reads; None
    when it reads none), `observe(...)` (a drafter that learns from each pass's commits) and `takes_depths` (True:
    `position_logits` also takes a keyword `depths`, a bound the CPU path knows on the depths of the pass's tree).
    Nothing else of a drafter is read."""

    def position_logits(self, stale: StaleFeatures, node_masked: torch.Tensor, node_row: torch.Tensor,
                        depth: torch.Tensor) -> torch.Tensor:
        """node_masked bool [F, B], node_row int64 [F] (batch row of each frontier node), depth int64 [F]
        (depth of the frontier node below the root) -> float [F, B] position logits."""


def resampled_confidence(topk_probs, topk_ids, seed: int, rows, block_start, steps, temperature: float,
                         backend: str = "auto") -> torch.Tensor:
    """[N, B]: at every position, the stale probability of the token committed there at noise step `steps` [N]:
    the Gumbel-max over the stale top-K with that step's coupled noise, i.e. the very token
    `spot_kernels.select_children` gives a drafted child there. T = 0: the stale top-1 probability.
    topk_probs [N, B, K] float32/64, topk_ids [N, B, K] int64 (-1 padding), rows/block_start/steps [N] int64."""
    if temperature == 0:
        return topk_probs[..., 0]
    tokens = resampled_tokens(topk_probs, topk_ids, seed, rows, block_start, steps, temperature, backend)
    hit = (topk_ids == tokens[..., None]) & (tokens >= 0)[..., None]
    return (topk_probs * hit).sum(-1)


def resampled_tokens(topk_probs, topk_ids, seed: int, rows, block_start, steps, temperature: float,
                     backend: str = "auto") -> torch.Tensor:
    """int64 [N, B]: the token committed at every position at noise step `steps` [N], drawn from the stale top-K
    (the token `spot_kernels.select_children` gives a drafted child there; -1 where there is none)."""
    n, B, _ = topk_probs.shape
    every = torch.ones(n, B, dtype=torch.bool, device=topk_probs.device)
    in_order = -torch.arange(B, dtype=topk_probs.dtype, device=topk_probs.device).expand(n, B)  # child i = position i
    return spot_kernels.select_children(in_order, every, topk_probs.new_zeros(n), topk_probs, topk_ids, seed, rows,
                                        block_start, steps, temperature, B, backend=backend).child_tokens


class ConfidenceDrafter:
    """No learned model: the next commit is drafted in order of the stale confidences (Spiffy-style).

    resampled: at T > 0, order by the stale probability of the token each position would commit at the node's own
    step instead (`resampled_confidence`, the token a drafted child commits there): the node's
    confidence as the stale pass predicts it, which a commit rule sorts its step's set by (docs/rules.md; used
    over rules other than one, with eight children per node: over steps:16 at T = 1, 1.57x fewer passes than the
    rule alone, 64 prompts x 256 tokens)."""

    resampled = False  # (class defaults: a subclass that keeps its own __init__ drafts as before)
    branch = None

    def __init__(self, resampled: bool = False):
        self.resampled = resampled
        # a rule's children are sets (eight variants of each size, spot_kernels.expand_steps): drafted eight per
        # node, as the learned drafters draft theirs (one commit per step: spot.tree.BRANCH)
        self.branch = 8 if resampled else None

    def position_logits(self, stale, node_masked, node_row, depth):
        noise = stale.noise
        if self.resampled and noise is not None and noise.temperature > 0:
            conf = resampled_confidence(stale.topk_probs[node_row], stale.topk_ids[node_row], noise.seed,
                                        noise.rows[node_row], stale.block_start[node_row],
                                        noise.root_step[node_row] + depth, noise.temperature)
            return conf.clamp_min(1e-30).log()
        conf = stale.confidence[node_row]
        if stale.confidence_kind in ("prob", "raw_prob"):
            return conf.clamp_min(1e-30).log()  # P(j) proportional to the stale confidence
        return conf  # margin / negative entropy are already log-scale-like scores


class OracleDrafter:
    """Diagnostic ceiling: drafts the true future commit order recorded from a `standard` run.

    `orders` int64 [batch, num_blocks, B]: the positions in the order standard decoding committed them.
    The drafted position is the first one in that order still masked in the node; tokens still come from the
    stale top-K, so this bounds what any order drafter can achieve on the target.
    ranked (a commit rule's trees, whose children are whole steps): every pending position instead, ranked by its
    place in the order, RANK_GAP apart: the first m ranks are the step's set, which a tree of sets takes with
    near certainty, so the tree is the true chain of steps with the stale tokens (and, for a threshold rule, the
    sizes the stale confidences give).
    """

    RANK_GAP = 8.0

    def __init__(self, orders: torch.Tensor, ranked: bool = False):
        self.orders = orders
        self.ranked = ranked

    def position_logits(self, stale, node_masked, node_row, depth):
        sequence = node_row if stale.sequence is None else stale.sequence[node_row]
        block_index = torch.as_tensor(stale.block_index, device=node_row.device)
        order = self.orders[sequence, block_index.expand(len(stale.block_start))[node_row]]  # [F, B]
        if self.ranked:  # position -> its place in the order (never committed: past the last)
            F, B = node_masked.shape
            place = torch.arange(B, dtype=stale.topk_probs.dtype, device=node_masked.device).expand(F, B)
            rank = torch.full((F, B + 1), float(B), dtype=place.dtype, device=node_masked.device)
            rank = rank.scatter(1, torch.where(order >= 0, order, B), place)[:, :B]
            return torch.where(node_masked, -self.RANK_GAP * rank, float("-inf"))
        pending = node_masked.gather(1, order.clamp_min(0)) & (order >= 0)
        first = torch.where(pending.any(1), pending.to(torch.int8).argmax(1), -1)
        logits = torch.full(node_masked.shape, float("-inf"), dtype=stale.topk_probs.dtype,
                            device=node_masked.device)
        has = first >= 0
        rows = torch.nonzero(has).squeeze(1)
        logits[rows, order[rows, first[rows]]] = 0.0
        return logits


def drafter_limits(drafter) -> tuple[int | None, int | None]:
    """(the largest block, the vocabulary whose token ids it reads) a drafter declares; None where it has no
    limit (the `Drafter` protocol's optional `max_block` and `token_vocab`)."""
    return getattr(drafter, "max_block", None), getattr(drafter, "token_vocab", None)
