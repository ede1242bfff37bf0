"""Commit rules: how many masked positions one step of a sampler commits, and which (docs/rules.md).

Every rule here commits, at each step, the m masked positions with the highest confidence (ties: the lowest
position), with

    m = min(max(quota(step, n), passing), n)

where n counts the masked positions that have a token (a valid logit row), `quota` is the rule's per-step count
and `passing` is the length of the longest run of the sorted confidences c(0) >= c(1) >= ... that pass their
rank's threshold (`>` or `>=`, compared in the confidence's own dtype, as PyTorch compares a tensor with a Python
float). That one form covers one commit per step (`one`), LLaDA's k per step (`steps:N`), Fast-dLLM's and SGLang's
thresholds (`threshold:T`), LLaDA2's and SDAR's threshold with a quota (`threshold:T,steps:N`), Fast-dLLM's factor
rule (`factor:F`) and Dream's schedule (`dream:N`). A rule is therefore data: `RuleTables`, a quota table and a
threshold table that the ops read (`spot_kernels.commit_rule`, `expand_steps`), so no kernel knows any rule.

The string form is parsed the same way by the API (`generate(rule=...)`) and the CLI (`--rule`): comma-separated
terms `name[:value]`, for example `steps:16`, `threshold:0.9,cmp:ge`, `threshold:0.95,steps:32`, `dream:128,
alg:entropy`. A rule that rewrites committed tokens (editing, remasking) is not a commit rule: `NotACommitRule`.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
from dataclasses import dataclass

import torch

__all__ = ["CommitRule", "DREAM_CONFIDENCE", "KINDS", "NotACommitRule", "ONE", "RuleTables", "canonical_rule",
           "parse_rule", "rule_confidence", "rule_error", "rule_file_name"]

# Dream's `alg` names and the `score` confidence kind that computes each (docs/ops.md, "Fused scoring").
DREAM_CONFIDENCE = {"maskgit_plus": "prob", "topk_margin": "margin", "entropy": "neg_entropy"}
# Terms that name samplers which rewrite committed tokens (diffusers' editing, SGLang's JointThreshold, remasking).
KINDS = ("one", "steps", "threshold", "factor", "dream")  # a rule's kinds (CommitRule.kind)
_REWRITING = ("edit", "editing", "editing_threshold", "remask", "remasking", "joint", "joint_threshold", "t2t")


class NotACommitRule(ValueError):
    """A sampler setting that rewrites committed tokens: SPOT's trees are monotone sequences of commits, so there is
    nothing to verify such a step against."""


def rule_error(kind, steps, threshold, inclusive, eps, confidence) -> str | None:
    """What is wrong with a commit rule's values, or None: the one check of a rule, run by `parse_rule` on a string's
    values and by `CommitRule` on its fields (so a rule is refused alike wherever it enters: the API, the CLI, the
    SGLang plug-in's config), each message naming the term at fault."""
    if not isinstance(kind, str) or kind not in KINDS:
        return f"kind expects one of {KINDS}, got {kind!r}"
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral):
            return f"{'dream' if kind == 'dream' else 'steps'} expects an integer, got {steps!r}"
        if steps < 1:
            return f"the number of steps must be >= 1, got {steps}"
    if kind in ("steps", "dream") and steps is None:
        return f"a {kind} rule needs its number of steps ({kind}:N)"
    if kind in ("one", "factor") and steps is not None:
        return f"'steps' does not apply to a {kind} rule"
    if kind in ("threshold", "factor"):
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold):
            return f"{kind} expects a finite number, got {threshold!r}"
        if kind == "threshold" and not 0 < threshold < 1:
            return f"the threshold must lie in (0, 1) (a probability), got {threshold!r}"
        if kind == "factor" and threshold <= 0:
            return f"the factor must be > 0, got {threshold!r}"
    elif threshold is not None:
        return f"a {kind} rule has no threshold, got threshold={threshold!r}"
    if not isinstance(inclusive, bool):
        return f"inclusive (cmp) expects a bool, got {inclusive!r}"
    if inclusive != (kind == "factor") and kind != "threshold":
        return (f"'cmp' does not apply to a {kind} rule" + (" (it compares with >=, as Fast-dLLM's does)"
                                                            if kind == "factor" else ""))
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < 1:
        return f"eps must lie in (0, 1), got {eps!r}"
    if kind != "dream" and eps != 1e-3:
        return f"'eps' does not apply to a {kind} rule"
    if confidence is not None and (kind != "dream" or confidence not in DREAM_CONFIDENCE.values()):
        return (f"alg (confidence) expects one of {sorted(DREAM_CONFIDENCE.values())} (Dream's "
                f"{sorted(DREAM_CONFIDENCE)}), got {confidence!r}" if kind == "dream"
                else f"a {kind} rule names no confidence (only Dream's alg does), got confidence={confidence!r}")
    return None


@dataclass(frozen=True)
class CommitRule:
    """One commit rule (see the module docstring). Build it with `parse_rule`; the fields are:

    kind: "one", "steps", "threshold", "factor" or "dream".
    steps: N steps per block: LLaDA's split of the block over N steps (block_size // N per step, the remainder to
        the first steps), the quota of `steps` and `threshold` (None: no quota beyond one commit); Dream's number
        of timesteps for `dream`.
    threshold: T in (0, 1) for `threshold`; the factor F > 0 for `factor`.
    inclusive: compare the confidence with `>=` (Fast-dLLM, dInfer) instead of `>` (LLaDA2, SDAR, SGLang, diffusers):
        a threshold rule's choice (`cmp:ge`); None: the kind's own (`>=` for factor, which has no other).
    eps: Dream's last timestep (`torch.linspace(1, eps, steps + 1)`), in (0, 1).
    confidence: the `score` confidence kind the rule names (Dream's `alg`), None: the decode's own.

    The fields are checked when the rule is made, by the one check of a rule's values (`rule_error`, which
    `parse_rule` runs on a string's): a CommitRule made directly is refused where its string form would be.
    """

    kind: str = "one"
    steps: int | None = None
    threshold: float | None = None
    inclusive: bool | None = None
    eps: float = 1e-3
    confidence: str | None = None

    def __post_init__(self):
        if self.inclusive is None:
            object.__setattr__(self, "inclusive", self.kind == "factor")
        problem = rule_error(self.kind, self.steps, self.threshold, self.inclusive, self.eps, self.confidence)
        if problem:
            raise ValueError(f"CommitRule: {problem}")
        if self.steps is not None:
            object.__setattr__(self, "steps", operator.index(self.steps))  # NumPy integers stored as ints
        if self.threshold is not None:
            object.__setattr__(self, "threshold", float(self.threshold))
        object.__setattr__(self, "eps", float(self.eps))

    @property
    def is_one(self) -> bool:
        """One commit per step: the decoder's original path (spot_kernels.verify_tree), bit for bit."""
        return self.kind == "one"

    def __str__(self) -> str:
        if self.kind == "one":
            return "one"
        if self.kind == "steps":
            return f"steps:{self.steps}"
        if self.kind == "dream":
            alg = {v: k for k, v in DREAM_CONFIDENCE.items()}[self.confidence or "prob"]
            eps = "" if self.eps == 1e-3 else f",eps:{self.eps!r}"
            return f"dream:{self.steps}" + ("" if alg == "maskgit_plus" else f",alg:{alg}") + eps
        text = f"{self.kind}:{self.threshold!r}"
        if self.steps is not None:
            text += f",steps:{self.steps}"
        if self.kind == "threshold" and self.inclusive:
            text += ",cmp:ge"
        return text

    def check_block(self, block_size: int) -> None:
        """A rule's steps must fit the block: N steps of at least one commit each (named error before any pass)."""
        if self.steps is not None and self.steps > block_size:
            raise ValueError(f"rule {self}: {self.steps} steps per block exceed the block size {block_size} (each step "
                             "commits at least one position; use steps <= block_size)")

    def tables(self, block_size: int, device) -> RuleTables:
        """The rule as data for a block of `block_size` positions, on `device` (cached)."""
        return _tables(self, block_size, torch.device(device))


ONE = CommitRule()


@dataclass(frozen=True)
class RuleTables:
    """A commit rule as the ops read it (spot_kernels.commit_rule, docs/ops.md "Commit rules").

    quota: int64 [S, B + 1]: quota[min(step, S - 1), n], the step's count for a node with n masked positions.
    thresholds: float64 [B + 1, B]: thresholds[n, r], the rank-r threshold of a node with n valid masked positions
        (+inf: none passes); compared in the confidence's dtype.
    inclusive: `>=` instead of `>`.
    rule: the rule these tables were built from.
    several_per_step: a step of the quota's own schedule over a block (no threshold) commits more than one
        position, Dream's last step (all that is left) aside: a host bool, which spot.tree.default_probes reads.
    """

    quota: torch.Tensor
    thresholds: torch.Tensor
    inclusive: bool
    rule: CommitRule
    several_per_step: bool = False

    @property
    def has_threshold(self) -> bool:
        return self.rule.kind in ("threshold", "factor")


@functools.lru_cache(maxsize=64)
def _tables(rule: CommitRule, block_size: int, device: torch.device) -> RuleTables:
    rule.check_block(block_size)
    B = block_size
    n = torch.arange(B + 1)
    inf = math.inf
    thresholds = torch.full((B + 1, B), inf, dtype=torch.float64)
    if rule.kind in ("one", "threshold", "factor") and rule.steps is None:
        quota = torch.ones(1, B + 1, dtype=torch.long)
    elif rule.kind in ("steps", "threshold"):
        # LLaDA's get_num_transfer_tokens (and LLaDA2's / SDAR's on block_length): B // N per step, the remainder
        # to the first steps; a node with fewer masked positions commits them all (min with n, in the op)
        N = rule.steps
        per_step = B // N + (torch.arange(N) < B % N).long()
        quota = per_step[:, None].expand(N, B + 1).contiguous()
    else:  # dream: int(n * (1 - s / t)) with t, s consecutive float32 timesteps, all that is left at the last step
        N = rule.steps
        t = torch.linspace(1, rule.eps, N + 1, dtype=torch.float32)
        factor = 1 - t[1:] / t[:-1]  # [N] float32, as Dream computes it
        quota = torch.floor(n.to(torch.float32)[None, :] * factor[:, None]).long()  # float32 product, truncated
        quota[-1] = n
    if rule.kind == "threshold":
        thresholds[:] = rule.threshold
    elif rule.kind == "factor":
        # Fast-dLLM's get_transfer_index_dynamic: rank r >= 1 passes while c(r) >= 1 - F / (r + 2); rank 0 always
        # passes, and the last rank passes too (its loop commits all n when only the last one fails)
        r = torch.arange(B, dtype=torch.float64)
        thresholds[:] = 1 - rule.threshold / (r + 2)
        thresholds[:, 0] = -inf
        thresholds[n[1:], n[1:] - 1] = -inf
    n_left, several = B, False  # along the quota's own schedule (a threshold only adds commits)
    for row in quota[:-1] if rule.kind == "dream" else quota:
        q = min(int(row[n_left]), n_left)
        several, n_left = several or q >= 2, n_left - q
    return RuleTables(quota.to(device), thresholds.to(device), rule.inclusive, rule, several)


def _number(rule: str, term: str, value: str, kind):
    try:
        x = kind(value)
    except ValueError:
        raise ValueError(f"rule {rule!r}: {term} expects {'an integer' if kind is int else 'a number'}, got "
                         f"{value!r}") from None
    if kind is float and not math.isfinite(x):
        raise ValueError(f"rule {rule!r}: {term} expects a finite number, got {value!r}")
    return x


def parse_rule(text) -> CommitRule:
    """A `CommitRule` from its string form (or a CommitRule, returned as is). Raises ValueError naming the term at
    fault (NotACommitRule for a rule that rewrites committed tokens)."""
    if isinstance(text, CommitRule):
        return text
    if not isinstance(text, str):
        raise TypeError(f"rule: expected a string such as 'steps:16' or a spot.rules.CommitRule, got "
                        f"{type(text).__name__}")
    terms: dict[str, str | None] = {}
    for term in text.replace(" ", "").lower().split(","):
        name, has_value, value = term.partition(":")
        if not name:
            raise ValueError(f"rule {text!r}: empty term; expected terms such as 'steps:16', 'threshold:0.9'")
        if name in _REWRITING or name.startswith(("edit", "remask")):
            raise NotACommitRule(f"rule {text!r}: {name!r} rewrites committed tokens, which is not a commit rule: SPOT "
                                 "verifies monotone commits only (turn editing / remasking off)")
        if name in terms:
            raise ValueError(f"rule {text!r}: {name!r} given twice")
        terms[name] = value if has_value else None
    kinds = [k for k in ("one", "steps", "threshold", "factor", "dream") if k in terms]
    unknown = set(terms) - {"one", "steps", "threshold", "factor", "dream", "cmp", "alg", "eps"}
    if unknown:
        raise ValueError(f"rule {text!r}: unknown term {sorted(unknown)[0]!r}; expected one, steps:N, threshold:T, "
                         "factor:F or dream:N, with options steps:N (threshold), cmp:gt|ge (threshold), "
                         "alg:maskgit_plus|topk_margin|entropy and eps:E (dream)")
    kind = "steps" if kinds == ["steps"] else (kinds[0] if len(kinds) == 1 else
                                               "threshold" if set(kinds) == {"threshold", "steps"} else None)
    if kind is None:
        raise ValueError(f"rule {text!r}: expected one of one, steps:N, threshold:T[,steps:N], factor:F, dream:N")
    allowed = {"one": {"one"}, "steps": {"steps"}, "threshold": {"threshold", "steps", "cmp"},
               "factor": {"factor"}, "dream": {"dream", "alg", "eps"}}[kind]
    extra = set(terms) - allowed
    if extra:
        raise ValueError(f"rule {text!r}: {sorted(extra)[0]!r} does not apply to a {kind} rule")
    if terms.get("one") is not None:
        raise ValueError(f"rule {text!r}: 'one' takes no value")
    for name in allowed - {"one"}:
        if name in terms and not terms[name]:  # `steps`, `steps:` and `alg:` alike
            raise ValueError(f"rule {text!r}: {name!r} needs a value ({name}:...)")
    steps = None
    if "steps" in terms or kind == "dream":
        steps = _number(text, "steps" if kind != "dream" else "dream", terms.get("steps") or terms["dream"], int)
    threshold = None
    if kind in ("threshold", "factor"):
        threshold = _number(text, kind, terms[kind], float)
    inclusive = kind == "factor"  # Fast-dLLM's factor rule breaks at c < 1 - F / (r + 2): passing is >=
    if "cmp" in terms:
        if terms["cmp"] not in ("gt", "ge"):
            raise ValueError(f"rule {text!r}: cmp expects gt (confidence > T) or ge (confidence >= T), got "
                             f"{terms['cmp']!r}")
        inclusive = terms["cmp"] == "ge"
    confidence = None
    eps = 1e-3
    if kind == "dream":
        alg = terms.get("alg", "maskgit_plus")
        if alg not in DREAM_CONFIDENCE:
            raise ValueError(f"rule {text!r}: alg expects one of {sorted(DREAM_CONFIDENCE)}, got {alg!r}")
        confidence = DREAM_CONFIDENCE[alg]
        if "eps" in terms:
            eps = _number(text, "eps", terms["eps"], float)
    problem = rule_error(kind, steps, threshold, inclusive, eps, confidence)
    if problem:
        raise ValueError(f"rule {text!r}: {problem}")
    return CommitRule(kind, steps, threshold, inclusive, eps, confidence)


def rule_confidence(rule: CommitRule, confidence: str) -> str:
    """The confidence kind of a decode under `rule`: the one the rule computes (Dream's alg) unless `confidence`
    names another, which contradicts it and is refused ("prob", the default of generate and the SGLang config,
    gives way to the rule's)."""
    if rule.confidence is None or confidence == rule.confidence:
        return confidence
    if confidence != "prob":
        raise ValueError(f"confidence: rule {rule} computes its confidence as {rule.confidence!r}, but "
                         f"confidence={confidence!r} was given")
    return rule.confidence


def canonical_rule(rule) -> str:
    """A rule's canonical string (`str(parse_rule(rule))`): how rules are compared and looked up, wherever a rule
    names something (a report's by_rule keys, `spot project --rule`, `--show-order`, shard names), so case, spaces,
    the order of terms and the spelling of a number (0.90, 9e-1) never make two names of one rule."""
    return str(parse_rule(rule))


def rule_file_name(rule) -> str:
    """A rule as part of a file name (`spot build collect`'s shards, `spot bench --rules --plot`'s figures): its
    canonical form with ':' and ',' as '_' (threshold_0.9_steps_32). Two rules never share one: the canonical form's
    terms come in one order and its numbers are Python's shortest round-trip spellings, kept whole, signs and
    exponents included (factor:2e-1 is factor_0.2, factor:2e+1 factor_20.0). "family" (a target's own default)
    stays "family"."""
    return (rule if rule == "family" else canonical_rule(rule)).replace(":", "_").replace(",", "_")
