"""Targets and their weights: the embedded default model, random models for tests, safetensors I/O (every write
through spot/files.py's guard: nothing inside the installed package unless asked).

Weights are only ever read with safetensors (no pickles), and nothing is downloaded.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .files import (PACKAGE_DIR, atomic_write, atomic_write_text, check_output_path, check_readable_file,  # noqa: F401
                    overwriting_shipped, read_json, remove_stale_temporaries)
from .model import BlockDiffusionLM, ModelConfig
from .limits import size
from .target import ModelTarget

WEIGHTS_DIR = Path(__file__).parent / "weights"
# the targets shipped in the package, by name: "default" is the embedded target, trained with SDAR's attention
# (block-causal prefix), which `spot export` writes as an SDAR checkpoint; "causal" the first embedded target, of the
# same shape with a token-causal prefix, and "target2" an independently trained one (another seed and shape, the same
# tokenizer, token-causal), the test bed for drafter transfer
SHIPPED_TARGETS = {"default": WEIGHTS_DIR, "causal": WEIGHTS_DIR / "causal", "target2": WEIGHTS_DIR / "target2"}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def save_weights(module: torch.nn.Module, directory, name: str, meta: dict) -> None:
    """`name`.safetensors (float32 state dict) + `name`.json (`meta`) in `directory`.

    Both files are written in full to temporary files first and only then moved into place (`os.replace`), so an
    interrupted save leaves the previous weights intact and no partial file behind."""
    directory = check_output_path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in module.state_dict().items()}
    text = json.dumps(meta, indent=1, sort_keys=True) + "\n"

    def write_both(tmp_json):  # the config moves into place only after the weights did
        Path(tmp_json).write_text(text)
        atomic_write(directory / f"{name}.safetensors", lambda tmp: save_file(state, tmp))

    atomic_write(directory / f"{name}.json", write_both)


def load_weights(directory, name: str) -> tuple[dict[str, torch.Tensor], dict]:
    """The state dict and metadata written by `save_weights` (safetensors: nothing is unpickled).

    Refuses, naming the file: a missing or unreadable file, JSON that is not an object, and any tensor that is not
    floating point (weights are floats: integer tensors would be cast silently) or holds NaN/infinity."""
    directory = Path(directory)
    config, weights = directory / f"{name}.json", directory / f"{name}.safetensors"
    for path in (config, weights):
        check_readable_file(path)
    meta = read_json(config)  # a JSON object, read under the input-file rule (errors name the file)
    try:
        with safe_open(str(weights), "pt") as f:
            state = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{weights}: not a readable safetensors file ({e})") from None
    for key, tensor in state.items():
        if not tensor.is_floating_point():
            raise ValueError(f"{weights}: tensor {key!r} has dtype {tensor.dtype}; weights must be floating point")
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{weights}: tensor {key!r} holds NaN or infinite values")
    return state, meta


def check_config_fields(meta, cls, path, optional=()) -> dict:
    """The fields of dataclass `cls` from a saved config `meta`, type-checked: every field present (except
    `optional` ones), none unknown, ints as JSON integers (not booleans), floats as finite numbers, bools as
    booleans. Errors name the file and the field."""
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: config must be a JSON object, got {type(meta).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(meta) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown config fields {unknown}")
    missing = sorted(set(known) - set(meta) - set(optional))
    if missing:
        raise ValueError(f"{path}: config lacks required fields {missing}")
    for name, value in meta.items():
        kind = known[name].type
        kind = kind.__name__ if isinstance(kind, type) else str(kind)
        if kind == "bool" and not isinstance(value, bool):
            raise ValueError(f"{path}: config field {name!r} must be true or false, got {value!r}")
        if kind == "int" and (not isinstance(value, int) or isinstance(value, bool) or abs(value) >= 2**63):
            raise ValueError(f"{path}: config field {name!r} must be an integer in (-2**63, 2**63), got "
                             f"{_short(value)}")
        if kind == "float" and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                or not math.isfinite(_as_float(value))):
            raise ValueError(f"{path}: config field {name!r} must be a finite number, got {_short(value)}")
    return dict(meta)


def _as_float(value) -> float:
    try:
        return float(value)
    except OverflowError:  # an int past float's range (JSON allows 10**400)
        return math.inf


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_model_config(meta, path) -> ModelConfig:
    """A target's saved config, checked at load time (errors name `path` and the field)."""
    # prefix_attention came later: a config without it is the token-causal first target's
    cfg = ModelConfig(**check_config_fields(meta, ModelConfig, path, optional=("prefix_attention",)))
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{path}: config field {name!r} must be >= 1, got {getattr(cfg, name)}")
    for name in ("rope_theta", "norm_eps"):
        if getattr(cfg, name) <= 0:
            raise ValueError(f"{path}: config field {name!r} must be > 0, got {getattr(cfg, name)}")
    if cfg.d_model % cfg.n_heads:
        raise ValueError(f"{path}: config field 'n_heads' ({cfg.n_heads}) must divide d_model ({cfg.d_model})")
    if cfg.n_heads % cfg.n_kv_heads:
        raise ValueError(f"{path}: config field 'n_kv_heads' ({cfg.n_kv_heads}) must divide n_heads ({cfg.n_heads})")
    if cfg.head_dim % 2:
        raise ValueError(f"{path}: config fields 'd_model' / 'n_heads' give an odd head dimension {cfg.head_dim}"
                         " (rotary positions need an even one)")
    for name in ("pad_id", "eos_id", "mask_id"):
        if not 0 <= getattr(cfg, name) < cfg.vocab_size:
            raise ValueError(f"{path}: config field {name!r} must lie in [0, vocab_size={cfg.vocab_size}), "
                             f"got {getattr(cfg, name)}")
    if cfg.mask_id == cfg.eos_id:
        raise ValueError(f"{path}: config fields 'mask_id' and 'eos_id' must differ (both {cfg.mask_id})")
    cfg.validate()
    # float32 bytes of the weights, estimated before any is allocated: embedding, then per layer the q/o and k/v
    # projections, the three MLP matrices and the norms
    hd = cfg.head_dim
    per_layer = 2 * cfg.d_model * cfg.n_heads * hd + 2 * cfg.d_model * cfg.n_kv_heads * hd + 3 * cfg.d_model * cfg.d_ff
    size(f"{path}: config fields 'n_layers' ({cfg.n_layers}), 'd_model' ({cfg.d_model}), 'd_ff' ({cfg.d_ff}) and "
         f"'vocab_size' ({cfg.vocab_size}) give weights of",
         4 * (cfg.vocab_size * cfg.d_model + cfg.n_layers * per_layer))
    return cfg


def load_checked_state(model: torch.nn.Module, state: dict, path) -> None:
    """`model.load_state_dict(state)`, after checking that every tensor is there with the model's shape (errors
    name `path` and the tensor: a config that does not match its weights)."""
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{path}: tensors do not match the config: missing {missing[:5]}, unexpected "
                         f"{unexpected[:5]}")
    for key, tensor in expected.items():
        if state[key].shape != tensor.shape:
            raise ValueError(f"{path}: tensor {key!r} has shape {tuple(state[key].shape)}, the config says "
                             f"{tuple(tensor.shape)}")
    model.load_state_dict(state)


def save_model(model: BlockDiffusionLM, directory, name: str = "target") -> None:
    save_weights(model, directory, name, asdict(model.cfg))


def load_model(directory, name: str = "target") -> BlockDiffusionLM:
    """The target saved by `save_model`, its config and weights checked at load time."""
    state, meta = load_weights(directory, name)
    cfg = check_model_config(meta, Path(directory) / f"{name}.json")
    model = BlockDiffusionLM(cfg)
    load_checked_state(model, state, Path(directory) / f"{name}.safetensors")
    return model


def embedded_target_available() -> bool:
    return (WEIGHTS_DIR / "target.safetensors").is_file()


def load_target(name: str = "default", *, dtype="float32", device="cpu", seed: int = 0,
                config: ModelConfig | None = None, **hf_options):
    """Return a target ready for `spot.generate`.

    name: "default" (the embedded trained model shipped in the package, with SDAR's attention), "causal" (the first
    embedded model, token-causal), "target2" (a second token-causal one, another seed and shape: docs/model_card.md),
    "random" (random weights from `seed`,
    shaped by `config`, for tests and benchmarks), a directory holding target.safetensors + target.json, or a
    Hugging Face checkpoint directory (config.json + weights + tokenizer files), which gives a `spot.HFTarget`;
    `hf_options` (family, force_family, layout, mask_token, mask_id, eos_id, trust_remote_code, logits_shift,
    attn_implementation) go to `spot.hf.load_hf_target` then, and are refused otherwise; a checkpoint of a known
    family (LLaDA, Dream, SDAR, LLaDA2, BD3-LM: read from its config.json) gives that family's target (spot.families).
    A `family` that contradicts the one config.json names is refused, naming both, unless `force_family=True`.
    dtype: "float32" (default), "float64" (exactness tests), "bfloat16" or "float16" (on CPU computed in float32
    from the half weights, docs/half_precision.md).
    """
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
        dtype = DTYPES[dtype]
    if name not in (*SHIPPED_TARGETS, "random") and Path(name).is_dir() and not (Path(name) / "target.json").is_file() \
            and (Path(name) / "config.json").is_file():
        return _load_checkpoint(name, dtype, device, **hf_options)
    if hf_options:
        raise TypeError(f"load_target: {sorted(hf_options)} apply to Hugging Face checkpoint directories only")
    tokenizer = _shipped_tokenizer()
    if name == "random":
        cfg = config or ModelConfig(vocab_size=tokenizer.vocab_size if tokenizer else 4096)
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"config: expected a spot.ModelConfig, got {type(cfg).__name__}")
        cfg = check_model_config(asdict(cfg), "load_target(config=...)")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = BlockDiffusionLM(cfg)
    elif name in SHIPPED_TARGETS:
        if not (SHIPPED_TARGETS[name] / "target.safetensors").is_file():
            raise FileNotFoundError(f"no embedded target weights in {SHIPPED_TARGETS[name]}; train them with "
                                    "`spot build target`")
        model = load_model(SHIPPED_TARGETS[name])
    elif Path(name).is_dir():
        model = load_model(name)
    else:
        names = ", ".join(repr(n) for n in (*SHIPPED_TARGETS, "random"))
        raise ValueError(f"name: expected one of {names} or a weights directory, got {name!r}")
    if tokenizer is not None and tokenizer.vocab_size != model.cfg.vocab_size:
        tokenizer = None  # a model of another vocabulary has no text interface
    return ModelTarget(model.to(device=device, dtype=dtype), tokenizer)


def _load_checkpoint(directory, dtype, device, *, family: str | None = "auto", layout: str = "block_causal",
                     logits_shift: int = 0, force_family: bool = False, **options):
    """A Hugging Face checkpoint directory's target: its family's (spot.families) when config.json names one or
    `family` does, else the generic HFTarget(layout, logits_shift). A `family` that contradicts config.json is
    refused unless `force_family` (spot.families.load_family_target)."""
    from .families import load_family_target
    from .hf import FAMILIES, checkpoint_config, family_of, load_hf_target

    if family == "auto":
        family = family_of(checkpoint_config(directory))
    elif family == "generic":
        family = None
    elif family is not None and family not in FAMILIES:
        raise ValueError(f"family: expected 'auto', 'generic', None or one of {FAMILIES}, got {family!r}")
    if family is None:
        if force_family:
            raise ValueError("force_family: forces a family named with family=; the generic path has none")
        return load_hf_target(directory, layout=layout, logits_shift=logits_shift, dtype=dtype, device=device,
                              **options)
    return load_family_target(directory, family, dtype=dtype, device=device, force_family=force_family, **options)


def _shipped_tokenizer():
    try:
        from .tokenizer import load_tokenizer
        return load_tokenizer()
    except (ImportError, FileNotFoundError):
        return None
