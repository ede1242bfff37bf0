"""`spot export DIR`: an embedded target as an SDAR checkpoint directory, which SDAR's own modeling code loads.

The embedded model is SDAR's architecture (the Qwen3 backbone: RMSNorm, q/k norms per head, rotary positions in the
half-split layout, SwiGLU, grouped-query attention, tied embeddings), so exporting it renames weights and writes the
config SDAR checkpoints carry: `model_type` "sdar", `architectures` ["SDARForCausalLM"], and the `auto_map` naming
`configuration_sdar.py` / `modeling_sdar.py`, the files an SDAR checkpoint ships beside its weights. Those files are
SDAR's, not this project's: put them in the directory to load it with transformers (docs/integrations.md says from
where). The tokenizer goes as `tokenizer.json` with a `tokenizer_config.json` naming its pad, end-of-sequence and
mask tokens, so `spot.load_target(DIR, trust_remote_code=True)` finds the mask without a flag.

Only a model trained with SDAR's attention (`ModelConfig.prefix_attention` "block") is exported: the token-causal
first target computes its prefix otherwise, and SDAR's code would decode other tokens from it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from .model import BlockDiffusionLM

SDAR_AUTO_MAP = {"AutoConfig": "configuration_sdar.SDARConfig", "AutoModel": "modeling_sdar.SDARModel",
                 "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"}
SDAR_CODE_FILES = ("configuration_sdar.py", "modeling_sdar.py")
# The longest sequence the exported config declares: SDAR's rotary tables have no hard limit below it.
MAX_POSITIONS = 4096


def sdar_config(model: BlockDiffusionLM) -> dict:
    """config.json of the exported checkpoint: SDARConfig's own fields (configuration_sdar.py) and what SDAR's
    checkpoints add (`fuse_cross_entropy`, which its forward reads; it fuses the loss in training only), plus the
    special ids."""
    cfg = model.cfg
    return {
        "architectures": ["SDARForCausalLM"], "model_type": "sdar", "auto_map": dict(SDAR_AUTO_MAP),
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim, "hidden_act": "silu", "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta, "rope_scaling": None, "attention_bias": False,
        "attention_dropout": 0.0, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": cfg.n_layers, "fuse_cross_entropy": True, "tie_word_embeddings": True, "use_cache": True,
        "initializer_range": 0.02, "pad_token_id": cfg.pad_id, "eos_token_id": cfg.eos_id, "bos_token_id": cfg.eos_id,
        "mask_token_id": cfg.mask_id, "torch_dtype": "float32",
    }


def sdar_state_dict(model: BlockDiffusionLM) -> dict[str, torch.Tensor]:
    """The weights under SDAR's names (Qwen3's), float32, contiguous; the LM head is the tied embedding."""
    out = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        attn, mlp = layer.attn, layer.mlp
        out.update({
            p + "input_layernorm.weight": layer.attn_norm.weight,
            p + "post_attention_layernorm.weight": layer.mlp_norm.weight,
            p + "self_attn.q_proj.weight": attn.q_proj.weight, p + "self_attn.k_proj.weight": attn.k_proj.weight,
            p + "self_attn.v_proj.weight": attn.v_proj.weight, p + "self_attn.o_proj.weight": attn.o_proj.weight,
            p + "self_attn.q_norm.weight": attn.q_norm.weight, p + "self_attn.k_norm.weight": attn.k_norm.weight,
            p + "mlp.gate_proj.weight": mlp.gate.weight, p + "mlp.up_proj.weight": mlp.up.weight,
            p + "mlp.down_proj.weight": mlp.down.weight,
        })
    return {k: v.detach().to(torch.float32).contiguous().clone() for k, v in out.items()}


def tokenizer_config(tokenizer) -> dict:
    """tokenizer_config.json for transformers' PreTrainedTokenizerFast over the exported tokenizer.json."""
    from .tokenizer import EOS, MASK, PAD

    return {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": PAD, "eos_token": EOS, "mask_token": MASK,
            "bos_token": EOS, "model_max_length": MAX_POSITIONS, "clean_up_tokenization_spaces": False}


def check_destination(directory) -> Path:
    """The export's directory, refused by name before anything is written: an existing file, a directory that is not
    empty (nothing is ever overwritten), or a place this user cannot create it in."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"export: {path} is a file, not a directory; name a new or empty directory")
    if path.is_dir() and any(path.iterdir()):
        raise FileExistsError(f"export: {path} is not empty; name a new or empty directory (nothing is overwritten)")
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"export: cannot write {path}: {parent} is not a directory this user may write in")
    return path


def export_sdar(model: BlockDiffusionLM, tokenizer, directory) -> Path:
    """Write `model` and `tokenizer` (spot.tokenizer.Tokenizer) to `directory` as an SDAR checkpoint (module
    docstring). The files are written into a temporary directory beside it and moved into place whole."""
    if model.cfg.prefix_attention != "block":
        raise ValueError("export: this model was trained with token-causal prefix attention (the shipped 'causal' and "
                         "'target2' targets); SDAR's code computes a block-causal prefix and would decode other tokens "
                         "from it")
    if tokenizer is None:
        raise ValueError("export: the target has no tokenizer; an SDAR checkpoint carries one")
    path = check_destination(directory)
    try:
        path.absolute().parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.absolute().parent))
    except OSError as e:
        raise PermissionError(f"export: cannot write {path}: {e.strerror or e}") from None
    try:
        save_file(sdar_state_dict(model), str(staging / "model.safetensors"), metadata={"format": "pt"})
        (staging / "config.json").write_text(json.dumps(sdar_config(model), indent=2, sort_keys=True) + "\n")
        (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(tokenizer), indent=2) + "\n")
        (staging / "special_tokens_map.json").write_text(json.dumps(
            {k: v for k, v in tokenizer_config(tokenizer).items() if k.endswith("_token")}, indent=2) + "\n")
        if tokenizer.path is not None:
            shutil.copyfile(tokenizer.path, staging / "tokenizer.json")
        else:
            tokenizer._tk.save(str(staging / "tokenizer.json"))
        (staging / "generation_config.json").write_text(json.dumps(
            {"eos_token_id": model.cfg.eos_id, "pad_token_id": model.cfg.pad_id}, indent=2) + "\n")
        if path.is_dir():
            path.rmdir()  # empty, checked above
        os.replace(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path
