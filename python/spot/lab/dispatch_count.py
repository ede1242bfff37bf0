"""Count what a decode dispatches: aten (and spot) ops and host synchronisations, per decoding stage.

Per-pass code is hot code (docs/round.md): on a GPU every dispatched op is a kernel launch paid in host time, and
every host synchronisation drains the launch queue. `DispatchCounter` is a `TorchDispatchMode` that counts both
while it is active, attributing each op to the stage it ran under, read from the Python stack (the innermost frame
of a known decoder function wins), so the hot code carries no counting hooks:

    draft        tree growth and the drafter (spot/tree.py, drafters.py, order_model.py, online.py, round.draft)
    score        spot.round.score_nodes / score_chain / score_step_chain (fused scoring and the mask-token exclusion)
    verify       spot.round.verify (verify_tree, the commit tokens); with a commit rule rule_commits and
                 verify_steps (commit_rule, verify_steps)
    stale        spot.round.stale_features (what the next tree is drafted from)
    target       the target's own forward (spot/target.py, model.py, hf.py, llada2_pipeline.py)
    bookkeeping  everything else (the decode loop, slots, orders, statistics)

A host sync is an op that copies a device value to the host: aten._local_scalar_dense (`.item()`, `bool(t)`,
`int(t)`), `Tensor.tolist()` (counted apart: on a CPU tensor it dispatches no op), aten.nonzero (its output size
depends on values), aten.is_nonzero, or an op whose output shape depends on values (aten.masked_select,
aten.unique*, boolean-mask indexing through aten.index). On a CPU these do not stall anything, but they are the
ones that would on a GPU. A spot custom op counts as one op (its
insides run below the mode).

    with DispatchCounter() as counter:
        out = spot.generate(...)
    counter.per_pass(out.stats.target_passes)  # {stage: {"ops": .., "syncs": ..}}
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

STAGES = ("draft", "score", "verify", "stale", "bookkeeping", "target")

# ops whose result the host must wait for (a value, or an output shape that depends on values)
SYNC_OPS = frozenset({"aten._local_scalar_dense", "aten.nonzero", "aten.is_nonzero", "aten.masked_select",
                      "aten.unique_dim", "aten._unique2", "aten.unique_consecutive", "aten.nonzero_static_fallback"})

_SPOT = Path(__file__).resolve().parent.parent  # the runtime package, spot/
_FILE_STAGES = {
    _SPOT / "tree.py": "draft", _SPOT / "drafters.py": "draft", _SPOT / "order_model.py": "draft",
    _SPOT / "online.py": "draft",
    _SPOT / "target.py": "target", _SPOT / "model.py": "target", _SPOT / "hf.py": "target",
    _SPOT / "llada2_pipeline.py": "target",
}
# functions of spot/round.py by stage; its other functions (the round's own glue) are bookkeeping
_ROUND_STAGES = {"draft": "draft", "grow_tree": "draft", "_draft_depth": "draft", "_keep_best": "draft",
                 "score_nodes": "score", "score_chain": "score", "score_step_chain": "score", "verify": "verify",
                 "rule_commits": "verify", "verify_steps": "verify", "stale_features": "stale"}
_ROUND = _SPOT / "round.py"


def _stage_of_stack() -> str:
    frame = sys._getframe(2)
    files: dict = {}
    while frame is not None:
        code = frame.f_code
        path = files.get(code.co_filename)
        if path is None:
            path = files[code.co_filename] = Path(code.co_filename).resolve()
        if path == _ROUND:
            stage = _ROUND_STAGES.get(code.co_name)
            if stage is not None:
                return stage
        else:
            stage = _FILE_STAGES.get(path)
            if stage is not None:
                return stage
        frame = frame.f_back
    return "bookkeeping"


def _is_sync(name: str, args) -> bool:
    if name in SYNC_OPS:
        return True
    if name.startswith("aten.index.") or name.startswith("aten.index_put"):
        indices = args[1] if len(args) > 1 else ()
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())
    return False


class DispatchCounter(TorchDispatchMode):
    """Counts dispatched ops and host syncs by stage while active (see the module docstring). `ops[stage]` and
    `syncs[stage]` are totals; `by_op[stage]` a Counter of op names."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.syncs: Counter = Counter()
        self.by_op: dict[str, Counter] = {s: Counter() for s in STAGES}
        self._paths: dict = {}

    def __enter__(self):
        # Tensor.tolist reads a CPU tensor's memory without dispatching any op: count it here (on a GPU it is a
        # device-to-host copy, a sync)
        real, counter = torch.Tensor.tolist, self

        def tolist(tensor):
            stage = _stage_of_stack()
            counter.syncs[stage] += 1
            counter.by_op[stage]["Tensor.tolist"] += 1
            return real(tensor)

        self._real_tolist = real
        torch.Tensor.tolist = tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._real_tolist
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        full = str(func)
        stage = _stage_of_stack()
        self.ops[stage] += 1
        self.by_op[stage][full] += 1
        if _is_sync(full.rsplit(".", 1)[0] if full.count(".") > 1 else full, args):
            self.syncs[stage] += 1
        return func(*args, **(kwargs or {}))

    def per_pass(self, passes: int) -> dict:
        """{stage: {"ops": ops per pass, "syncs": syncs per pass}} over `passes` target passes, and "decoder" (every
        stage but the target's forward)."""
        n = max(passes, 1)
        out = {s: {"ops": self.ops[s] / n, "syncs": self.syncs[s] / n} for s in STAGES}
        out["decoder"] = {k: sum(out[s][k] for s in STAGES if s != "target") for k in ("ops", "syncs")}
        return out


def format_per_pass(table: dict) -> str:
    lines = [f"{'stage':<12} {'ops/pass':>9} {'syncs/pass':>10}"]
    for stage, row in table.items():
        lines.append(f"{stage:<12} {row['ops']:>9.1f} {row['syncs']:>10.2f}")
    return "\n".join(lines)
