"""A small block-diffusion transformer in the Qwen3 / SDAR style.

RMSNorm, rotary positions, SwiGLU, grouped-query attention with q/k norms, tied embeddings. The attention mask
is an argument, so the same module serves inference (a KV-cached causal prefix plus bidirectional blocks, masks
from `spot_kernels.tree_mask`) and training (the clean/noisy concatenation of block diffusion).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

import spot_kernels


@dataclass
class ModelConfig:
    vocab_size: int = 4096
    d_model: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 4
    d_ff: int = 768
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    pad_id: int = 0
    eos_id: int = 1
    mask_id: int = 2

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"config: unknown fields {sorted(unknown)}")
        return cls(**d)

    def validate(self) -> None:
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("config: d_model must divide by n_heads and n_heads by n_kv_heads")
        for name in ("pad_id", "eos_id", "mask_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(f"config: {name} must lie in [0, vocab_size)")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate x [b, h, q, d] by its positions [b, q] (half-split layout, as in Llama/Qwen)."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(half, device=x.device, dtype=torch.float64) / half)
    angles = positions.to(torch.float64)[:, None, :, None] * inv_freq  # [b, 1, q, half]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class TreeLayout(NamedTuple):
    """How the node tokens of a verification pass are laid out (see `BlockDiffusionLM.forward`)."""

    key_start: torch.Tensor  # [b] int64: first valid (non-padding) key of each row
    num_nodes: int
    block_size: int


class KVCache:
    """Preallocated per-layer keys/values [b, kv_heads, capacity, head_dim]; `length` keys are valid."""

    def __init__(self, cfg: ModelConfig, batch: int, capacity: int, dtype: torch.dtype, device):
        shape = (batch, cfg.n_kv_heads, capacity, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.n_layers)]
        self.length = 0
        self.capacity = capacity


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(hd, cfg.norm_eps)
        self.k_norm = RMSNorm(hd, cfg.norm_eps)

    def forward(self, x, positions, mask, cache: KVCache | None, layer: int, num_new: int, tree=None):
        cfg, (b, q, _) = self.cfg, x.shape
        hd = cfg.head_dim
        qh = self.q_norm(self.q_proj(x).view(b, q, cfg.n_heads, hd)).transpose(1, 2)
        kh = self.k_norm(self.k_proj(x).view(b, q, cfg.n_kv_heads, hd)).transpose(1, 2)
        vh = self.v_proj(x).view(b, q, cfg.n_kv_heads, hd).transpose(1, 2)
        qh, kh = rotary(qh, positions, cfg.rope_theta), rotary(kh, positions, cfg.rope_theta)
        if cache is not None:
            start = cache.length
            keys = torch.cat((cache.k[layer][:, :, :start], kh), dim=2)
            values = torch.cat((cache.v[layer][:, :, :start], vh), dim=2)
            # Only the first `num_new` query tokens (the causal prefix being appended) enter the cache;
            # node tokens are scored and dropped.
            cache.k[layer][:, :, start:start + num_new] = kh[:, :, :num_new]
            cache.v[layer][:, :, start:start + num_new] = vh[:, :, :num_new]
        else:
            keys, values = kh, vh
        if tree is not None:
            out = self._tree_attention(qh, keys, values, mask, tree, num_new)
        else:
            groups = cfg.n_heads // cfg.n_kv_heads
            out = F.scaled_dot_product_attention(qh, keys.repeat_interleave(groups, dim=1),
                                                 values.repeat_interleave(groups, dim=1), attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, q, cfg.n_heads * hd))


    def _tree_attention(self, qh, keys, values, mask, tree: "TreeLayout", num_new: int):
        """Pending tokens attend causally to the prefix (dense mask); node tokens go through
        `spot_kernels.tree_attention`: the shared prefix plus their own node only. Each node's row is computed
        by the same reductions whatever the number of nodes, so a root scored beside 15 drafted nodes gets
        bit-identical logits to a root scored alone, which keeps float32 decoding exact too."""
        b, hq, q, hd = qh.shape
        n, B = tree.num_nodes, tree.block_size
        prefix = keys.shape[2] - n * B
        parts = []
        if num_new:
            groups = hq // keys.shape[1]
            parts.append(F.scaled_dot_product_attention(
                qh[:, :, :num_new], keys[:, :, :prefix].repeat_interleave(groups, dim=1),
                values[:, :, :prefix].repeat_interleave(groups, dim=1), attn_mask=mask[:, :, :num_new, :prefix]))
        nodes = spot_kernels.tree_attention(
            qh[:, :, num_new:].reshape(b, hq, n, B, hd), keys[:, :, :prefix], values[:, :, :prefix],
            keys[:, :, prefix:].unflatten(2, (n, B)), values[:, :, prefix:].unflatten(2, (n, B)), tree.key_start)
        parts.append(nodes.reshape(b, hq, n * B, hd))
        return torch.cat(parts, dim=2)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, positions, mask, cache, layer, num_new, tree=None):
        x = x + self.attn(self.attn_norm(x), positions, mask, cache, layer, num_new, tree)
        return x + self.mlp(self.mlp_norm(x))


class BlockDiffusionLM(nn.Module):
    """Token ids -> logits. Logits at position j predict the token at j (no shift)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, input_ids, positions, mask, cache: KVCache | None = None, num_new: int = 0,
                logits_from: int = 0, tree: TreeLayout | None = None):
        """input_ids, positions [b, q]; mask bool [b, 1, q, cache.length + q] (True = attend).

        tree: when the last q - num_new tokens are `tree.num_nodes` copies of a block (a verification pass),
        they attend through the shared-prefix tree attention instead of the dense mask (same result; only the
        mask rows of the first `num_new` tokens are read).

        With a cache, the first `num_new` tokens are written to it after the pass. Returns logits
        [b, q - logits_from, V] (the LM head skips the first `logits_from` tokens).
        """
        x = self.embed(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, mask, cache, i, num_new, tree)
        if cache is not None:
            cache.length += num_new
        x = self.norm(x[:, logits_from:])
        return F.linear(x, self.embed.weight)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
