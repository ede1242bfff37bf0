"""SPOT kernels: `torch.ops.spot.*` custom ops for speculative decoding of diffusion language models.

Importing this package registers the ops: their schemas and Python wrappers come from spot_kernels/ops/<family>.py
(spot_kernels/registry.py registers them), the CUDA kernels from the compiled extension `spot_kernels._C` when it
loads; set SPOT_NO_EXTENSION=1 to skip the extension. See docs/ops.md for the contract of each op.
"""

import os
import warnings

import torch  # noqa: F401  (loads libtorch before the extension)

# No placeholder `_C = None` here: `from . import _C` would return the attribute instead of importing the module.
HAS_C_EXTENSION = False
if os.environ.get("SPOT_NO_EXTENSION", "") != "1":
    try:
        from . import _C  # noqa: F401  (loading it registers the C++ kernels)

        HAS_C_EXTENSION = True
    except ImportError as err:
        if not (isinstance(err, ModuleNotFoundError) and err.name == f"{__name__}._C"):
            # Built but unloadable (e.g. a torch ABI mismatch): say so instead of silently losing the kernels.
            warnings.warn(f"spot_kernels._C failed to load ({err}); running without its kernels", stacklevel=2)

from . import registry  # noqa: E402
from .backends import BackendUnavailable, available_backends  # noqa: E402
from .ops import OPS  # noqa: E402
from .ops.noise import noise_uniform  # noqa: E402
from .ops.score import CONFIDENCE_KINDS, ScoreOutput, score  # noqa: E402
from .ops.select_children import ChildSelection, select_children  # noqa: E402
from .ops.tree_attention import (  # noqa: E402
    tree_attention,
    tree_mask,
    tree_mask_additive,
    tree_mask_mod,
    tree_mask_packed,
    tree_position_ids,
)
from .ops.verify_tree import VerifyOutput, verify_tree  # noqa: E402

_libraries = registry.register(OPS.values())  # kept alive: registrations die with them

__all__ = [
    "BackendUnavailable",
    "CONFIDENCE_KINDS",
    "ChildSelection",
    "HAS_C_EXTENSION",
    "ScoreOutput",
    "VerifyOutput",
    "available_backends",
    "noise_uniform",
    "score",
    "select_children",
    "tree_attention",
    "tree_mask",
    "tree_mask_additive",
    "tree_mask_mod",
    "tree_mask_packed",
    "tree_position_ids",
    "verify_tree",
]
