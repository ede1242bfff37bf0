"""A small block-diffusion transformer in the Qwen3 / SDAR style.

RMSNorm, rotary positions, SwiGLU, grouped-query attention with q/k norms, tied embeddings. The attention mask
is an argument, so the same module serves inference (a KV-cached causal prefix plus bidirectional blocks, masks
from `spot_kernels.tree_mask`) and training (the clean/noisy concatenation of block diffusion).

The compute dtype may differ from the weights' dtype (`forward(compute_dtype=...)`): a bfloat16 or float16 model
is run in float32 from its half-precision weights, each weight cast exactly when it is used, so every row of a
pass goes through float32 reductions whose order does not depend on the other rows (docs/half_precision.md).

Which kernels a pass runs is an argument, `Kernels`, handed from `forward` to every norm, projection, attention
and the LM head (no state outside the call). `Kernels("triton")` runs the projections, the LM head and the norms
through the batch-invariant Triton kernels of `spot_kernels.triton.batch_invariant` and the node attention through
the Triton `tree_attention`: the GPU path whose per-row results do not depend on the number of rows (cuBLAS's and
PyTorch's may). The default, "torch", is the path above; its `backend` picks the spot_kernels backend of the tree
attention.

The KV cache (`KVCache`) owns its surgery: rows kept right-aligned at the end of its buffer (so a pass's shapes
follow the buffer's size, not the rows' lengths), moved, added and dropped by its own methods, every decision made
from host integers; a pass writes the slots `KVCache.right_align` handed it (`Append`), which the attention
receives as an argument.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, fields
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

import spot_kernels
from spot_kernels.backends import BACKENDS


PREFIX_ATTENTION = ("causal", "block")


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
    # How committed tokens attend to each other: "causal" (token by token, the first embedded target) or "block"
    # (SDAR's: each block sees itself bidirectionally and every earlier block; blocks sit at absolute positions
    # k * B). Training and the session build their masks from it; the module itself takes the mask as an argument.
    prefix_attention: str = "causal"

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
        if self.prefix_attention not in PREFIX_ATTENTION:
            raise ValueError(f"config: prefix_attention must be one of {PREFIX_ATTENTION}, got "
                             f"{self.prefix_attention!r}")


# CPU matrix multiplies take another kernel, with another summation order, for a call of few rows (measured with
# the MKL sgemm of torch 2.14: a row's float32 result differs in the last bits between calls of 1-11 rows and
# calls of 12 or more), so a node scored alone could differ from the same node scored beside others. Every CPU call
# is padded to a multiple of LINEAR_ROWS rows (zeros, dropped after) and holds at most LINEAR_BLOCK rows (a larger
# one is split), and `linear` checks on this machine, the first time it uses a weight shape and a row count, that a
# row's result does not depend on the call (`_call_rows`). MKL's AVX-512 kernels pass every check measured; its AVX2
# kernels (an AVX2-only Intel CPU, or MKL_ENABLE_INSTRUCTIONS=AVX2) sum a row otherwise in some calls (measured: the
# last 2 rows of a 32-row call for every shape tried, and from 64 rows on every row of the 768 -> 256 projection):
# those calls go in blocks of LINEAR_ROWS rows (about 3x slower on the embedded model's MLP at 512 rows under MKL's
# AVX2 kernels, measured here).
LINEAR_ROWS = 16
LINEAR_BLOCK = 256
# ATen's bmm multiplies each matrix of a batch with a plain loop when contraction x rows x columns < 400, and through
# BLAS otherwise (aten/src/ATen/native/LinearAlgebra.cpp, bmm_out_or_baddbmm_; measured with torch 2.14: the rows of
# [16, 8] @ [8, 3] differ by 5e-7 from the same rows in [17+, 8] @ [8, 3], on every ATEN_CPU_CAPABILITY). The node
# attention's prefix products have the node rows as rows and the head dimension or the prefix length as the other two
# sizes, so a node alone (few rows) and a node beside others (many) could take different kernels: CPU node calls are
# padded to at least SMALL_BMM / head_dim rows, which keeps every prefix length >= 1 on BLAS.
SMALL_BMM = 400


KERNELS = ("torch", "triton")


@dataclass(frozen=True)
class Kernels:
    """Which kernels one pass runs: an explicit argument from `BlockDiffusionLM.forward` down to every norm,
    projection, attention and the LM head.

    path: "torch" (PyTorch ops, CPU calls padded to LINEAR_ROWS rows) or "triton" (spot_kernels.triton.
    batch_invariant and the Triton tree_attention, for CUDA tensors, or CPU tensors under TRITON_INTERPRET=1).
    backend: the spot_kernels backend of the pass's tree ops (tree_mask, tree_position_ids and, on the torch path,
    tree_attention; the Triton path's attention is always "triton"). "auto" (default) or one of
    spot_kernels.backends.BACKENDS; "cpu", which has no tree-op kernels, covers them with the reference, as
    SPOT_BACKEND=cpu does, so that a whole decode can run under it.
    capturable: every row's node tokens attend over the whole cache buffer, masked before the row's key_start,
    so no host integer of the cache shapes the pass (what a GPU always does, and what a CUDA graph captures). On
    a CPU the torch path otherwise slices each row's keys from its first real one, for float32 batch
    invariance (docs/half_precision.md); True there runs the GPU's shapes, to trace them (docs/round.md).
    """

    path: str = "torch"
    backend: str = "auto"
    capturable: bool = False

    def __post_init__(self):
        if self.path not in KERNELS:
            raise ValueError(f"kernels must be one of {KERNELS}, got {self.path!r}")
        if self.backend not in ("auto",) + BACKENDS:
            raise ValueError(f"backend must be one of {('auto',) + BACKENDS}, got {self.backend!r}")

    @property
    def triton(self) -> bool:
        return self.path == "triton"

    @property
    def tree_backend(self) -> str:
        """The backend of tree_mask / tree_position_ids."""
        return "reference" if self.backend == "cpu" else self.backend

    def slices_rows(self, device: torch.device) -> bool:
        """Whether the pass slices each row's keys from its first real one, reading the rows' starts on the host
        (the torch path on a CPU, unless capturable): such a pass's graph follows the starts, not only the
        shapes."""
        return device.type == "cpu" and not self.triton and not self.capturable

    @property
    def attention_backend(self) -> str:
        """The backend of the node attention (`spot_kernels.tree_attention`)."""
        return "triton" if self.triton else self.tree_backend


TORCH = Kernels()


def _triton_kernels():
    from spot_kernels.triton import batch_invariant  # imported on first use: Triton is optional

    return batch_invariant


def linear(x: torch.Tensor, weight: torch.Tensor, kernels: Kernels = TORCH) -> torch.Tensor:
    """x @ weight.T in x's dtype (the weight is cast exactly when its dtype differs): the row-invariant
    projection every layer of `BlockDiffusionLM` uses, through `kernels`."""
    if kernels.triton:  # the weight is upcast inside the kernel
        return _triton_kernels().linear(x, weight)
    weight = weight.to(x.dtype)
    if x.device.type != "cpu":
        return F.linear(x, weight)
    rows = x.reshape(-1, x.shape[-1])
    m = rows.shape[0]
    padded = max(LINEAR_ROWS, -(-m // LINEAR_ROWS) * LINEAR_ROWS)
    if padded != m:
        rows = torch.cat((rows, rows.new_zeros(padded - m, rows.shape[1])))
    k, n = weight.shape[1], weight.shape[0]
    if torch.compiler.is_compiling():  # a traced pass: its row count may be symbolic, one call as before the checks
        return F.linear(rows, weight)[:m].reshape(*x.shape[:-1], n)
    parts = []
    for part in (rows,) if padded <= LINEAR_BLOCK else rows.split(LINEAR_BLOCK):
        step = _call_rows(k, n, x.dtype, torch.get_num_threads(), part.shape[0])
        parts += [F.linear(part, weight)] if step == part.shape[0] else [F.linear(p, weight) for p in part.split(step)]
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    return out[:m].reshape(*x.shape[:-1], n)


@functools.lru_cache(maxsize=None)
def _call_rows(k: int, n: int, dtype: torch.dtype, threads: int, count: int) -> int:
    """How many rows each library call takes when `linear` multiplies `count` rows (a multiple of LINEAR_ROWS, at
    most LINEAR_BLOCK) by a weight [n, k], checked on this machine once per shape, dtype, intra-op thread count (it
    may change the library's split) and count, on fixed random rows: `count` when every row of the call equals the
    same row in LINEAR_ROWS-row calls and a row of a LINEAR_ROWS-row call is the same at every place of it;
    LINEAR_ROWS when only the latter holds; 1 (the same kernel for every row by construction) when neither does."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(max(count, 2 * LINEAR_ROWS), k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)
    r = LINEAR_ROWS  # this row sits at place r - i of the call starting at row i
    at_zero = F.linear(x[r:r + LINEAR_ROWS], w)[0]
    if not all(torch.equal(F.linear(x[i:i + LINEAR_ROWS], w)[r - i], at_zero) for i in range(1, LINEAR_ROWS)):
        return 1
    blocks = torch.cat([F.linear(p, w) for p in x[:count].split(LINEAR_ROWS)])
    return count if torch.equal(F.linear(x[:count], w), blocks) else LINEAR_ROWS


@functools.lru_cache(maxsize=None)
def prefix_rows_depend_on_count(head_dim: int, block_size: int, dtype: torch.dtype, threads: int,
                                backend: str) -> bool:
    """Whether the CPU node attention's prefix products (`spot_kernels.tree_attention`'s reference: the query rows
    of all nodes against the prefix keys, batched over heads) give a node's rows another result when other nodes'
    rows share the call, on this machine: checked once per head size, block size, dtype, intra-op thread count and
    op backend, on fixed random data through the op itself, one node alone against the same node among 4 and 16
    (16 nodes of B = 32 take MKL's AVX2 sgemm past its row blocking; its AVX-512 and baseline kernels pass)."""
    g = torch.Generator().manual_seed(0)
    heads, nodes, prefix = 2, 16, 64
    dtype = torch.float64 if dtype == torch.float64 else torch.float32  # what the op computes in (any other dtype:
    # rounded data, whose short products can sum exactly in any order and hide the blocking)
    q = torch.randn(1, heads, nodes, block_size, head_dim, generator=g).to(dtype)
    k_prefix, v_prefix = (torch.randn(1, heads, prefix, head_dim, generator=g).to(dtype) for _ in range(2))
    k_nodes, v_nodes = (torch.randn(1, heads, nodes, block_size, head_dim, generator=g).to(dtype) for _ in range(2))
    start = torch.zeros(1, dtype=torch.long)

    def attend(count):
        return spot_kernels.tree_attention(q[:, :, :count], k_prefix, v_prefix, k_nodes[:, :, :count],
                                           v_nodes[:, :, :count], start, backend=backend)[:, :, 0]
    alone = attend(1)
    return not all(torch.equal(attend(count), alone) for count in (4, nodes))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, kernels: Kernels = TORCH) -> torch.Tensor:
        if kernels.triton:
            return _triton_kernels().rms_norm(x, self.weight, self.eps)
        return self.weight.to(x.dtype) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Rotary(NamedTuple):
    """The rotation of every query position, cos and sin [b, 1, q, head_dim // 2] in the compute dtype
    (`rotary_tables`): computed once per pass, shared by every layer's queries and keys."""

    cos: torch.Tensor
    sin: torch.Tensor


def rotary_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> Rotary:
    """The rotations of positions [b, q] (angles in float64, then cast: half-split layout, as in Llama/Qwen)."""
    half = head_dim // 2
    inv_freq = theta ** (-torch.arange(half, device=positions.device, dtype=torch.float64) / half)
    angles = positions.to(torch.float64)[:, None, :, None] * inv_freq  # [b, 1, q, half]
    return Rotary(angles.cos().to(dtype), angles.sin().to(dtype))


def rotary(x: torch.Tensor, rope: Rotary) -> torch.Tensor:
    """Rotate x [b, h, q, d] by the rotations of its positions."""
    half = x.shape[-1] // 2
    cos, sin = rope
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class TreeLayout(NamedTuple):
    """How the node tokens of a verification pass are laid out (see `BlockDiffusionLM.forward`)."""

    key_start: torch.Tensor  # [b] int64: first valid (non-padding) key of each row
    num_nodes: int
    block_size: int
    # key_start on the host (KVCache.starts): the CPU path slices each row's keys from its first real one; None
    # reads key_start (a device read per layer)
    starts: tuple[int, ...] | None = None


class Append(NamedTuple):
    """The cache slots one pass writes (`KVCache.right_align`): its first `count` tokens go to slots
    [start, start + count) of every row, except where held[row, j] is True: slot start + j already holds that
    row's own key, moved there by the alignment, and keeps it."""

    start: int
    count: int
    held: torch.Tensor | None = None  # bool [b, count]; None: no slot is held


def _static(buffer: torch.Tensor) -> torch.Tensor:
    """A CUDA cache buffer marked as staying at its address: a CUDA graph of the pass (torch.compile's
    mode="reduce-overhead") then reads it in place instead of copying it into a buffer of its own every replay; a
    new buffer (the cache grew, rows changed) is re-recorded."""
    if buffer.is_cuda:
        torch._dynamo.mark_static_address(buffer)
    return buffer


class KVCache:
    """Per-layer keys/values [b, kv_heads, capacity, head_dim] of rows right-aligned at the end of the buffer: every
    row's keys end at slot `capacity`, row r's first real key is key_start[r] (left padding before it; the slots
    before the longest row are free).

    A pass therefore attends to the whole buffer and then its own tokens, `capacity + q` keys, whatever its rows
    have cached: every pass that appends nothing has one shape for as long as the buffer keeps its size, which is
    what a CUDA graph captures (docs/round.md, "Capture"). A pass that appends moves every row left by what it
    appends, the room made at the front, so the buffer grows only when the longest row needs it: doubling, up to
    `max_capacity`, so a session asked for many tokens holds memory for the tokens it has actually cached, not
    for the ones it might. Rows that leave free their slots for the others.

    The cache owns its surgery: `right_align` makes room for a pass that appends a different number of tokens to
    each row, `update` is one layer's read and write of a pass, `add_rows` / `keep_rows` change the rows. Every
    decision is made from host integers (`starts`, the counts handed in), never from a device read.
    """

    def __init__(self, cfg: ModelConfig, batch: int, capacity: int, dtype: torch.dtype, device,
                 max_capacity: int | None = None):
        self.max_capacity = capacity if max_capacity is None else max_capacity
        if not 0 <= capacity <= self.max_capacity:
            raise ValueError(f"cache: capacity {capacity} must lie in [0, max_capacity {self.max_capacity}]")
        self._shape = (batch, cfg.n_kv_heads, cfg.head_dim)
        # zeros, not empty: a pass reads every slot (the ones before key_start masked), and masked garbage could
        # be a NaN that a kernel multiplies by its zero weight
        self.k = [self._zeros(capacity, dtype, device) for _ in range(cfg.n_layers)]
        self.v = [self._zeros(capacity, dtype, device) for _ in range(cfg.n_layers)]
        self.capacity = capacity
        self.starts: list[int] = [capacity] * batch  # key_start on the host: what every decision reads
        self.key_start = torch.full((batch,), capacity, dtype=torch.long, device=device)  # what the pass's ops read

    @property
    def batch(self) -> int:
        return len(self.starts)

    @property
    def device(self) -> torch.device:
        return self.key_start.device

    @property
    def length(self) -> int:
        """The slots the longest row holds (its keys): the rest of the buffer, at its front, is free."""
        return self.capacity - min(self.starts, default=self.capacity)

    @property
    def row_lengths(self) -> torch.Tensor:
        """int64 [b]: the keys each row holds (on the device)."""
        return self.capacity - self.key_start

    def _zeros(self, capacity: int, dtype, device) -> torch.Tensor:
        b, h, d = self._shape
        return _static(torch.zeros((b, h, capacity, d), dtype=dtype, device=device))

    def _set_starts(self, starts: list[int]) -> None:
        self.starts = list(starts)
        self.key_start = torch.tensor(self.starts, dtype=torch.long, device=self.device)

    def hold(self, count: int) -> None:
        """Take the last `count` slots of every row as its cached keys, whatever they hold (a synthetic prefix for
        measurements, spot.lab.project)."""
        if not 0 <= count <= self.capacity:
            raise ValueError(f"cache: cannot hold {count} keys in a capacity of {self.capacity}")
        self._set_starts([self.capacity - count] * self.batch)

    def reserve(self, needed: int) -> None:
        """Make room for the longest row to hold `needed` keys: at least double the capacity (amortised O(1)
        copying per token), never beyond `max_capacity`. Only the `length` held slots are copied, to the end of
        the new buffer."""
        if needed <= self.capacity:
            return
        if needed > self.max_capacity:
            raise RuntimeError(f"cache: {needed} positions exceed the session's maximum of {self.max_capacity}")
        capacity = min(self.max_capacity, max(needed, 2 * self.capacity))
        used, grow = self.length, capacity - self.capacity
        for buffers in (self.k, self.v):
            for i, old in enumerate(buffers):  # one layer at a time: the peak is one extra layer, not a copy
                new = self._zeros(capacity, old.dtype, old.device)
                new[:, :, capacity - used:] = old[:, :, self.capacity - used:]
                buffers[i] = new
        self.capacity = capacity
        self._set_starts([s + grow for s in self.starts])

    def right_align(self, counts: list[int]) -> Append:
        """Make room for a pass that appends counts[r] tokens to row r, each row's at the end: every row moves
        left by the most any row appends (into the free front slots, the buffer growing if there are too few),
        then a row that appends fewer moves back right by the difference, into new slots the pass must then keep
        (`Append.held`). Returns the slots the pass writes, for `update`."""
        if len(counts) != self.batch:
            raise ValueError(f"cache: counts for {len(counts)} rows, the cache has {self.batch}")
        num_new = max(counts, default=0)
        if num_new == 0:
            return Append(self.capacity, 0)
        self.reserve(self.length + num_new)
        start, used = self.capacity - num_new, self.length
        if used:
            for buffers in (self.k, self.v):
                for t in buffers:
                    t[:, :, start - used:start] = t[:, :, self.capacity - used:].clone()
        starts = [s - num_new for s in self.starts]
        held_from, held_to = [], []
        for r, (s, c) in enumerate(zip(starts, counts)):
            shift = num_new - c
            moves = shift > 0 and s < start  # a row with a cached prefix (not only padding) moves it back
            if moves:
                for buffers in (self.k, self.v):
                    for t in buffers:
                        t[r, :, s + shift:start + shift] = t[r, :, s:start].clone()
            # the new slots its keys moved into, [max(start, s + shift), start + shift), keep them
            held_from.append(max(0, s + shift - start) if moves else 0)
            held_to.append(shift if moves else 0)
        self._set_starts([s + num_new - c for s, c in zip(starts, counts)])
        held = None
        if any(held_to):
            j = torch.arange(num_new, device=self.device)[None]
            lo, hi = (torch.tensor(x, dtype=torch.long, device=self.device)[:, None] for x in (held_from, held_to))
            held = (j >= lo) & (j < hi)
        return Append(start, num_new, held)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, append: Append) -> tuple[torch.Tensor,
                                                                                           torch.Tensor]:
        """One layer of a pass: k, v [b, kv_heads, q, head_dim] of its q tokens, whose first `append.count` enter
        the cache at `append.start` (held slots keep what they hold). Returns the keys and values the pass
        attends to: the buffer up to its appended slots, then the q tokens' own (a held slot's read from the
        cache): capacity + q - count keys."""
        start, n = append.start, append.count
        cached_k, cached_v = self.k[layer], self.v[layer]
        if append.held is not None:
            held = append.held[:, None, :, None]
            k = torch.cat((torch.where(held, cached_k[:, :, start:start + n].to(k.dtype), k[:, :, :n]),
                           k[:, :, n:]), dim=2)
            v = torch.cat((torch.where(held, cached_v[:, :, start:start + n].to(v.dtype), v[:, :, :n]),
                           v[:, :, n:]), dim=2)
        keys = torch.cat((cached_k[:, :, :start].to(k.dtype), k), dim=2)
        values = torch.cat((cached_v[:, :, :start].to(v.dtype), v), dim=2)
        # Only the appended tokens enter the cache; node tokens are scored and dropped.
        if n:
            cached_k[:, :, start:start + n] = k[:, :, :n]
            cached_v[:, :, start:start + n] = v[:, :, :n]
        return keys, values

    def keep_rows(self, index: list[int]) -> None:
        """Keep the rows `index` (in that order); the others leave the cache (their slots are free again)."""
        at = torch.tensor(index, dtype=torch.long, device=self.device)
        for buffers in (self.k, self.v):
            for i, t in enumerate(buffers):
                buffers[i] = _static(t[at])
        self._shape = (len(index),) + self._shape[1:]
        self._set_starts([self.starts[i] for i in index])

    def add_rows(self, count: int, max_capacity: int) -> None:
        """Add `count` rows after the current ones, with no keys (their slots read as zeros: finite padding). The
        buffers may now grow up to `max_capacity` positions (at least the current capacity)."""
        if max_capacity < self.capacity:
            raise ValueError(f"cache: max_capacity {max_capacity} is below the capacity {self.capacity}")
        self.max_capacity = max_capacity
        for buffers in (self.k, self.v):
            for i, t in enumerate(buffers):
                buffers[i] = _static(torch.cat((t, t.new_zeros((count,) + tuple(t.shape[1:]))), 0))
        self._shape = (self._shape[0] + count,) + self._shape[1:]
        self._set_starts(self.starts + [self.capacity] * count)

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

    def forward(self, x, rope: Rotary, mask, cache: KVCache | None, layer: int, append: Append | None,
                tree: TreeLayout | None = None, kernels: Kernels = TORCH):
        """rope: the rotations of x's positions (`BlockDiffusionLM.rotary_tables`); append: the cache slots this
        pass writes (`KVCache.right_align`), None: it writes none."""
        cfg, (b, q, _) = self.cfg, x.shape
        hd = cfg.head_dim
        qh = self.q_norm(linear(x, self.q_proj.weight, kernels).view(b, q, cfg.n_heads, hd), kernels).transpose(1, 2)
        kh = self.k_norm(linear(x, self.k_proj.weight, kernels).view(b, q, cfg.n_kv_heads, hd), kernels) \
            .transpose(1, 2)
        vh = linear(x, self.v_proj.weight, kernels).view(b, q, cfg.n_kv_heads, hd).transpose(1, 2)
        qh, kh = rotary(qh, rope), rotary(kh, rope)
        if cache is not None:
            append = Append(cache.capacity, 0) if append is None else append
            keys, values = cache.update(layer, kh, vh, append)
        else:
            keys, values = kh, vh
        num_new = append.count if append is not None else 0
        if tree is not None:
            out = self._tree_attention(qh, keys, values, mask, tree, num_new, kernels)
        else:
            groups = cfg.n_heads // cfg.n_kv_heads
            out = F.scaled_dot_product_attention(qh, keys.repeat_interleave(groups, dim=1),
                                                 values.repeat_interleave(groups, dim=1), attn_mask=mask)
        return linear(out.transpose(1, 2).reshape(b, q, cfg.n_heads * hd), self.o_proj.weight, kernels)

    def _tree_attention(self, qh, keys, values, mask, tree: TreeLayout, num_new: int, kernels: Kernels):
        """Pending tokens attend causally to the prefix (dense mask); node tokens go through
        `spot_kernels.tree_attention`: the shared prefix plus their own node only. Each node's row is computed
        by the same reductions whatever the number of nodes, so a root scored beside 15 drafted nodes gets
        bit-identical logits to a root scored alone, which keeps float32 decoding exact too."""
        b, hq, q, hd = qh.shape
        n, B = tree.num_nodes, tree.block_size
        prefix = keys.shape[2] - n * B
        triton_path = kernels.triton
        # On a CPU each row reads its keys from its first real one: vectorised reductions group a row's keys by
        # their index, so a row's float32 results would otherwise change with its left padding, i.e. with the
        # other rows of the batch and, under per-row progress, with the pass schedule (docs/half_precision.md).
        own_rows = kernels.slices_rows(qh.device)
        starts = (tree.starts if tree.starts is not None else tree.key_start.tolist()) if own_rows else None
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
            # themselves and are dropped) to a multiple of LINEAR_ROWS rows, for the reason `linear` pads, and to
            # enough rows that the prefix products never take ATen's small-matrix loop (SMALL_BMM).
            while (padded * B) % LINEAR_ROWS or padded * B * hd < SMALL_BMM:
                padded += 1
            q_nodes, k_nodes, v_nodes = (F.pad(t, (0, 0, 0, 0, 0, padded - n)) for t in (q_nodes, k_nodes, v_nodes))
        k_prefix, v_prefix = keys[:, :, :prefix], values[:, :, :prefix]
        # One call per node where a node's rows would otherwise change with the other nodes of the call (the node is
        # then alone in its call, invariant by construction):
        # - on a CPU whose BLAS sums a row of the prefix products otherwise with the call's row count (MKL's AVX2
        #   sgemm; prefix_rows_depend_on_count);
        # - on the Triton path when B is not a power of two: the kernel streams the node-local keys of a tile of
        #   query rows (which may span several nodes) in BLOCK_N-key steps from the tile's first node, so a node's
        #   keys are cut into other steps depending on where the node sits, and its online softmax rounds otherwise
        #   (measured under the interpreter: 6e-8 in float32 for B = 3, 5, 6); a power-of-two B is checked
        #   invariant batched.
        one_by_one = (triton_path and B & (B - 1)) or (
            qh.device.type == "cpu" and not triton_path and padded > 1 and not torch.compiler.is_compiling()
            and prefix_rows_depend_on_count(hd, B, qh.dtype, torch.get_num_threads(), kernels.attention_backend))

        def attend(q_, kp, vp, kn, vn, key_start):  # one batched call, or one per real node (not the padding ones)
            if not one_by_one:
                return spot_kernels.tree_attention(q_, kp, vp, kn, vn, key_start, backend=kernels.attention_backend)
            return torch.cat([spot_kernels.tree_attention(q_[:, :, j:j + 1], kp, vp, kn[:, :, j:j + 1],
                                                          vn[:, :, j:j + 1], key_start,
                                                          backend=kernels.attention_backend) for j in range(n)], dim=2)

        if own_rows:
            zero = tree.key_start.new_zeros(1)
            nodes = torch.cat([attend(q_nodes[r:r + 1], k_prefix[r:r + 1, :, ks:], v_prefix[r:r + 1, :, ks:],
                                      k_nodes[r:r + 1], v_nodes[r:r + 1], zero) for r, ks in enumerate(starts)])
        else:
            nodes = attend(q_nodes, k_prefix, v_prefix, k_nodes, v_nodes, tree.key_start)
        parts.append(nodes[:, :, :n].reshape(b, hq, n * B, hd))
        return torch.cat(parts, dim=2)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x, kernels: Kernels = TORCH):
        return linear(F.silu(linear(x, self.gate.weight, kernels)) * linear(x, self.up.weight, kernels),
                      self.down.weight, kernels)


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, rope: Rotary, mask, cache, layer, append, tree=None, kernels: Kernels = TORCH):
        x = x + self.attn(self.attn_norm(x, kernels), rope, mask, cache, layer, append, tree, kernels)
        return x + self.mlp(self.mlp_norm(x, kernels), kernels)


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

    def forward(self, input_ids, positions, mask, cache: KVCache | None = None, append: Append | None = None,
                logits_from: int = 0, tree: TreeLayout | None = None, compute_dtype: torch.dtype | None = None,
                kernels: Kernels = TORCH, head: bool = True):
        """input_ids, positions [b, q]; mask bool [b, 1, q, keys] (True = attend), keys = q without a cache, else
        cache.capacity + q - append.count (the whole buffer up to the appended slots, then the pass's tokens).

        append: with a cache, the slots this pass writes (`KVCache.right_align`, which made room for them): its
        first `append.count` tokens enter the cache (in the cache's dtype); None: none.
        tree: when the last q - append.count tokens are `tree.num_nodes` copies of a block (a verification pass),
        they attend through the shared-prefix tree attention instead of the dense mask (same result). Only the
        mask block of the appended tokens over the prefix, [b, 1, count, cache.capacity], is then read, so
        the caller may pass just that block (None when nothing is appended).

        Returns logits [b, q - logits_from, V] (the LM head skips the first `logits_from` tokens) in
        `compute_dtype`, the dtype of every activation and reduction (default: the weights' dtype; weights are
        cast exactly on use). head=False returns the final-norm hidden states [b, q - logits_from, d_model]
        instead; `lm_head` turns any subset of their rows into exactly the logits the full pass gives them (the
        projection is row-invariant).

        kernels: the kernels every norm, projection and attention of the pass runs (`Kernels`; default torch).
        """
        x = self.embed(input_ids)
        if compute_dtype is not None:
            x = x.to(compute_dtype)
        rope = self.rotary_tables(positions, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, mask, cache, i, append, tree, kernels)
        hidden = self.norm(x[:, logits_from:], kernels)
        return self.lm_head(hidden, kernels) if head else hidden

    def rotary_tables(self, positions: torch.Tensor, dtype: torch.dtype) -> Rotary:
        """The rotations of positions [b, q] in `dtype`, for every layer of a pass."""
        return rotary_tables(positions, self.cfg.head_dim, self.cfg.rope_theta, dtype)

    def lm_head(self, hidden: torch.Tensor, kernels: Kernels = TORCH) -> torch.Tensor:
        """Final-norm hidden states [..., d_model] -> logits [..., V] (tied embeddings), in hidden's dtype, through
        `kernels` (those of the forward that gave `hidden`, for its exact logits)."""
        return linear(hidden, self.embed.weight, kernels)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
