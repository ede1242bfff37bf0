"""The target contract (docs/design.md §2.1) and its implementation for `BlockDiffusionLM`.

A decoder sees a target only through a `Session`: one batch of sequences whose committed tokens live in a
cached prefix, and one call, `score`, that runs ONE target pass over N candidate states of the current block.
Every call of `score` is one target pass; finished blocks join the prefix inside the next pass (fused append),
so prefill and appends cost no extra passes for any method.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

import spot_kernels

from .model import BlockDiffusionLM, KVCache, TreeLayout


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

    @abstractmethod
    def append(self, block: torch.Tensor) -> None:
        """Commit a finished block int64 [batch, B] to the prefix (its cost is folded into the next pass)."""


class Target(ABC):
    vocab_size: int
    mask_id: int
    eos_id: int | None
    device: torch.device

    @abstractmethod
    def start(self, prompts: list[list[int]], max_new_tokens: int, block_size: int) -> Session:
        """Open a session whose prefix holds the prompts (prefilled inside the first pass)."""


class ModelTarget(Target):
    """Wraps a `BlockDiffusionLM` (and optionally its tokenizer) as a target."""

    def __init__(self, model: BlockDiffusionLM, tokenizer=None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        cfg = model.cfg
        self.vocab_size, self.mask_id, self.eos_id, self.pad_id = cfg.vocab_size, cfg.mask_id, cfg.eos_id, cfg.pad_id

    @property
    def device(self) -> torch.device:
        return self.model.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed.weight.dtype

    def start(self, prompts, max_new_tokens, block_size):
        return ModelSession(self, prompts, max_new_tokens, block_size)


class ModelSession(Session):
    def __init__(self, target: ModelTarget, prompts, max_new_tokens: int, block_size: int):
        self.target, self.batch, self.passes = target, len(prompts), 0
        device = target.device
        width = max((len(p) for p in prompts), default=0)
        # Left padding keeps every row's current block at the same cache slots; key_start hides the pads.
        pending = torch.full((self.batch, width), target.pad_id, dtype=torch.long)
        for i, p in enumerate(prompts):
            if len(p):
                pending[i, width - len(p):] = torch.as_tensor(p, dtype=torch.long)
        self.pending = pending.to(device)
        self.key_start = torch.tensor([width - len(p) for p in prompts], dtype=torch.long, device=device)
        blocks = -(-max_new_tokens // block_size)
        self.cache = KVCache(target.model.cfg, self.batch, width + blocks * block_size, target.dtype, device)

    @property
    def block_start(self) -> torch.Tensor:
        return self.cache.length + self.pending.shape[1] - self.key_start

    @torch.no_grad()
    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        b, n, B = nodes.shape
        num_new = self.pending.shape[1]
        prefix_len = self.cache.length + num_new
        if prefix_len > self.cache.capacity:
            raise RuntimeError(f"session: cache capacity {self.cache.capacity} exceeded ({prefix_len})")
        shape = dict(prefix_len=prefix_len, num_new=num_new, num_nodes=n, block_size=B)
        mask = spot_kernels.tree_mask(self.key_start, **shape)
        positions = spot_kernels.tree_position_ids(self.key_start, **shape)
        ids = torch.cat((self.pending, nodes.reshape(b, n * B)), dim=1)
        logits = self.target.model(ids, positions, mask, self.cache, num_new=num_new, logits_from=num_new,
                                   tree=TreeLayout(self.key_start, n, B))
        self.pending = self.pending[:, :0]
        self.passes += 1
        return logits.view(b, n, B, -1)

    def append(self, block: torch.Tensor) -> None:
        self.pending = torch.cat((self.pending, block.to(self.pending.device)), dim=1)
