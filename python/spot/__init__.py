"""SPOT: lossless speculative decoding for diffusion language models by commit-order prediction.

Read from `generate` down: decode.py (the loop) -> tree.py (draft trees) -> drafters.py (order drafters)
-> target.py (the target contract) -> model.py (the embedded transformer) -> spot_kernels (the ops).
"""

from .decode import METHODS, DecodeStats, GenerateOutput, generate
from .drafters import ConfidenceDrafter, Drafter, OracleDrafter, StaleFeatures
from .loading import load_model, load_target, save_model
from .model import BlockDiffusionLM, ModelConfig
from .target import ModelTarget, Session, Target


def load_drafter(name: str = "default"):
    """The embedded learned order drafter for the embedded target (built by `spot train-drafter`)."""
    raise FileNotFoundError("no embedded order drafter is shipped yet; method='spot' needs a drafter object")


__all__ = [
    "METHODS", "BlockDiffusionLM", "ConfidenceDrafter", "DecodeStats", "Drafter", "GenerateOutput", "ModelConfig",
    "ModelTarget", "OracleDrafter", "Session", "StaleFeatures", "Target", "generate", "load_drafter",
    "load_model", "load_target", "save_model",
]
