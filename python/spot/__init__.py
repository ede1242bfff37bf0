"""SPOT: lossless speculative decoding for diffusion language models by commit-order prediction.

Read from `generate` down: decode.py (the loop; settings.py, its TreeSettings and Batching) -> tree.py (draft
trees) -> drafters.py (order drafters) -> target.py (the target contract) -> model.py (the embedded transformer)
-> spot_kernels (the ops).
"""

import os

from .decode import METHODS, DecodeStats, GenerateOutput, generate
from .drafters import ConfidenceDrafter, Drafter, NoiseCoordinates, OracleDrafter, StaleFeatures
from .hf import HFTarget
from .loading import load_model, load_target, save_model
from .model import BlockDiffusionLM, ModelConfig
from .online import OnlineCalibrated
from .order_model import LearnedDrafter, OrderModel, OrderModelConfig, drafter_directory, load_learned_drafter
from .settings import Batching, TreeSettings
from .target import ModelTarget, Session, Target


def load_drafter(name: str = "default", *, device="cpu") -> LearnedDrafter | OnlineCalibrated:
    """The learned order drafter for method="spot": "default" is the one shipped for the embedded target (built by
    `spot build collect` + `spot build drafter`; it reads token ids, so it runs on that vocabulary only);
    "portable" is the shipped one that reads no token ids (any target, blocks up to 64, docs/drafter.md);
    otherwise a directory holding drafter.safetensors + drafter.json. NAME+online (or NAME+online-SET) is drafter
    NAME wrapped in `OnlineCalibrated`, which recalibrates it from the target's own commits while it decodes
    (spot/online.py; SET: a key of spot.online.FEATURE_SETS, default "rich2")."""
    base, online, features = str(name).rpartition("+online")
    if online and base and (not features or features.startswith("-")):
        from .online import FEATURE_SETS
        if (features[1:] or "rich2") not in FEATURE_SETS:
            raise ValueError(f"drafter {name!r}: unknown online feature set {features[1:]!r}; expected one of "
                             f"{sorted(FEATURE_SETS)}")
        return OnlineCalibrated(load_drafter(base, device=device), features=features[1:] or "rich2")
    directory = drafter_directory(name)
    if not os.path.lexists(directory / "drafter.safetensors"):  # there but unreadable: load_weights says so
        raise FileNotFoundError(f"no order drafter in {directory}; train one with `spot build drafter`")
    drafter = load_learned_drafter(directory)
    drafter.model.to(device)
    return drafter


__all__ = [
    "METHODS", "Batching", "BlockDiffusionLM", "ConfidenceDrafter", "DecodeStats", "Drafter", "GenerateOutput",
    "HFTarget", "LearnedDrafter", "ModelConfig", "ModelTarget", "NoiseCoordinates", "OnlineCalibrated", "OrderModel",
    "OrderModelConfig", "OracleDrafter", "Session", "StaleFeatures", "Target", "TreeSettings", "generate",
    "load_drafter", "load_model", "load_target", "save_model",
]
