"""The two settings objects of `spot.generate`: how each pass's draft tree is shaped and run (`TreeSettings`), and
how prompts share the target's rows (`Batching`). Frozen and checked when made, so an error names the field and
comes before any work; NumPy integers are taken and stored as ints, bools are refused where an int is meant."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from . import limits
from .tree import WIDTH, default_probes, tree_branch


@dataclass(frozen=True)
class TreeSettings:
    """The draft tree of every pass (docs/design.md §2.4) and how its round runs (docs/round.md).

    budget: the most nodes (root included) one verification pass may score; 1 is the root alone, standard's pass.
    width: frontier nodes expanded per depth, on every device (a CPU's CPU time at large budgets favours 1:
    docs/round.md). branch: children drafted per frontier node (None: the spot drafter's own `branch`, else
    spot.tree.BRANCH).
    static: run the round with fixed shapes and no host sync inside it (spot.round; None: on accelerators, or when
    `compile` is set) or let the host trim trees and stop their growth early (the CPU default, which saves drafter
    and target work there); the trees and tokens are the same either way.
    compile: a torch.compile backend ("inductor", "aot_eager", ..., or a backend callable) that runs the static
    round compiled (spot.round.compiled): a pass whose target forward is capturable (the embedded target's on a
    GPU, `Session.capturable_pass`) as one graph with that forward inside, on CUDA with "inductor" captured in a
    CUDA graph per bucket (mode="reduce-overhead"); other passes as the round's two halves around the target's
    forward. A compiled round is a static one. None: eager (docs/round.md says why on CPU).
    score_all_nodes: score every tree node in one call (None: on accelerators) or only the chain verification can
    reach (the CPU default, where each scored row costs time); the tokens are the same either way.
    probes: with a commit rule, how many of the budget's nodes are probes, partial steps scored so that the next
    tree is drafted from fresher outputs (docs/rules.md, "Probes"; None: spot.tree.default_probes, two for a rule
    whose steps commit several positions at budget 15 and more; 0 for rule="one").
    """

    budget: int = 16
    width: int = WIDTH
    branch: int | None = None
    static: bool | None = None
    compile: str | Callable | None = None
    score_all_nodes: bool | None = None
    probes: int | None = None

    def __post_init__(self):
        for name in ("budget", "width", "branch"):
            value = getattr(self, name)
            if value is None and name == "branch":
                continue
            value = limits.integer(f"TreeSettings.{name}", value)
            if value < 1:
                raise ValueError(f"TreeSettings.{name}: expected >= 1, got {value}")
            object.__setattr__(self, name, value)
        if self.probes is not None:
            value = limits.integer("TreeSettings.probes", self.probes)
            if not 0 <= value < self.budget:
                raise ValueError(f"TreeSettings.probes: expected 0 <= probes < budget ({self.budget}), got {value}")
            object.__setattr__(self, "probes", value)
        for name in ("static", "score_all_nodes"):
            _bool_or_none(f"TreeSettings.{name}", getattr(self, name))
        if self.compile is not None and not (isinstance(self.compile, str) and self.compile or
                                             not isinstance(self.compile, str) and callable(self.compile)):
            raise TypeError(f"TreeSettings.compile: expected None or a torch.compile backend (a name or a callable), "
                            f"got {self.compile!r}")
        if self.compile is not None and self.static is False:
            raise ValueError("TreeSettings.compile: a compiled round is a static one (static=True or None)")

    def resolved(self, drafter, device, rule=None) -> TreeSettings:
        """Every None filled for one decode: branch from `drafter` (the spot drafter, else None), static and
        score_all_nodes from the device (on when it is not a CPU; static also when compiled), probes from the
        commit rule's tables (`rule`, a spot.rules.RuleTables; None: one commit per step, which has none)."""
        accelerator = device.type != "cpu"
        if self.probes and rule is None:
            raise ValueError(f"TreeSettings.probes: {self.probes} probes, but rule='one' drafts single commits, which "
                             "are its steps (probes are partial steps of a rule that commits several)")
        probes = default_probes(rule, self.budget) if self.probes is None else self.probes
        return replace(self, branch=tree_branch(drafter, self.branch), probes=probes,
                       static=(accelerator or self.compile is not None) if self.static is None else self.static,
                       score_all_nodes=accelerator if self.score_all_nodes is None else self.score_all_nodes)


@dataclass(frozen=True)
class Batching:
    """How prompts share the target's rows.

    max_batch: decode at most this many prompts at once (None: all); a row that is done (its blocks, or an
    end-of-sequence token) leaves and the next prompt takes its place (continuous batching). Needs a target whose
    sessions advance rows at their own pace (`Session.per_row`, the embedded target's).
    lockstep: keep rows in lock-step even where the session could let each row start its next block as soon as it
    finishes one (per-row progress, the default there); the tokens are the same either way.
    """

    max_batch: int | None = None
    lockstep: bool = False

    def __post_init__(self):
        if self.max_batch is not None:
            value = limits.integer("Batching.max_batch", self.max_batch)
            if value < 1:
                raise ValueError(f"Batching.max_batch: expected None or >= 1, got {value}")
            object.__setattr__(self, "max_batch", value)
        if not isinstance(self.lockstep, bool):
            raise TypeError(f"Batching.lockstep: expected a bool, got {type(self.lockstep).__name__}")


def _bool_or_none(name: str, value) -> None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name}: expected None or a bool, got {type(value).__name__} ({value!r})")
