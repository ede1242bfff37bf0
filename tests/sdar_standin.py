"""A stand-in for SDAR's configuration_sdar.py and modeling_sdar.py, written for these tests (none of SDAR's code is
copied): what SDAR's config holds and what its forward does with its inputs, re-derived from its documented behaviour,
under its weight names. tests/integrations/test_export.py places this one file under both names beside an exported
checkpoint (config.json's auto_map names both); docs/integrations.md records such a checkpoint on SDAR's own files.

- The Qwen3 backbone: RMSNorm computed in float32 and cast back, q/k RMSNorm per head before the rotation, rotary
  positions from float32 angles (inv_freq in float32, times the float position ids) in the half-split layout,
  SwiGLU, grouped-query attention scaled by head_dim ** -0.5, the LM head tied to the embedding.
- `forward(input_ids, attention_mask, position_ids, past_key_values, use_cache, store_kv=False)`: the 4D mask is
  read with `.bool()`; store_kv=True appends the call's keys and values to the cache, False reads the cache before
  the call's own keys and stores nothing; position ids as given (default: after the cached length).
"""

import torch
import torch.nn.functional as F
import transformers
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast


class SDARConfig(PretrainedConfig):
    model_type = "sdar"

    def __init__(self, vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=5,
                 num_attention_heads=8, num_key_value_heads=4, head_dim=32, hidden_act="silu",
                 max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None,
                 attention_bias=False, attention_dropout=0.0, use_sliding_window=False, use_cache=True,
                 initializer_range=0.02, tie_word_embeddings=True, **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads, self.head_dim, self.hidden_act = num_key_value_heads, head_dim, hidden_act
        self.max_position_embeddings, self.rms_norm_eps = max_position_embeddings, rms_norm_eps
        self.rope_theta, self.rope_scaling, self.attention_bias = rope_theta, rope_scaling, attention_bias
        self.attention_dropout, self.use_sliding_window, self.use_cache = attention_dropout, use_sliding_window, \
            use_cache
        self.initializer_range = initializer_range
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        x32 = x.to(torch.float32)
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


def _held(cache, layer):
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers 4.56+
        if len(layers) > layer and getattr(layers[layer], "keys", None) is not None \
                and getattr(layers[layer], "is_initialized", True):
            return layers[layer].keys, layers[layer].values
        return None
    return cache[layer] if len(cache) > layer else None


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, d = c.hidden_size, c.head_dim
        self.q_proj = nn.Linear(H, c.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(H, c.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(H, c.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * d, H, bias=False)
        self.q_norm, self.k_norm = RMSNorm(d, c.rms_norm_eps), RMSNorm(d, c.rms_norm_eps)
        self.d, self.groups = d, c.num_attention_heads // c.num_key_value_heads

    def forward(self, x, cos, sin, mask, cache, layer, store):
        b, q, _ = x.shape
        qs = self.q_norm(self.q_proj(x).view(b, q, -1, self.d)).transpose(1, 2)
        ks = self.k_norm(self.k_proj(x).view(b, q, -1, self.d)).transpose(1, 2)
        vs = self.v_proj(x).view(b, q, -1, self.d).transpose(1, 2)
        qs, ks = _rotate(qs, cos, sin), _rotate(ks, cos, sin)
        if cache is not None and store:
            ks, vs = cache.update(ks, vs, layer)
        elif cache is not None and _held(cache, layer) is not None:
            held_k, held_v = _held(cache, layer)
            ks, vs = torch.cat((held_k, ks), -2), torch.cat((held_v, vs), -2)
        ks, vs = ks.repeat_interleave(self.groups, 1), vs.repeat_interleave(self.groups, 1)
        out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=self.d ** -0.5)
        return self.o_proj(out.transpose(1, 2).reshape(b, q, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn, self.mlp = Attention(c), MLP(c)


class SDARModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class SDARForCausalLM(PreTrainedModel):
    config_class = SDARConfig
    base_model_prefix = "model"
    _supports_sdpa = True
    # the LM head is the embedding: transformers 5 names the pair, 4.x lists the tied key (SDAR's own code: 4.x)
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"} \
        if int(transformers.__version__.split(".")[0]) >= 5 else ["lm_head.weight"]

    def __init__(self, config):
        super().__init__(config)
        self.model = SDARModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        pass  # every weight comes from the checkpoint

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                store_kv=False, **kwargs):
        c, (b, q) = self.config, input_ids.shape
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        if position_ids is None:
            start = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = torch.arange(start, start + q, device=input_ids.device)[None].expand(b, q)
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.int64).float() / c.head_dim))
        angles = (inv_freq[None, :, None].float().to(input_ids.device) @ position_ids[:, None, :].float()) \
            .transpose(1, 2)
        x = self.model.embed_tokens(input_ids)
        emb = torch.cat((angles, angles), -1)[:, None]
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        mask = attention_mask.bool() if attention_mask is not None else None
        for i, layer in enumerate(self.model.layers):
            x = x + layer.self_attn(layer.input_layernorm(x), cos, sin, mask, past_key_values, i, store_kv)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = self.lm_head(self.model.norm(x))
        return CausalLMOutputWithPast(logits=logits, past_key_values=past_key_values)
