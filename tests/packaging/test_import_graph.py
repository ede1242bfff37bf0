"""The import graph of spot_kernels and python/spot has no cycle, and the ops never import their oracle.

The graph is read from the source with `ast`, not by importing: every `import` statement counts, wherever it sits
(module level, inside a function, under `if TYPE_CHECKING:`), as an edge of the module that holds it. A call-time
import still ties the two modules together, it only hides the tie from the import system, so it counts as a
module-level one. What is not counted: `importlib.import_module` with a computed name (the backends' kernel tables,
spot_kernels.triton.<family>, are loaded that way on purpose: they are leaves, which the test below also checks),
and the implicit import of a parent package by its submodule (counting it would make every package that imports
its own submodules a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"spot_kernels": ROOT / "spot_kernels", "spot": ROOT / "python" / "spot"}
# Compiled by setup.py, so absent from a fresh clone: a leaf, which imports nothing of ours.
COMPILED = ("spot_kernels._C",)


def _modules() -> dict[str, Path | None]:
    """Dotted module name -> source file, for every .py file of the two packages (None: compiled)."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    for name in COMPILED:
        found[name] = None
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name `from <...> import` refers to, relative imports resolved against `module`."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is one of our modules (`spot_kernels.ops.score.x` -> ...ops.score)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """module -> the modules of ours it imports (see the module docstring for what counts)."""
    modules = _modules() if modules is None else modules
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        if path is None:
            continue
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(module, is_package, node)
                # `from pkg import sub` imports the submodule pkg.sub when there is one, else a name of pkg.
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                           for alias in node.names]
            for target in targets:
                known = _known(target, modules)
                if known is not None and known != module:
                    graph[module].add(known)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_is_read():
    """The parser sees the edges it must (else an empty graph would pass the cycle test)."""
    graph = import_graph()
    assert "spot_kernels.registry" in graph["spot_kernels"]
    assert "spot_kernels.checks" in graph["spot_kernels.ops.score"]  # `from .. import checks`
    assert graph["spot_kernels.extension"] == {"spot_kernels._C"}  # `from . import _C`: the compiled module
    assert "spot.decode" in graph["spot"]
    assert "spot_kernels" in graph["spot.decode"]  # across the two packages
    assert "spot.lab.pipeline.cli" in graph["spot.cli"]  # a call-time import counts
    assert sum(len(targets) for targets in graph.values()) > 100


def test_the_runtime_does_not_import_the_lab():
    """spot.lab (the offline pipeline, benchmarking, projection, plotting, the demo) sits above the runtime: no
    runtime module imports it, except the CLI, inside the subcommand that needs it."""
    graph = import_graph()
    runtime = {m for m in graph if m.startswith("spot") and not m.startswith("spot.lab") and m != "spot.cli"}
    assert "spot.decode" in runtime and "spot.lab.bench" in graph
    assert {m: sorted(t for t in graph[m] if t.startswith("spot.lab")) for m in runtime
            if any(t.startswith("spot.lab") for t in graph[m])} == {}
    assert {"spot.lab.bench", "spot.lab.demo", "spot.lab.project", "spot.lab.pipeline.cli"} <= graph["spot.cli"]


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    found = cycles(import_graph())
    assert found == [], "import cycles (each a set of modules that import each other, directly or not):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("family", ["noise", "score", "select_children", "tree_attention", "verify_tree"])
def test_ops_do_not_import_the_reference(family):
    """ops/ states the contract, reference/ is the oracle that tests check kernels against: an op that imports
    its oracle could not be checked against it independently."""
    graph = import_graph()
    reach, todo = set(), [f"spot_kernels.ops.{family}"]
    while todo:
        for target in graph[todo.pop()]:
            if target not in reach:
                reach.add(target)
                todo.append(target)
    assert not {m for m in reach if m.startswith("spot_kernels.reference")}


def test_kernel_modules_loaded_by_name_are_leaves():
    """The backends load spot_kernels.<backend>.<family> by a computed name, which the graph does not see: those
    modules must not import the dispatch layer back (else the hidden edge would close a cycle)."""
    graph = import_graph()
    dispatch = {"spot_kernels", "spot_kernels.backends", "spot_kernels.registry"}
    for module, targets in graph.items():
        if module.startswith(("spot_kernels.reference.", "spot_kernels.triton.")):
            assert not targets & dispatch, (module, targets & dispatch)
