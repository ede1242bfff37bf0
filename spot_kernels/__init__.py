"""SPOT kernels: `torch.ops.spot.*` custom ops for speculative decoding of diffusion language models.

Importing this package registers the ops. The schemas come from the compiled extension `spot_kernels._C` when it
loads (and with it any CUDA kernels), else from `spot_kernels.schemas`; set SPOT_NO_EXTENSION=1 to skip the
extension. See docs/ops.md for the contract of each op.
"""

import os
import warnings

import torch  # noqa: F401  (loads libtorch before the extension)

# No placeholder `_C = None` here: `from . import _C` would return the attribute instead of importing the module.
HAS_C_EXTENSION = False
if os.environ.get("SPOT_NO_EXTENSION", "") != "1":
    try:
        from . import _C

        HAS_C_EXTENSION = True
    except ImportError as err:
        if not (isinstance(err, ModuleNotFoundError) and err.name == f"{__name__}._C"):
            # Built but unloadable (e.g. a torch ABI mismatch): say so instead of silently losing the kernels.
            warnings.warn(f"spot_kernels._C failed to load ({err}); using the Python op schemas", stacklevel=2)

from . import _library  # noqa: E402
from .backends import BackendUnavailable, available_backends  # noqa: E402
from .ops import (  # noqa: E402
    noise_uniform,
    score,
    select_children,
    tree_attention,
    tree_mask,
    tree_mask_additive,
    tree_mask_mod,
    tree_mask_packed,
    tree_position_ids,
    verify_tree,
)

_libraries = _library.register(define_schemas=not HAS_C_EXTENSION)  # kept alive: registrations die with them

__all__ = [
    "BackendUnavailable",
    "HAS_C_EXTENSION",
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
