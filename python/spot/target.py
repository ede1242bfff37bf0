"""The target contract (docs/design.md §2.1) and its implementation for `BlockDiffusionLM`.

A decoder sees a target only through a `Session`: one batch of sequences whose committed tokens live in a
cached prefix, and one call, `score` (or `score_lazily`, the same pass with its logits produced per node on
demand), that runs ONE target pass over N candidate states of the current block. Every such call is one pass;
finished blocks join the prefix inside the next pass (fused append), so prefill and appends cost no extra passes
for any method.
"""

from __future__ import annotations

import os
import warnings
from abc import ABC, abstractmethod
from typing import Callable

import torch

import spot_kernels

from .limits import KV_CACHE_LIMIT_GB, MEMORY_LIMIT_GB, kv_cache_limit_bytes, memory_limit_bytes  # noqa: F401
from .limits import split_prompt_heads
from .model import KERNELS, Append, BlockDiffusionLM, Kernels, KVCache, TreeLayout


class Session(ABC):
    """A batch of sequences being decoded block by block."""

    batch: int
    passes: int  # target forward passes so far

    @property
    @abstractmethod
    def block_start(self) -> torch.Tensor:
        """int64 [batch]: absolute position of the current block's first token in each sequence."""

    @abstractmethod
    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        """One target pass. nodes: int64 [batch, N, B] block states -> logits [batch, N, B, V].

        Every node attends to its sequence's whole prefix and bidirectionally to its own B tokens, never to
        another node.
        """

    def score_lazily(self, nodes: torch.Tensor) -> "NodeLogits":
        """The same pass as `score` (it counts as one pass), its logits produced only for the nodes asked for:
        `NodeLogits.full()` gives `score`'s result, `NodeLogits.of(rows, nodes)` one node per listed row. The
        default computes every node's logits; a target whose LM head is a sizeable part of a pass overrides it
        (`ModelSession` projects only the nodes asked for, bit-identical to `score`'s logits for them)."""
        return NodeLogits(self.score(nodes))

    def capturable_pass(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """This pass as a function of its node tokens alone, nodes int64 [batch, N, B] -> logits [batch, N, B, V],
        that a compiled or CUDA-graph-captured round may call inside its graph (docs/round.md, "Capture"), or None
        when the pass has host work (the default: a target whose forward stays outside the graph). Returning it
        counts the pass."""
        return None

    # True when rows may advance at their own pace: `append(block, rows)` for some rows only, `release(keep)` and
    # `admit(prompts)` between passes (ModelSession). Otherwise `generate` keeps the rows in lock-step.
    per_row: bool = False

    @abstractmethod
    def append(self, block: torch.Tensor) -> None:
        """Commit a finished block int64 [batch, B] to the prefix (its cost is folded into the next pass). A
        session with `per_row` also takes `append(blocks, rows)`: blocks [len(rows), B] for those rows only."""

    # Per row, how many of the first block's positions the prompt fills (blocks aligned to absolute positions:
    # SDAR / LLaDA2, spot.families); `generate` decodes that many more positions and drops them from the output.
    prompt_head: list[int] | None = None

    def initial_block(self, block_size: int) -> torch.Tensor | None:
        """The current block's state before its first pass, int64 [batch, B], or None: every position masked.
        A session whose blocks are aligned to absolute positions (diffusers' LLaDA2Pipeline) returns the prompt
        tokens that share the first block, which no pass may change."""
        return None


class NodeLogits:
    """The logits of one target pass, [batch, N, B, V], handed out whole or one node per row."""

    def __init__(self, logits: torch.Tensor):
        self._logits = logits

    @property
    def dtype(self) -> torch.dtype:
        return self._logits.dtype

    def full(self) -> torch.Tensor:
        """logits [batch, N, B, V] of every node."""
        return self._logits

    def of(self, rows: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """rows, nodes int64 [R] -> logits [R, B, V] of node nodes[i] of sequence rows[i]."""
        return self._logits[rows, nodes]


class Target(ABC):
    vocab_size: int
    mask_id: int
    eos_id: int | None
    device: torch.device
    # True when a node's logits are bit-identical whether it is scored alone or beside other nodes, which is
    # what makes speculative decoding token-identical to standard decoding (docs/half_precision.md). A target
    # that cannot promise it leaves this False; decoding it with logits in a dtype other than float64 then warns
    # once (`warn_if_not_batch_invariant`).
    batch_invariant: bool = False
    # True when blocks sit at absolute positions k * B (spot.families' SDAR, LLaDA2, BD3-LM): a prompt's partial last
    # block opens the first block (`Session.prompt_head`), so a decode spans one block more than max_new_tokens.
    aligned_blocks: bool = False

    @abstractmethod
    def start(self, prompts: list[list[int]], max_new_tokens: int, block_size: int, *,
              backend: str = "auto") -> Session:
        """Open a session whose prefix holds the prompts (prefilled inside the first pass).

        backend: the spot_kernels backend of the ops the session's passes run, from `generate(backend=...)`: the
        embedded target's tree masks, positions and tree attention. Targets whose passes run the model's own
        forward (the Hugging Face, diffusers and family targets) ignore it."""

    def check_room(self, longest: int, rows: int, max_new_tokens: int, block_size: int) -> None:
        """Refuse (ValueError, naming max_new_tokens and the prompt length), from the lengths alone and before
        anything is allocated, a decode of `rows` prompts of up to `longest` tokens that this target's sessions
        could not hold (KV cache, attention, positions). `start` runs the same check on its prompts; a caller that
        makes prompts up (the CLI's --prompt-len) runs it before making them. The default refuses nothing."""


HALF_DTYPES = (torch.bfloat16, torch.float16)


_warned: set = set()


def warn_if_not_batch_invariant(target: Target, logits_dtype: torch.dtype) -> None:
    """Warn once per (target class, dtype) when decoding a target that does not declare `batch_invariant` and
    computes in a precision coarser than float64 (its logits' dtype, or its `compute_dtype` where it has one and that
    is coarser: a float64 Hugging Face model computes in float32 in places, `HFTarget.compute_dtype`): its node logits
    may change in the last bits with the other nodes of the pass, so `spot` / `confidence` tokens may then differ from
    `standard` at near-ties (docs/half_precision.md)."""
    if getattr(target, "batch_invariant", False):
        return
    dtype = logits_dtype
    compute = getattr(target, "compute_dtype", None)
    if isinstance(compute, torch.dtype) and torch.finfo(compute).eps > torch.finfo(dtype).eps:
        dtype = compute
    if dtype == torch.float64:
        return
    key = (type(target), dtype)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"{type(target).__name__} does not declare batch_invariant = True and computes in {dtype}: "
                  "a node's logits may differ in the last bits between a pass over one node and a pass over many, "
                  "so speculative decoding is exact only up to such near-ties (docs/half_precision.md)",
                  UserWarning, stacklevel=2)


class ModelTarget(Target):
    """Wraps a `BlockDiffusionLM` (and optionally its tokenizer) as a target.

    compute_dtype: the dtype of every pass's activations, reductions and logits. By default float32 for a
    bfloat16 or float16 model on a CPU (weights stay in half precision and are cast exactly when used, so the
    passes are batch-invariant and decoding stays exact) or on the Triton path (`kernels`, below), else the
    weights' dtype: on a GPU with kernels="torch" a half-precision model computes natively and is not
    batch-invariant (decoding then warns); float32 there narrows the variation without removing it. Passing the
    half dtype on a CPU computes natively too (faster on CPUs with bfloat16 matrix units, not batch-invariant).

    kernels: "auto" (default), "torch" or "triton". "triton" runs every pass through the batch-invariant Triton
    kernels (`model.Kernels("triton")`, handed to every pass), computing in float32 by default; "auto" takes it for
    a bfloat16 or float16 model on a GPU when Triton is importable, else "torch" (the CPU path, unchanged). On CPU
    tensors "triton" needs TRITON_INTERPRET=1 (Triton's interpreter: slow, for tests).
    """

    def __init__(self, model: BlockDiffusionLM, tokenizer=None, *, compute_dtype: torch.dtype | None = None,
                 kernels: str = "auto"):
        if kernels not in ("auto",) + KERNELS:
            raise ValueError(f"kernels must be one of {('auto',) + KERNELS}, got {kernels!r}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        cfg = model.cfg
        self.vocab_size, self.mask_id, self.eos_id, self.pad_id = cfg.vocab_size, cfg.mask_id, cfg.eos_id, cfg.pad_id
        self._compute_dtype = compute_dtype
        self._kernels = kernels

    @property
    def kernels(self) -> str:
        """The kernels every pass uses, "torch" or "triton" (resolved from the constructor's `kernels` for the
        model's current device and dtype)."""
        if self._kernels == "auto":
            auto = (self.device.type == "cuda" and self.dtype in HALF_DTYPES
                    and spot_kernels.backends.triton_importable())
            return "triton" if auto else "torch"
        if self._kernels == "triton":
            if torch.float64 in (self.dtype, self._compute_dtype):  # not self.compute_dtype: it reads kernels
                raise ValueError("kernels='triton': the Triton kernels take float32/float16/bfloat16, not float64")
            if self.device.type != "cuda" and not (self.device.type == "cpu"
                                                   and os.environ.get("TRITON_INTERPRET", "") == "1"):
                raise ValueError(f"kernels='triton' needs CUDA tensors or TRITON_INTERPRET=1, got {self.device}")
        return self._kernels

    @property
    def compute_dtype(self) -> torch.dtype:
        if self._compute_dtype is not None:
            return self._compute_dtype
        if self.dtype in HALF_DTYPES and (self.device.type == "cpu" or self.kernels == "triton"):
            return torch.float32
        return self.dtype

    @property
    def batch_invariant(self) -> bool:
        """Verified on CPU for float32/float64 compute (every half-precision model by default): row-invariant
        projections (`model.linear`), per-row norms and the per-node `tree_attention`. With kernels "triton" (by
        default a half-precision model on a GPU), claimed for float32 compute: fixed-order Triton projections and
        norms (spot_kernels.triton.batch_invariant) and the Triton tree_attention, checked under the Triton
        interpreter only (docs/half_precision.md, "GPUs"). Not claimed on GPUs otherwise, whose matrix-multiply
        kernels may change with the number of rows."""
        if self.kernels == "triton":
            return self.compute_dtype == torch.float32
        return self.device.type == "cpu" and self.compute_dtype in (torch.float32, torch.float64)

    @property
    def aligned_blocks(self) -> bool:
        """Blocks at absolute positions k * B: a model trained with SDAR's block-causal prefix attention."""
        return self.model.cfg.prefix_attention == "block"

    @property
    def device(self) -> torch.device:
        return self.model.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed.weight.dtype

    def start(self, prompts, max_new_tokens, block_size, *, backend: str = "auto"):
        return ModelSession(self, prompts, max_new_tokens, block_size, Kernels(self.kernels, backend))

    def check_room(self, longest: int, rows: int, max_new_tokens: int, block_size: int) -> None:
        _check_kv_cache(self.model.cfg, self.compute_dtype, rows, _slots(longest, max_new_tokens, block_size),
                        longest, max_new_tokens)


def _slots(longest: int, max_new_tokens: int, block_size: int) -> int:
    """Cache slots a session may need: its longest prompt and answer, plus what one pass may append on top of
    another row's prefix (a block, or a joining prompt)."""
    return longest + -(-max_new_tokens // block_size) * block_size + max(longest, block_size)


def _check_kv_cache(cfg, dtype, rows: int, slots: int, longest: int, max_new_tokens: int) -> None:
    """Refuse a KV cache of `rows` x `slots` positions above SPOT_KV_CACHE_LIMIT_GB, before it is allocated."""
    need = slots * 2 * cfg.n_layers * rows * cfg.n_kv_heads * cfg.head_dim * dtype.itemsize
    limit = kv_cache_limit_bytes()
    if need > limit:
        raise ValueError(
            f"max_new_tokens: {max_new_tokens} new tokens after prompts of up to {longest} tokens, for {rows} "
            f"prompt(s), could need {need / 1e9:.3g} GB of KV cache, above the limit of {limit / 1e9:.3g} GB; lower "
            "max_new_tokens, the prompt length or the batch, or raise SPOT_KV_CACHE_LIMIT_GB")


class ModelSession(Session):
    """Rows are right-aligned in one KV cache (`KVCache`): every row's prefix ends at the end of its buffer and
    `key_start[row]` is its first real key (left padding before it), so a pass that appends nothing has the same
    shapes as the last one until the buffer grows. A pass appends each row's pending tokens (its
    prompt, or the blocks it finished); the cache moves the prefix of a row with fewer pending tokens than the
    longest right by the difference (`KVCache.right_align`), so rows advance block by block at their own pace
    (`per_row`) and any row can leave (`release`) or join (`admit`) between passes. Positions count from each row's
    key_start, so where a row's keys sit in the cache does not change what it computes. Every per-pass decision
    reads host integers (the pending counts, `KVCache.starts`): a pass makes no device read.

    kernels: what every pass runs (`Kernels`: the Triton or torch path, and the spot_kernels backend of its tree
    ops), fixed for the session; default the target's kernels with backend "auto"."""

    per_row = True

    def __init__(self, target: ModelTarget, prompts, max_new_tokens: int, block_size: int,
                 kernels: Kernels | None = None):
        self.target, self.batch, self.passes = target, 0, 0
        self.kernels = Kernels(target.kernels) if kernels is None else kernels
        self.max_new_tokens, self.block_size = max_new_tokens, block_size
        self.compute_dtype = target.compute_dtype
        self.pending: list[torch.Tensor] = []
        # SDAR's attention (`ModelConfig.prefix_attention` "block"): blocks at absolute positions k * B, each
        # committed block seeing itself and the blocks before it; a prompt's last len % B tokens open its first
        # block (`heads`), as SDAR's own sampler places them.
        self.aligned = target.aligned_blocks
        self.heads: list[list[int]] = []
        self.cache = KVCache(target.model.cfg, 0, 0, self.compute_dtype, target.device, max_capacity=0)
        self.admit(prompts)

    @property
    def prompt_head(self) -> list[int] | None:
        """Per row, how many of its first block's positions its prompt fills (block-causal prefix only)."""
        return [len(h) for h in self.heads] if self.aligned else None

    def initial_block(self, block_size: int) -> torch.Tensor | None:
        """Per row, its first block before any pass: the prompt's head, then masks (block-causal prefix only; the
        decoder applies it to rows that start their first block)."""
        if not self.aligned:
            return None
        block = torch.full((self.batch, block_size), self.target.mask_id, dtype=torch.long)
        for i, head in enumerate(self.heads):
            block[i, :len(head)] = torch.as_tensor(head, dtype=torch.long)
        return block.to(self.cache.device)

    def _split_heads(self, prompts) -> list[list[int]]:
        """The prompts' whole blocks (what the prefix holds); their remaining tokens go to `heads`."""
        whole, heads = split_prompt_heads(prompts, self.block_size, self.target.eos_id)
        self.heads += heads
        return whole

    @property
    def key_start(self) -> torch.Tensor:
        """int64 [batch]: each row's first real key in the cache."""
        return self.cache.key_start

    def admit(self, prompts) -> None:
        """Add rows for `prompts` after the current ones; their prompts are prefilled inside the next pass (with
        block-causal prefix attention, their whole blocks: the rest opens the row's first block, `prompt_head`)."""
        target, device = self.target, self.target.device
        cfg, dtype = target.model.cfg, self.compute_dtype
        if self.aligned:
            prompts = self._split_heads(prompts)
        longest = max((len(p) for p in prompts), default=0)
        most = max(self.cache.max_capacity, _slots(longest, self.max_new_tokens, self.block_size))
        batch = self.batch + len(prompts)
        _check_kv_cache(cfg, dtype, batch, most, longest, self.max_new_tokens)
        if self.batch == 0:  # the cache grows block by block (doubling) as the prefix does
            first = max((len(p) for p in prompts), default=0) + self.block_size
            self.cache = KVCache(cfg, batch, min(most, first), dtype, device, max_capacity=most)
        else:
            self.cache.add_rows(len(prompts), max_capacity=most)
        self.pending += [torch.as_tensor(p, dtype=torch.long).to(device) for p in prompts]
        self.batch = batch

    def release(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` (int64 indices, in order): the others leave the session and its passes."""
        index = keep.tolist()
        self.cache.keep_rows(index)
        self.pending = [self.pending[i] for i in index]
        self.heads = [self.heads[i] for i in index] if self.aligned else self.heads
        self.batch = len(index)

    @property
    def block_start(self) -> torch.Tensor:
        start = self.cache.row_lengths
        counts = [len(p) for p in self.pending]
        # within a block nothing is pending: no host-to-device copy (a blocking one syncs a GPU stream)
        return start + torch.tensor(counts, dtype=torch.long, device=start.device) if any(counts) else start

    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        b, n, B = nodes.shape
        return self._pass(nodes, head=True).view(b, n, B, -1)

    def score_lazily(self, nodes: torch.Tensor) -> NodeLogits:
        b, n, B = nodes.shape
        return _ProjectedLogits(self._pass(nodes, head=False).view(b, n, B, -1), self.target.model, self.kernels)

    def capturable_pass(self):
        """`forward` for a pass that appends nothing, or None: when a row has pending tokens (their append moves
        rows in the cache, host work), or when the kernels slice rows by their host starts (the CPU's default,
        `Kernels.slices_rows`). Counts the pass."""
        if any(len(p) for p in self.pending) or self.kernels.slices_rows(self.cache.device):
            return None
        self.passes += 1
        return self._forward_nodes

    def _forward_nodes(self, nodes: torch.Tensor) -> torch.Tensor:
        b, n, B = nodes.shape
        return self.forward(nodes.reshape(b, n * B), Append(self.cache.capacity, 0), n, B, True).view(b, n, B, -1)

    def _pending_ids(self, num_new: int) -> torch.Tensor:
        """The pending tokens [b, num_new], each row's at the end (left-padded with pad_id)."""
        ids = torch.full((self.batch, num_new), self.target.pad_id, dtype=torch.long, device=self.cache.device)
        for i, p in enumerate(self.pending):
            if len(p):
                ids[i, num_new - len(p):] = p
        return ids

    @torch.no_grad()
    def _pass(self, nodes: torch.Tensor, head: bool) -> torch.Tensor:
        """One pass: logits (head=True) or final-norm hidden states [b, n * B, ...] of the node tokens. The host's
        part (the cache's room for the pending tokens, their ids, the counters) around `forward`, the tensors'."""
        b, n, B = nodes.shape
        if b != self.batch:
            raise ValueError(f"session: nodes for {b} rows, the session has {self.batch}")
        append = self.cache.right_align([len(p) for p in self.pending])
        ids = torch.cat((self._pending_ids(append.count), nodes.reshape(b, n * B)), dim=1)
        out = self.forward(ids, append, n, B, head)
        self.pending = [p[:0] for p in self.pending]
        self.passes += 1
        return out

    def forward(self, ids: torch.Tensor, append: Append, n: int, B: int, head: bool) -> torch.Tensor:
        """The pass's tensor work: ids [b, append.count + n * B] (the pending tokens, then the nodes') through the
        model over the cache, which `KVCache.right_align` has made room in (`append`). With capturable kernels
        it reads no host integer but the bucket's (the cache's capacity, `append`'s start and count, n, B): a
        pass that appends nothing has the same graph until the cache grows (docs/round.md, "Capture")."""
        num_new, key_start = append.count, self.cache.key_start
        shape = dict(prefix_len=append.start + num_new, num_new=num_new, num_nodes=n, block_size=B)
        backend = self.kernels.tree_backend
        # The tree path reads only the appended tokens' rows over the prefix (the nodes go through
        # tree_attention): build that block alone, none at all when nothing is appended.
        mask = spot_kernels.tree_mask(key_start, **{**shape, "num_nodes": 0}, backend=backend) if num_new else None
        positions = spot_kernels.tree_position_ids(key_start, **shape, backend=backend)
        if num_new and self.aligned:
            mask = mask | _later_in_block(key_start, positions[:, :num_new], append.start + num_new, B)
        starts = tuple(self.cache.starts) if self.kernels.slices_rows(self.cache.device) else None
        return self.target.model(ids, positions, mask, self.cache, append, logits_from=num_new,
                                 tree=TreeLayout(key_start, n, B, starts), compute_dtype=self.compute_dtype,
                                 kernels=self.kernels, head=head)

    def append(self, block: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        rows = range(self.batch) if rows is None else rows.tolist()
        for i, r in enumerate(rows):
            self.pending[r] = torch.cat((self.pending[r], block[i].to(self.cache.device)))


def _later_in_block(key_start: torch.Tensor, positions: torch.Tensor, prefix_len: int, block_size: int):
    """bool [b, 1, num_new, prefix_len]: the appended tokens' keys later in their own block, which block-causal
    prefix attention adds to the causal rows of `spot_kernels.tree_mask` (appended tokens are whole blocks, so those
    keys are appended ones). positions: the appended tokens' positions (a padding query's clamped to 0: its row
    holds no real key, and keeps seeing only itself)."""
    key = torch.arange(prefix_len, device=key_start.device)[None, None, :] - key_start[:, None, None]  # key position
    query = positions[:, :, None]
    real_query = (prefix_len - positions.shape[1] + torch.arange(positions.shape[1], device=key_start.device))[None, :,
                                                                                                             None] \
        >= key_start[:, None, None]
    later = (key > query) & (torch.div(key, block_size, rounding_mode="floor")
                             == torch.div(query, block_size, rounding_mode="floor"))
    return (later & real_query)[:, None]


class _ProjectedLogits(NodeLogits):
    """A `ModelSession` pass's hidden states, projected by the LM head only where asked, through the pass's own
    kernels: the head's projection is row-invariant (`model.linear`), so a node's logits are bit-identical to
    `score`'s."""

    def __init__(self, hidden: torch.Tensor, model: BlockDiffusionLM, kernels: Kernels):
        self._hidden, self._model, self._kernels = hidden, model, kernels

    @property
    def dtype(self) -> torch.dtype:
        return self._hidden.dtype

    @torch.no_grad()
    def full(self) -> torch.Tensor:
        return self._model.lm_head(self._hidden, self._kernels)

    @torch.no_grad()
    def of(self, rows: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        return self._model.lm_head(self._hidden[rows, nodes], self._kernels)
