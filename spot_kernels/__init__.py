"""SPOT kernels: `torch.ops.spot.*` custom ops for speculative decoding of diffusion language models.

Importing this package registers the ops: their schemas and Python wrappers come from spot_kernels/ops/<family>.py
(spot_kernels/registry.py registers them), the CUDA kernels from the compiled extension `spot_kernels._C` when it
loads; set SPOT_NO_EXTENSION=1 to skip the extension. See docs/ops.md for the contract of each op.
"""

import torch  # noqa: F401  (loads libtorch before the extension)

from . import registry
from .extension import HAS_C_EXTENSION
from .backends import BackendUnavailable, available_backends
from .ops import OPS
from .ops.commit_rule import commit_rule
from .ops.expand_frontier import Expansion, StepExpansion, expand_frontier, expand_steps
from .ops.noise import noise_uniform
from .ops.order_logits import order_logits
from .ops.score import CONFIDENCE_KINDS, ScoreOutput, score
from .ops.select_children import ChildSelection, select_children
from .ops.tree_attention import (
    tree_attention,
    tree_mask,
    tree_mask_additive,
    tree_mask_mod,
    tree_mask_packed,
    tree_position_ids,
)
from .ops.verify_tree import StepsOutput, VerifyOutput, verify_steps, verify_tree

_libraries = registry.register(OPS.values())  # kept alive: registrations die with them

__all__ = [
    "BackendUnavailable",
    "CONFIDENCE_KINDS",
    "ChildSelection",
    "Expansion",
    "HAS_C_EXTENSION",
    "ScoreOutput",
    "StepExpansion",
    "StepsOutput",
    "VerifyOutput",
    "available_backends",
    "commit_rule",
    "expand_frontier",
    "expand_steps",
    "noise_uniform",
    "order_logits",
    "score",
    "select_children",
    "tree_attention",
    "tree_mask",
    "tree_mask_additive",
    "tree_mask_mod",
    "tree_mask_packed",
    "tree_position_ids",
    "verify_steps",
    "verify_tree",
]
