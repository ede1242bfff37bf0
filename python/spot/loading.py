"""Targets and their weights: the embedded default model, random models for tests, safetensors I/O.

Weights are only ever read with safetensors (no pickles), and nothing is downloaded.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .model import BlockDiffusionLM, ModelConfig
from .target import ModelTarget

WEIGHTS_DIR = Path(__file__).parent / "weights"
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def save_weights(module: torch.nn.Module, directory, name: str, meta: dict) -> None:
    """`name`.safetensors (float32 state dict) + `name`.json (`meta`) in `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(directory / f"{name}.safetensors"))
    (directory / f"{name}.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def load_weights(directory, name: str) -> tuple[dict[str, torch.Tensor], dict]:
    """The state dict and metadata written by `save_weights` (safetensors: nothing is unpickled)."""
    directory = Path(directory)
    meta = json.loads((directory / f"{name}.json").read_text())
    return load_file(str(directory / f"{name}.safetensors")), meta


def save_model(model: BlockDiffusionLM, directory, name: str = "target") -> None:
    save_weights(model, directory, name, asdict(model.cfg))


def load_model(directory, name: str = "target") -> BlockDiffusionLM:
    state, meta = load_weights(directory, name)
    model = BlockDiffusionLM(ModelConfig.from_dict(meta))
    model.load_state_dict(state)
    return model


def embedded_target_available() -> bool:
    return (WEIGHTS_DIR / "target.safetensors").is_file()


def load_target(name: str = "default", *, dtype="float32", device="cpu", seed: int = 0,
                config: ModelConfig | None = None) -> ModelTarget:
    """Return a target ready for `spot.generate`.

    name: "default" (the embedded trained model shipped in the package), "random" (random weights from `seed`,
    shaped by `config`, for tests and benchmarks), or a directory holding target.safetensors + target.json.
    dtype: "float32" (default), "float64" (exactness tests) or "bfloat16" (GPU).
    """
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
        dtype = DTYPES[dtype]
    tokenizer = _shipped_tokenizer()
    if name == "random":
        cfg = config or ModelConfig(vocab_size=tokenizer.vocab_size if tokenizer else 4096)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = BlockDiffusionLM(cfg)
    elif name == "default":
        if not embedded_target_available():
            raise FileNotFoundError(f"no embedded target weights in {WEIGHTS_DIR}; train them with `spot build target`")
        model = load_model(WEIGHTS_DIR)
    elif Path(name).is_dir():
        model = load_model(name)
    else:
        raise ValueError(f"name: expected 'default', 'random' or a weights directory, got {name!r}")
    if tokenizer is not None and tokenizer.vocab_size != model.cfg.vocab_size:
        tokenizer = None  # a model of another vocabulary has no text interface
    return ModelTarget(model.to(device=device, dtype=dtype), tokenizer)


def _shipped_tokenizer():
    try:
        from .tokenizer import load_tokenizer
        return load_tokenizer()
    except (ImportError, FileNotFoundError):
        return None
