"""A small block-diffusion transformer in the Qwen3 / SDAR style.

RMSNorm, rotary positions, SwiGLU, grouped-query attention with q/k norms, tied embeddings. The attention mask
is an argument, so the same module serves inference (a KV-cached causal prefix plus bidirectional blocks, masks
from `spot_kernels.tree_mask`) and training (the clean/noisy concatenation of block diffusion).

The compute dtype may differ from the weights' dtype (`forward(compute_dtype=...)`): a bfloat16 or float16 model
is run in float32 from its half-precision weights, each weight cast exactly when it is used, so every row of a
pass goes through float32 reductions whose order does not depend on the other rows (docs/half_precision.md).

`forward(kernels="triton")` runs the projections, the LM head and the norms through the batch-invariant Triton
kernels of `spot_kernels.triton.batch_invariant` and the node attention through the Triton `tree_attention`: the
GPU path whose per-row results do not depend on the number of rows (cuBLAS's and PyTorch's may). The default,
"torch", is the path above, unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
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
        if _KERNELS.get() == "triton":
            return _triton_kernels().rms_norm(x, self.weight, self.eps)
        return self.weight.to(x.dtype) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


# CPU matrix multiplies take another kernel, with another summation order, for a call of few rows (measured with
# the MKL sgemm of torch 2.14: a row's float32 result differs in the last bits between calls of 1-11 rows and
# calls of 12 or more), so a node scored alone could differ from the same node scored beside others. Padding every
# CPU call to a multiple of LINEAR_ROWS rows (zeros, dropped after) keeps every row on the many-row kernel, whose
# result for a row depends neither on the row's place in the call nor on the other rows.
LINEAR_ROWS = 16


# ------------------------------------------------------------------------------------- the Triton kernel path
# Which kernels the projections, norms and node attention of the running forward use: "torch" (the default path,
# CPU padding included) or "triton" (spot_kernels.triton.batch_invariant and the Triton tree_attention, for CUDA
# tensors, or CPU tensors under TRITON_INTERPRET=1). Set for the duration of one `BlockDiffusionLM.forward`.
KERNELS = ("torch", "triton")
_KERNELS: contextvars.ContextVar[str] = contextvars.ContextVar("spot_model_kernels", default="torch")


def _triton_kernels():
    from spot_kernels.triton import batch_invariant  # imported on first use: Triton is optional

    return batch_invariant


@contextlib.contextmanager
def use_kernels(kernels: str):
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    token = _KERNELS.set(kernels)
    try:
        yield
    finally:
        _KERNELS.reset(token)
# ----------------------------------------------------------------------------------------------------------------


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T in x's dtype (the weight is cast exactly when its dtype differs): the row-invariant
    projection every layer of `BlockDiffusionLM` uses."""
    if _KERNELS.get() == "triton":  # the weight is upcast inside the kernel
        return _triton_kernels().linear(x, weight)
    weight = weight.to(x.dtype)
    if x.device.type != "cpu":
        return F.linear(x, weight)
    rows = x.reshape(-1, x.shape[-1])
    m = rows.shape[0]
    padded = max(LINEAR_ROWS, -(-m // LINEAR_ROWS) * LINEAR_ROWS)
    if padded != m:
        rows = torch.cat((rows, rows.new_zeros(padded - m, rows.shape[1])))
    return F.linear(rows, weight)[:m].reshape(*x.shape[:-1], weight.shape[0])


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
    """Per-layer keys/values [b, kv_heads, capacity, head_dim]; `length` keys are valid.

    The buffers start at `capacity` positions and grow on demand (`reserve`), doubling up to `max_capacity`, so a
    session asked for many tokens holds memory for the tokens it has actually cached, not for the ones it might.
    """

    def __init__(self, cfg: ModelConfig, batch: int, capacity: int, dtype: torch.dtype, device,
                 max_capacity: int | None = None):
        self.max_capacity = capacity if max_capacity is None else max_capacity
        if not 0 <= capacity <= self.max_capacity:
            raise ValueError(f"cache: capacity {capacity} must lie in [0, max_capacity {self.max_capacity}]")
        self._shape = (batch, cfg.n_kv_heads, cfg.head_dim)
        self.k = [self._empty(capacity, dtype, device) for _ in range(cfg.n_layers)]
        self.v = [self._empty(capacity, dtype, device) for _ in range(cfg.n_layers)]
        self.length = 0
        self.capacity = capacity
        # Per-row progress (ModelSession): bool [b, num_new] for the next pass, True where a new slot already holds
        # that row's prefix (shifted there because the row appends fewer tokens than others); None: every new slot
        # takes the pass's keys and values.
        self.held: torch.Tensor | None = None

    def _empty(self, capacity: int, dtype, device) -> torch.Tensor:
        b, h, d = self._shape
        return torch.empty((b, h, capacity, d), dtype=dtype, device=device)

    def reserve(self, needed: int) -> None:
        """Make room for `needed` positions: at least double the capacity (amortised O(1) copying per token),
        never beyond `max_capacity`. Only the `length` valid positions are copied."""
        if needed <= self.capacity:
            return
        if needed > self.max_capacity:
            raise RuntimeError(f"cache: {needed} positions exceed the session's maximum of {self.max_capacity}")
        capacity = min(self.max_capacity, max(needed, 2 * self.capacity))
        for buffers in (self.k, self.v):
            for i, old in enumerate(buffers):  # one layer at a time: the peak is one extra layer, not a copy
                new = self._empty(capacity, old.dtype, old.device)
                new[:, :, :self.length] = old[:, :, :self.length]
                buffers[i] = new
        self.capacity = capacity

    def shift_rows(self, shift: torch.Tensor, key_start: torch.Tensor) -> None:
        """Move each row's valid keys [key_start, length) right by shift[row] slots (rows with shift 0 stay), so
        that rows appending fewer tokens than others in the next pass still end where every row ends. The space
        must be reserved first."""
        for r in torch.nonzero(shift).flatten().tolist():
            s, a = int(shift[r]), int(key_start[r])
            for buffers in (self.k, self.v):
                for t in buffers:
                    t[r, :, a + s:self.length + s] = t[r, :, a:self.length].clone()

    def drop_left(self, count: int) -> None:
        """Discard the first `count` slots of every row (left padding no row reads any more)."""
        if count <= 0:
            return
        for buffers in (self.k, self.v):
            for t in buffers:
                t[:, :, :self.length - count] = t[:, :, count:self.length].clone()
        self.length -= count

    def select_rows(self, index: torch.Tensor, extra: int = 0) -> None:
        """Keep the rows `index` (in that order) and add `extra` empty rows after them."""
        for buffers in (self.k, self.v):
            for i, t in enumerate(buffers):
                kept = t[index]
                if extra:
                    kept = torch.cat((kept, t.new_zeros((extra,) + tuple(t.shape[1:]))), 0)  # read as padding: finite
                buffers[i] = kept
        self._shape = (len(index) + extra,) + self._shape[1:]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


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
        qh = self.q_norm(linear(x, self.q_proj.weight).view(b, q, cfg.n_heads, hd)).transpose(1, 2)
        kh = self.k_norm(linear(x, self.k_proj.weight).view(b, q, cfg.n_kv_heads, hd)).transpose(1, 2)
        vh = linear(x, self.v_proj.weight).view(b, q, cfg.n_kv_heads, hd).transpose(1, 2)
        qh, kh = rotary(qh, positions, cfg.rope_theta), rotary(kh, positions, cfg.rope_theta)
        if cache is not None:
            start = cache.length
            if cache.held is not None:  # slots that hold a row's own shifted prefix keep it (per-row progress)
                held = cache.held[:, None, :, None]
                kh = torch.cat((torch.where(held, cache.k[layer][:, :, start:start + num_new].to(kh.dtype),
                                            kh[:, :, :num_new]), kh[:, :, num_new:]), dim=2)
                vh = torch.cat((torch.where(held, cache.v[layer][:, :, start:start + num_new].to(vh.dtype),
                                            vh[:, :, :num_new]), vh[:, :, num_new:]), dim=2)
            keys = torch.cat((cache.k[layer][:, :, :start].to(kh.dtype), kh), dim=2)
            values = torch.cat((cache.v[layer][:, :, :start].to(vh.dtype), vh), dim=2)
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
        return linear(out.transpose(1, 2).reshape(b, q, cfg.n_heads * hd), self.o_proj.weight)


    def _tree_attention(self, qh, keys, values, mask, tree: "TreeLayout", num_new: int):
        """Pending tokens attend causally to the prefix (dense mask); node tokens go through
        `spot_kernels.tree_attention`: the shared prefix plus their own node only. Each node's row is computed
        by the same reductions whatever the number of nodes, so a root scored beside 15 drafted nodes gets
        bit-identical logits to a root scored alone, which keeps float32 decoding exact too."""
        b, hq, q, hd = qh.shape
        n, B = tree.num_nodes, tree.block_size
        prefix = keys.shape[2] - n * B
        triton_path = _KERNELS.get() == "triton"
        # On a CPU each row reads its keys from its first real one: vectorised reductions group a row's keys by
        # their index, so a row's float32 results would otherwise change with its left padding, i.e. with the
        # other rows of the batch and, under per-row progress, with the pass schedule (docs/half_precision.md).
        own_rows = qh.device.type == "cpu" and not triton_path
        starts = tree.key_start.tolist() if own_rows else None
        parts = []
        if num_new:
            groups = hq // keys.shape[1]
            k_new, v_new = keys[:, :, :prefix].repeat_interleave(groups, dim=1), \
                values[:, :, :prefix].repeat_interleave(groups, dim=1)
            if own_rows:
                out = qh.new_zeros((b, hq, num_new, hd))  # padding queries stay 0 (nothing reads them)
                for r, ks in enumerate(starts):
                    first = max(0, ks - (prefix - num_new))  # the row's first real new token
                    if first < num_new:
                        out[r, :, first:] = F.scaled_dot_product_attention(
                            qh[r:r + 1, :, first:num_new], k_new[r:r + 1, :, ks:], v_new[r:r + 1, :, ks:],
                            attn_mask=mask[r:r + 1, :, first:num_new, ks:prefix])[0]
                parts.append(out)
            else:
                parts.append(F.scaled_dot_product_attention(qh[:, :, :num_new], k_new, v_new,
                                                            attn_mask=mask[:, :, :num_new, :prefix]))
        q_nodes = qh[:, :, num_new:].reshape(b, hq, n, B, hd)
        k_nodes, v_nodes = keys[:, :, prefix:].unflatten(2, (n, B)), values[:, :, prefix:].unflatten(2, (n, B))
        padded = n
        if qh.device.type == "cpu" and not triton_path:
            # The op multiplies the n * B query rows of a head at once: pad with all-zero nodes (they see only
            # themselves and are dropped) to a multiple of LINEAR_ROWS rows, for the reason `linear` pads.
            while (padded * B) % LINEAR_ROWS:
                padded += 1
            q_nodes, k_nodes, v_nodes = (F.pad(t, (0, 0, 0, 0, 0, padded - n)) for t in (q_nodes, k_nodes, v_nodes))
        k_prefix, v_prefix = keys[:, :, :prefix], values[:, :, :prefix]
        if triton_path and B & (B - 1):
            # The Triton kernel streams the node-local keys of a tile of query rows (which may span several nodes)
            # in BLOCK_N-key steps from the tile's first node: when B is not a power of two, a node's keys are cut
            # into other steps depending on where the node sits, and its online softmax rounds otherwise (measured
            # under the interpreter: 6e-8 in float32 for B = 3, 5, 6). One call per node is invariant by
            # construction (the node is then alone in its call); a power-of-two B is checked invariant batched.
            nodes = torch.cat([spot_kernels.tree_attention(q_nodes[:, :, j:j + 1], k_prefix, v_prefix,
                                                           k_nodes[:, :, j:j + 1], v_nodes[:, :, j:j + 1],
                                                           tree.key_start, backend="triton") for j in range(n)], dim=2)
        elif own_rows:
            zero = tree.key_start.new_zeros(1)
            nodes = torch.cat([spot_kernels.tree_attention(q_nodes[r:r + 1], k_prefix[r:r + 1, :, ks:],
                                                           v_prefix[r:r + 1, :, ks:], k_nodes[r:r + 1],
                                                           v_nodes[r:r + 1], zero) for r, ks in enumerate(starts)])
        else:
            nodes = spot_kernels.tree_attention(q_nodes, k_prefix, v_prefix, k_nodes, v_nodes, tree.key_start,
                                                backend="triton" if triton_path else "auto")
        parts.append(nodes[:, :, :n].reshape(b, hq, n * B, hd))
        return torch.cat(parts, dim=2)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return linear(F.silu(linear(x, self.gate.weight)) * linear(x, self.up.weight), self.down.weight)


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
                logits_from: int = 0, tree: TreeLayout | None = None, compute_dtype: torch.dtype | None = None,
                kernels: str = "torch", head: bool = True):
        """input_ids, positions [b, q]; mask bool [b, 1, q, cache.length + q] (True = attend).

        tree: when the last q - num_new tokens are `tree.num_nodes` copies of a block (a verification pass),
        they attend through the shared-prefix tree attention instead of the dense mask (same result). Only the
        mask block of the first `num_new` tokens over the prefix, [b, 1, num_new, cache.length + num_new], is
        then read, so the caller may pass just that block (None when num_new is 0).

        With a cache, the first `num_new` tokens are written to it after the pass (in the cache's dtype). Returns
        logits [b, q - logits_from, V] (the LM head skips the first `logits_from` tokens) in `compute_dtype`, the
        dtype of every activation and reduction (default: the weights' dtype; weights are cast exactly on use).
        head=False returns the final-norm hidden states [b, q - logits_from, d_model] instead; `lm_head` turns any
        subset of their rows into exactly the logits the full pass gives them (the projection is row-invariant).

        kernels: "torch" (default) or "triton", the batch-invariant Triton path (module docstring).
        """
        with use_kernels(kernels):
            hidden = self._forward(input_ids, positions, mask, cache, num_new, logits_from, tree, compute_dtype)
            return self.lm_head(hidden) if head else hidden

    def lm_head(self, hidden: torch.Tensor, kernels: str | None = None) -> torch.Tensor:
        """Final-norm hidden states [..., d_model] -> logits [..., V] (tied embeddings), in hidden's dtype.
        kernels: as in `forward` (default: the running forward's, else "torch")."""
        with use_kernels(kernels or _KERNELS.get()):
            return linear(hidden, self.embed.weight)

    def _forward(self, input_ids, positions, mask, cache, num_new, logits_from, tree, compute_dtype):
        x = self.embed(input_ids)
        if compute_dtype is not None:
            x = x.to(compute_dtype)
        if cache is not None:
            cache.reserve(cache.length + num_new)
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, mask, cache, i, num_new, tree)
        if cache is not None:
            cache.length += num_new
        return self.norm(x[:, logits_from:])

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
