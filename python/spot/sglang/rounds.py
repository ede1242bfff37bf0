"""One SPOT round over a batch of SGLang requests: draft, ONE tree forward, score, verify (docs/serving.md).

This is the round of `spot.round` (the one `spot.generate` runs), cut at the forward so that SGLang's scheduler,
not a Python loop, drives the rounds: each request brings its block as the scheduler holds it and the state this
module returned for it last round; the round returns the new block, whether the block is finished (its final tokens
persisted by this round's forward) and the next state. Drafting is `spot.round.draft`, scoring, verification and
the stale features `spot.round.settle`, with the static (capturable) configuration; nothing of the algorithm is
re-implemented here, only the per-request state SGLang carries between rounds.

Pure torch + spot, no SGLang import: `spot.sglang.algorithm.Spot` wraps it for SGLang, and the tests drive it with
a fake forward.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Callable

import torch

from spot_kernels import CONFIDENCE_KINDS
from spot_kernels.backends import BACKENDS
from spot_kernels.checks import MAX_K

from .. import limits
from ..drafters import ConfidenceDrafter, Drafter, NoiseCoordinates, StaleFeatures, default_top_k
from ..round import RoundConfig, draft, settle
from ..rules import parse_rule, rule_confidence
from ..tree import WIDTH, Tree, default_probes, tree_branch
from .layout import active_nodes

STALE_FIELDS = ("topk_probs", "topk_ids", "tokens", "confidence", "masked")
BACKEND_CHOICES = ("auto",) + BACKENDS  # spot_kernels backends (spot.generate's backend=)


@dataclass
class SpotOptions:
    """`--dllm-algorithm-config` keys of the Spot algorithm (all optional)."""

    drafter: str = "confidence"  # "confidence", "none" (one commit per forward: standard decoding), or a drafter
    # directory / "default" (spot.load_drafter)
    budget: int = 16  # most nodes one forward scores per request, root included
    width: int = WIDTH
    branch: int | None = None  # None: the drafter's own (spot.tree.tree_branch)
    seed: int = 0  # the coupled noise's seed (docs/noise.md); each request's row comes from its rid
    temperature: float = 0.0  # used when a batch carries no sampling info
    confidence: str = "prob"
    top_k: int | None = None  # the stale top-K per position (None: spot.drafters.default_top_k)
    backend: str = "auto"  # spot_kernels backend
    max_tree_tokens: int = 16384  # most tokens one tree forward holds over the batch (SGLang's default
    # max_prefill_tokens): trees are cut to fit, never below the roots
    rule: str = "one"  # the commit rule speculated (spot.rules): "threshold:0.95" is SGLang's LowConfidence
    probes: int | None = None  # a rule's probe nodes per tree (None: spot.tree.default_probes; docs/rules.md)

    @classmethod
    def from_mapping(cls, cfg, block_size: int | None = None) -> "SpotOptions":
        """The options of a `--dllm-algorithm-config` mapping, every key checked (one `Spot:` line naming the key),
        and with `block_size` everything the block decides too (a rule's steps must fit it), so a config is refused
        when the algorithm is built, never at a request."""
        if cfg is not None and not isinstance(cfg, Mapping):
            raise ValueError(f"Spot: the algorithm config (--dllm-algorithm-config) must be a mapping of keys such as "
                             f"{{'rule': 'threshold:0.95', 'budget': 16}}, got {type(cfg).__name__} ({cfg!r:.80})")
        cfg = dict(cfg or {})
        cfg.pop("block_size", None)  # SGLang's own key, read by DllmConfig
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(cfg) - set(known))
        if unknown:
            raise ValueError(f"Spot: unknown --dllm-algorithm-config keys {unknown}; known: {sorted(known)}")
        out = cls(**cfg)
        for name in ("budget", "width", "branch", "top_k", "max_tree_tokens"):
            v = getattr(out, name)
            if name in ("branch", "top_k") and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Spot: {name} must be an int >= 1, got {v!r}")
            if name in ("branch", "top_k") and v > MAX_K:  # spot_kernels' widest top-K and children per node
                raise ValueError(f"Spot: {name} must be an int in [1, {MAX_K}], got {v!r}")
        if isinstance(out.seed, bool) or not isinstance(out.seed, int) or not 0 <= out.seed < 2**63:
            raise ValueError(f"Spot: seed must be an int in [0, 2**63), got {out.seed!r}")
        if out.confidence not in CONFIDENCE_KINDS:
            raise ValueError(f"Spot: confidence must be one of {CONFIDENCE_KINDS}, got {out.confidence!r}")
        if out.backend not in BACKEND_CHOICES:
            raise ValueError(f"Spot: backend must be one of {BACKEND_CHOICES}, got {out.backend!r}")
        if not isinstance(out.drafter, str) or not out.drafter:
            raise ValueError(f"Spot: drafter must be 'confidence', 'none', 'default' or a drafter directory, got "
                             f"{out.drafter!r}")
        out.temperature = check_temperature(out.temperature, "Spot: temperature")
        if not isinstance(out.rule, str):
            raise ValueError(f"Spot: rule must be a string such as 'threshold:0.95', got {out.rule!r}")
        try:
            rule = parse_rule(out.rule)
            rule_confidence(rule, out.confidence)  # a rule that computes another confidence: refused as generate does
            if block_size is not None:
                rule.check_block(block_size)
        except ValueError as err:
            raise ValueError(f"Spot: {err}") from None
        if out.probes is not None:
            if isinstance(out.probes, bool) or not isinstance(out.probes, int) or not 0 <= out.probes < out.budget:
                raise ValueError(f"Spot: probes must be an int in [0, budget={out.budget}), got {out.probes!r}")
            if out.probes and rule.is_one:
                raise ValueError(f"Spot: probes={out.probes} needs a commit rule other than 'one' (a probe is a "
                                 "partial step of a rule)")
        return out


def check_temperature(t, what: str = "temperature") -> float:
    """generate's rule (spot.limits.temperature): 0, or in [MIN_TEMPERATURE, the largest float32]."""
    return limits.temperature(what, t)


def make_drafter(name: str, device="cpu", rule: str = "one") -> Drafter | None:
    if name == "none":
        return None
    if name == "confidence":
        return ConfidenceDrafter(resampled=not parse_rule(rule).is_one)
    from .. import load_drafter  # the learned drafter: weights on disk, loaded once per process

    return load_drafter(name, device=device)


def noise_row(rid: str) -> int:
    """A request's noise row (docs/design.md §2.3): 32 bits of a hash of its request id, so the noise a request
    draws never depends on its batch slot, on the batch's other requests or on the process."""
    return int.from_bytes(hashlib.blake2b(str(rid).encode(), digest_size=4).digest(), "little")


@dataclass
class RequestState:
    """What SPOT keeps of one request between rounds of one block; SGLang carries it on the request (FDFO's
    `req.dllm_algo_state`), so it follows the request, never a batch slot."""

    rid: str
    row: int
    fixed: int  # positions fixed before the block's first forward (the prompt's tail)
    stale: dict | None = None  # the deepest accepted node's outputs, STALE_FIELDS -> [B, ...] (round.stale_features)
    stale_step: int = -1  # step the stale features were recorded at
    step: int = 0  # the commit rule's steps taken in the block (one commit per step: read from the block instead)
    forwards: int = 0  # forwards spent on this block
    commits: list = field(default_factory=list)  # commits per forward on this block


@dataclass
class RoundResult:
    block: torch.Tensor  # int64 [bs, B]: the blocks after this round's commits
    done: list  # bool per request: the block had no masked position, so this forward persisted its final K/V
    states: list  # RequestState per request
    num_nodes: list  # nodes scored per request
    commits: list  # commits made per request this round


def spot_round(block: torch.Tensor, block_starts: list, rids: list, temperatures: list, states: list,
               forward: Callable, *, options: SpotOptions, drafter: Drafter | None, mask_id: int,
               prompt: torch.Tensor | None = None, broadcast: Callable | None = None) -> RoundResult:
    """One round for a batch.

    block int64 [bs, B]: each request's block as the scheduler holds it. block_starts: absolute position of each
    block's position 0. rids: stable request ids. temperatures: per request (0 = greedy). states: the RequestState
    returned last round, or None for a block's first round. forward(states [bs, N, B], num_nodes) -> logits
    [bs, N, B, V]: ONE target forward over every request's tree. prompt: optional bool [bs, B], positions that are
    prompt (SGLang's dllm_prompt_mask). broadcast(tree) -> tree: makes the draft trees identical on every
    tensor-parallel rank (docs/serving.md §determinism)."""
    bs, B = block.shape
    dev = block.device
    block = block.long()
    masked = block == mask_id
    if prompt is not None and bool((prompt & masked).any()):
        raise NotImplementedError("Spot: a prompt holds the mask token itself inside the block being decoded; "
                                  "SPOT's ops treat every mask token as undecided (docs/serving.md, limits)")
    n_masked = masked.sum(1).tolist()
    states = list(states) if states is not None else [None] * bs
    n_fixed = None
    for i in range(bs):
        s = states[i]
        if s is None:  # a block's first round: whatever is not masked is prompt
            if n_fixed is None:
                n_fixed = (prompt if prompt is not None else ~masked).sum(1).tolist()
            states[i] = RequestState(str(rids[i]), noise_row(rids[i]), n_fixed[i])
        elif s.rid != str(rids[i]):
            raise RuntimeError(f"Spot: request {rids[i]!r} was handed the state of request {s.rid!r}")
    rule = parse_rule(options.rule)
    commits_so_far = [B - states[i].fixed - n_masked[i] for i in range(bs)]
    if any(k < 0 for k in commits_so_far):
        raise RuntimeError(f"Spot: a block has more masked positions than when it started: commits {commits_so_far}")
    steps = commits_so_far if rule.is_one else [s.step for s in states]
    active = [n > 0 for n in n_masked]
    temps = [check_temperature(float(t)) for t in temperatures]
    block_start = torch.tensor(block_starts, dtype=torch.long, device=dev)
    step_t = torch.tensor(steps, dtype=torch.long, device=dev)
    rows_t = torch.tensor([s.row for s in states], dtype=torch.long, device=dev)

    # 1. Draft: a tree per active request with stale features of its current state, else the root alone.
    tree = Tree.root_only(block)
    groups: dict = {}
    for i in range(bs):
        usable = active[i] and drafter is not None and states[i].stale is not None \
            and states[i].stale_step == steps[i]
        if usable:
            groups.setdefault(temps[i], []).append(i)
    for t, idx in groups.items():
        ix = torch.tensor(idx, dtype=torch.long, device=dev)
        cfg = round_config(options, drafter, t, mask_id, B, dev)
        stale = _stack_stale([states[i].stale for i in idx], block_start[ix], cfg, rows_t[ix], step_t[ix])
        tree = _put_tree(tree, ix, draft(cfg, drafter, block[ix], step_t[ix], rows_t[ix], stale))
    if broadcast is not None:
        tree = broadcast(tree)
    tree = cap_tree_tokens(tree, options.max_tree_tokens)
    num_nodes = active_nodes(tree.parents)

    # 2. ONE forward over every request's nodes.
    logits = forward(tree.states, num_nodes)
    logits[..., mask_id] = float("-inf")  # committing the mask token would undo a commit

    # 3. Score every node, verify, and keep the deepest accepted node's outputs for the next tree.
    new_block, commits = block.clone(), [0] * bs
    by_t: dict = {}
    for i in range(bs):
        if active[i]:
            by_t.setdefault(temps[i], []).append(i)
    for t, idx in by_t.items():
        ix = torch.tensor(idx, dtype=torch.long, device=dev)
        cfg = round_config(options, drafter, t, mask_id, B, dev)
        sub = Tree(*(_rows(getattr(tree, f.name), ix) for f in fields(Tree)))
        out = settle(cfg, sub, logits[ix], block[ix], step_t[ix], rows_t[ix], block_start[ix])
        if bool(((out.n_acc == 0) if out.stuck is None else out.stuck).any()):
            raise RuntimeError("Spot: the target produced no valid commit (NaN or all -inf logits) for a masked block")
        new_block[ix] = out.block
        stale = out.stale
        n_acc, new_step = out.n_acc.tolist(), out.step.tolist()
        for j, i in enumerate(idx):
            states[i].stale = {name: getattr(stale, name)[j] for name in STALE_FIELDS}
            states[i].stale_step = states[i].step = new_step[j]
            commits[i] = n_acc[j]
    for i in range(bs):
        states[i].forwards += 1
        states[i].commits.append(commits[i])
    return RoundResult(new_block, [not a for a in active], states, num_nodes, commits)


def cap_tree_tokens(tree: Tree, max_tokens: int) -> Tree:
    """At most max(1, max_tokens // (bs B)) nodes per request. A tree's nodes come parents first, so its first k
    nodes hold their ancestors: cutting the rest leaves a valid, smaller tree (fewer drafts, the same tokens)."""
    bs, n, B = tree.states.shape
    cap = max(1, max_tokens // max(bs * B, 1))
    if n <= cap:
        return tree
    return Tree(*(None if x is None else x[:, :cap].contiguous()
                  for x in (getattr(tree, f.name) for f in fields(Tree))))


def round_config(options: SpotOptions, drafter, temperature: float, mask_id: int, block_size: int,
                 device) -> RoundConfig:
    """The round's configuration for the requests of one temperature: static (fixed shapes, no host sync inside
    the round), no end-of-sequence closing (SGLang decides when a request stops), the options' commit rule."""
    rule = parse_rule(options.rule)
    confidence = rule_confidence(rule, options.confidence)
    tables = None if rule.is_one else rule.tables(block_size, device)
    top_k = options.top_k or default_top_k(rule.is_one, temperature, drafts=drafter is not None)
    return RoundConfig(mask_id, options.seed, temperature, confidence, top_k, options.backend,
                       options.budget, options.width, tree_branch(drafter, options.branch), eos_id=None, static=True,
                       rule=tables,
                       probes=default_probes(tables, options.budget) if options.probes is None else options.probes)


def _rows(x: torch.Tensor | None, ix: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x[ix]


def _stack_stale(per_request: list, block_start: torch.Tensor, cfg: RoundConfig, rows: torch.Tensor,
                 step: torch.Tensor) -> StaleFeatures:
    stacked = {name: torch.stack([s[name] for s in per_request]) for name in STALE_FIELDS}
    return StaleFeatures(**stacked, block_start=block_start, block_index=0, confidence_kind=cfg.confidence,
                         noise=NoiseCoordinates(cfg.seed, rows, step, cfg.temperature))


def _put_tree(tree: Tree, ix: torch.Tensor, sub: Tree) -> Tree:
    """`tree` with rows `ix` replaced by `sub`, both padded to the wider node count (padding: parent -1). A rule's
    step tree has no per-node commits (positions, tokens None): the merged tree then has none either."""
    n = max(tree.parents.shape[1], sub.parents.shape[1])
    tree, sub = _pad(tree, n), _pad(sub, n)
    if sub.positions is None:
        tree.positions = tree.tokens = None
    for f in fields(Tree):
        if getattr(tree, f.name) is not None:
            getattr(tree, f.name)[ix] = getattr(sub, f.name)
    return tree


def _pad(tree: Tree, n: int) -> Tree:
    b, m, B = tree.states.shape
    if m == n:
        return tree
    extra = n - m
    states = torch.cat((tree.states, tree.states[:, :1].expand(b, extra, B)), 1)
    none = tree.parents.new_full((b, extra), -1)

    def grow(x):
        return None if x is None else torch.cat((x, none), 1)

    return Tree(states, grow(tree.parents), grow(tree.positions), grow(tree.tokens),
                torch.cat((tree.depth, torch.zeros_like(none)), 1))
