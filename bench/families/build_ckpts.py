"""Tiny random float64 checkpoints laid out as each family ships them (config.json with auto_map, the family's
modeling files, safetensors), for the real-code comparison. Run with transformers 4.57.1."""
import json
import os
import shutil
import sys
from pathlib import Path
import torch
import transformers

ROOT = Path(os.environ.get("SPOT_FAMILY_ROOT", ".cache/families"))  # src/<family>/ in, ckpt/<family>/ out
VOCAB, MASK, EOS = 64, 63, 2
HEAD_SCALE = 4.0
COMMON = dict(vocab_size=VOCAB, eos_token_id=EOS, torch_dtype="float64")
CONFIGS = {
    "llada": dict(files=["configuration_llada.py", "modeling_llada.py"], cfg=dict(
        architectures=["LLaDAModelLM"], model_type="llada",
        auto_map={"AutoConfig": "configuration_llada.LLaDAConfig",
                  "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM", "AutoModel": "modeling_llada.LLaDAModelLM"},
        activation_type="silu", alibi=False, attention_dropout=0.0, attention_layer_norm=False, block_group_size=1,
        block_type="llama", d_model=32, embedding_dropout=0.0, embedding_size=VOCAB, flash_attention=False,
        include_bias=False, include_qkv_bias=False, init_device="cpu", init_fn="normal", init_std=0.02,
        input_emb_norm=False, layer_norm_type="rms", layer_norm_with_affine=True, mask_token_id=MASK,
        max_sequence_length=256, mlp_hidden_size=64, mlp_ratio=4, multi_query_attention=None, n_heads=4,
        n_kv_heads=4, n_layers=2, pad_token_id=1, precision="fp32", residual_dropout=0.0, rms_norm_eps=1e-5,
        rope=True, rope_full_precision=True, rope_theta=500000.0, scale_logits=False, use_cache=False,
        weight_tying=False)),
    "dream": dict(files=["configuration_dream.py", "modeling_dream.py", "generation_utils.py"], cfg=dict(
        architectures=["DreamModel"], model_type="Dream",
        auto_map={"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
        mask_token_id=MASK, pad_token_id=1, bos_token_id=1, attention_dropout=0.0, hidden_act="silu",
        use_cache=False, rope_scaling=None, sliding_window=None, use_sliding_window=False)),
    "sdar": dict(files=["configuration_sdar.py", "modeling_sdar.py"], cfg=dict(
        architectures=["SDARForCausalLM"], model_type="sdar",
        auto_map={"AutoConfig": "configuration_sdar.SDARConfig", "AutoModel": "modeling_sdar.SDARModel",
                  "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"},
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_hidden_layers=2, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
        pad_token_id=1, bos_token_id=1, attention_bias=False, use_cache=True, fuse_cross_entropy=True)),
    "llada2": dict(files=["configuration_llada2_moe.py", "modeling_llada2_moe.py"], cfg=dict(
        architectures=["LLaDA2MoeModelLM"], model_type="llada2_moe",
        auto_map={"AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
                  "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
                  "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"},
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_hidden_layers=2, max_position_embeddings=256, rms_norm_eps=1e-6, num_experts=4,
        num_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=16,
        first_k_dense_replace=1, embedding_dropout=0.0, attention_dropout=0.0, output_dropout=0.0,
        pad_token_id=1, partial_rotary_factor=0.5, use_qkv_bias=False, use_bias=False)),
}


# BD3-LM (kuleshov-group/bd3lms models/hf/, its src/bd3lm/): ckpt/bd3lm4 and ckpt/bd3lm8, one per block size
BD3LM = dict(architectures=["BD3LM"], model_type="bd3lm",
             auto_map={"AutoConfig": "configuration_bd3lm.BD3LMConfig", "AutoModelForMaskedLM": "modeling_bd3lm.BD3LM"},
             vocab_size=VOCAB, model_length=64, cross_attn=True, adaln=True, attn_backend="sdpa", causal=False,
             hidden_dim=32, cond_dim=16, n_blocks=2, n_heads=4, dropout=0.0, time_conditioning=False, var_min=True,
             torch_dtype="float64")


def build_bd3lm(block_size, seed=0):
    out = ROOT / "ckpt" / f"bd3lm{block_size}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in ("configuration_bd3lm.py", "modeling_bd3lm.py"):
        shutil.copy(ROOT / "src" / "bd3lm" / f, out / f)
    (out / "config.json").write_text(json.dumps({**BD3LM, "block_size": block_size}, indent=1))
    cfg = transformers.AutoConfig.from_pretrained(out, trust_remote_code=True)
    torch.manual_seed(seed)
    model = transformers.AutoModelForMaskedLM.from_config(cfg, trust_remote_code=True, torch_dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():  # random, adaLN and the output layer included (the family zero-inits them)
            p.normal_(0, 0.2) if p.dim() > 1 else p.add_(torch.randn_like(p) * 0.05)
        model.backbone.output_layer.linear.weight.mul_(20.0)  # peaked predictions
    model.save_pretrained(out, safe_serialization=True)
    print(out.name, sorted(p.name for p in out.iterdir()))


def build(family, seed=0, scale=30.0):
    if family.startswith("bd3lm"):
        return build_bd3lm(int(family[5:]), seed)
    spec = CONFIGS[family]
    out = ROOT / "ckpt" / family
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in spec["files"]:
        shutil.copy(ROOT / "src" / family / f, out / f)
    (out / "config.json").write_text(json.dumps({**COMMON, **spec["cfg"]}, indent=1))
    cfg = transformers.AutoConfig.from_pretrained(out, trust_remote_code=True)
    causal = "AutoModelForCausalLM" in spec["cfg"]["auto_map"]
    auto = transformers.AutoModelForCausalLM if causal else transformers.AutoModel
    torch.manual_seed(seed)
    model = auto.from_config(cfg, trust_remote_code=True, torch_dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():  # random init, whatever the family's own init does
            p.normal_(0, 0.2) if p.dim() > 1 else None
        head = model.get_output_embeddings()
        head.weight.mul_(HEAD_SCALE)  # peaked predictions, without float64 ties at probability 1.0
    model.save_pretrained(out, safe_serialization=True)
    print(family, sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    for fam in sys.argv[1:] or (*CONFIGS, "bd3lm4", "bd3lm8"):
        build(fam)
