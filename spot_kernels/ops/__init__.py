"""The `torch.ops.spot.*` ops, one module per op family, named as in reference/, triton/, csrc/cuda/ and tests/.

Why one module per family: everything that defines an op sits together and is written once. Each module holds, for
each of its ops, top to bottom: the schema string (the only one: the C++ kernels and the private `_<op>_cuda`
schemas derive from it, see spot_kernels/registry.py), the public Python wrapper with its documented arguments,
the argument check (which also gives the clear errors) and the fake implementation (output shapes for tracing),
and at the end `OPS`, the op definitions that spot_kernels/registry.py registers in one generic loop. A change to
an op's contract is then one file (plus its kernels), reviewed as one piece. The check helpers shared by all
families live in spot_kernels/checks.py, the backend choice in spot_kernels/backends.py.

Every wrapper calls the registered op, so torch.compile and torch.library.opcheck see the real ops. Every op takes
`backend`: "auto" (default; honours the SPOT_BACKEND environment variable), "reference", "triton" or "cuda". A
backend that cannot run the call raises `spot_kernels.BackendUnavailable`.
"""

from . import commit_rule, expand_frontier, noise, order_logits, score, select_children, tree_attention, verify_tree

MODULES = (commit_rule, expand_frontier, noise, order_logits, score, select_children, tree_attention, verify_tree)
# Op name -> its definition (schema, check, fake), and -> its family: the file stem shared by every backend
# (reference/<family>.py, triton/<family>.py, csrc/cuda/<family>.cu) and by the tests (tests/ops/test_<family>.py).
OPS = {d.name: d for module in MODULES for d in module.OPS}
FAMILIES = {d.name: module.__name__.rsplit(".", 1)[-1] for module in MODULES for d in module.OPS}
SCHEMAS = {name: d.schema for name, d in OPS.items()}
