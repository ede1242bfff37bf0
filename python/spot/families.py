"""Family targets: SPOT on the diffusion LMs people run, with each family's own attention, positions and cache
protocol (docs/integrations.md, "Family targets"). `spot.hf.HFTarget` stays the generic transformers path.

- "llada" (LLaDA / LLaDA-1.5, Fast-dLLM's copy): a bidirectional model that takes neither a 4D mask nor position
  ids (its attention runs without a mask). Only unpadded rows are valid, so prompts of different lengths go in
  separate model calls (one per length); a pass scores N nodes as N copies of the whole sequence.
- "dream": bidirectional, logits read one position to the left (logit shift), loaded with `AutoModel`; unpadded rows
  with position ids 0..L-1 (Fast-dLLM's copy ignores the position ids it is given, so padding is never used).
- "sdar", "llada2": block diffusion whose prefix is block-bidirectional (a token sees its whole block and every
  earlier block), blocks aligned to absolute positions: the prompt's partial last block is decoded together with
  the first generated tokens (`Session.prompt_head`). Committed blocks are written to the KV cache with
  `store_kv=True`, SDAR's protocol (LLaDA2's forward takes the same flag); node copies are cropped after the pass.
- "bd3lm": recognised, not decodable yet (its forward takes (input_ids, timesteps, sample_mode, store_kv) and keeps
  its own cache; docs/integrations.md says what is missing).

The family is read from config.json (`model_type`, `architectures`, `auto_map`) or named with `family=`.
"""

from __future__ import annotations

import torch

from .hf import FAMILIES, BidirectionalSession, HFTarget, _first, _LeftPadded, _crop, family_of, load_hf_parts
from .target import Session

# ------------------------------------------------------------------------------------------ LLaDA and Dream


class UnpaddedBidirectionalTarget(HFTarget):
    """LLaDA and Dream: a bidirectional model run on unpadded rows only (no 4D mask is handed over).

    position_ids: hand the model position ids 0..L-1 (Dream) or none (LLaDA's forward takes none).
    logits_shift: 1 for Dream (position i's logits are read at i - 1)."""

    family = None  # LLaDATarget, DreamTarget name theirs

    def __init__(self, model, *, mask_id: int, eos_id: int | None = None, tokenizer=None, logits_shift: int = 0,
                 position_ids: bool = False, self_check: bool = True):
        super().__init__(model, "bidirectional", mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer,
                         logits_shift=logits_shift, self_check=self_check, mask_form="none")
        self.passes_position_ids = position_ids

    def model_kwargs(self, visible, positions) -> dict:
        return dict(position_ids=positions) if self.passes_position_ids else {}

    def session_class(self):
        return ByLengthSession

    def self_check(self, block_size: int) -> None:
        self.check_unpadded(block_size)


class LLaDATarget(UnpaddedBidirectionalTarget):
    family = "llada"

    def __init__(self, model, *, mask_id: int, eos_id: int | None = None, tokenizer=None, self_check: bool = True):
        super().__init__(model, mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer, self_check=self_check)


class DreamTarget(UnpaddedBidirectionalTarget):
    family = "dream"

    def __init__(self, model, *, mask_id: int, eos_id: int | None = None, tokenizer=None, self_check: bool = True):
        super().__init__(model, mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer, logits_shift=1,
                         position_ids=True, self_check=self_check)


class ByLengthSession(Session):
    """Rows grouped by prompt length, one unpadded `BidirectionalSession` per length: a pass makes one model call
    per group (each counted in `passes`)."""

    def __init__(self, target, prompts, max_new_tokens: int, block_size: int):
        self.batch = len(prompts)
        lengths = sorted({len(p) for p in prompts})
        self.groups = []
        for length in lengths:
            rows = [i for i, p in enumerate(prompts) if len(p) == length]
            sub = BidirectionalSession(target, [prompts[i] for i in rows], max_new_tokens, block_size)
            self.groups.append((torch.tensor(rows, dtype=torch.long, device=target.device), sub))

    @property
    def passes(self) -> int:
        return sum(sub.passes for _, sub in self.groups)

    @passes.setter
    def passes(self, value) -> None:  # Session's attribute; counted by the groups
        pass

    @property
    def block_start(self) -> torch.Tensor:
        out = torch.empty(self.batch, dtype=torch.long, device=self.groups[0][0].device)
        for rows, sub in self.groups:
            out[rows] = sub.block_start
        return out

    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        parts = [(rows, sub.score(nodes[rows])) for rows, sub in self.groups]
        out = parts[0][1].new_empty((self.batch, *parts[0][1].shape[1:]))
        for rows, logits in parts:
            out[rows] = logits
        return out

    def append(self, block: torch.Tensor) -> None:
        for rows, sub in self.groups:
            sub.append(block[rows.to(block.device)])


# ------------------------------------------------------------------------------------------ SDAR and LLaDA2


class BlockAlignedTarget(HFTarget):
    """SDAR and LLaDA2: block diffusion over a KV cache with a block-bidirectional prefix, blocks aligned to
    absolute positions (module docstring).

    mask_form: how the model reads a 4D mask: "bool" (True = attend: SDAR, LLaDA2 under sdpa) or "additive"
    (0 / -inf added to the scores: LLaDA2 under eager reads 1 / 0 floats, "float")."""

    family = None  # SDARTarget, LLaDA2Target name theirs

    def __init__(self, model, *, mask_id: int, eos_id: int | None = None, tokenizer=None, pad_id: int | None = None,
                 mask_form: str | None = None, self_check: bool = True):
        super().__init__(model, "block_causal", mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer, pad_id=pad_id,
                         self_check=self_check, mask_form=mask_form)

    # SDAR writes keys and values to the cache only when its forward is told store_kv=True (else it reads the cache
    # and writes nothing); LLaDA2's forward stores by default.
    store_kv = False

    def model_kwargs(self, visible, positions) -> dict:
        kwargs = super().model_kwargs(visible, positions)
        if self.store_kv:
            kwargs["store_kv"] = True
        return kwargs

    def session_class(self):
        return AlignedBlockSession


class SDARTarget(BlockAlignedTarget):
    """SDAR: its attention reads the 4D mask with `.bool()` under every implementation, so it gets a bool mask."""

    family = "sdar"
    store_kv = True

    def __init__(self, model, **kwargs):
        kwargs.setdefault("mask_form", "bool")
        super().__init__(model, **kwargs)


class LLaDA2Target(BlockAlignedTarget):
    """LLaDA2: sdpa takes the 4D mask as given (bool); eager converts a 4D mask itself, reading 1.0 as attend."""

    family = "llada2"

    def __init__(self, model, **kwargs):
        attention = getattr(getattr(model, "config", None), "_attn_implementation", None) or "eager"
        kwargs.setdefault("mask_form", "bool" if attention in ("sdpa", "flex_attention") else "float")
        super().__init__(model, **kwargs)


class AlignedBlockSession(_LeftPadded):
    """Blocks at absolute positions k*B of each row. The prefix holds each prompt's whole blocks (rows left-padded
    so that every row's current block starts at one column); the prompt's remaining tokens open the first block
    (`initial_block`) and are part of the output's head (`prompt_head`). A pass feeds the blocks finished since the
    last pass (block-bidirectional among themselves, seeing the prefix) and N copies of the current block (each
    seeing the prefix and itself), with `store_kv`; the copies' keys are cropped after the pass."""

    def __init__(self, target: HFTarget, prompts, max_new_tokens: int, block_size: int):
        B = block_size
        whole = [p[:len(p) // B * B] for p in prompts]
        super().__init__(target, whole, max_new_tokens, block_size)
        self.prompt_head = [len(p) % B for p in prompts]
        eos = target.eos_id
        if eos is not None and any(eos in p[len(w):] for p, w in zip(prompts, whole)):
            # the decoder would read it as the answer's end-of-sequence token and close the row
            raise ValueError(f"prompts: a prompt's last len % {B} tokens open the first block, and one of them is "
                             f"the end-of-sequence id {eos}; choose a block size that leaves it in a whole prompt "
                             "block, or build the target with eos_id=None")
        head = torch.full((self.batch, B), target.mask_id, dtype=torch.long)
        for i, p in enumerate(prompts):
            if self.prompt_head[i]:
                head[i, :self.prompt_head[i]] = torch.as_tensor(p[len(whole[i]):], dtype=torch.long)
        self._head = head.to(target.device)
        self.pending = self.prompt_ids
        self.cache = target.new_cache()
        self.cache_len = 0
        self.blocks_done = 0

    @property
    def block_start(self) -> torch.Tensor:
        return self.cache_len + self.pending.shape[1] - self.key_start

    def initial_block(self, block_size: int) -> torch.Tensor | None:
        return self._head.clone() if self.blocks_done == 0 else None

    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        b, n, B = nodes.shape
        dev = nodes.device
        C, P = self.cache_len, self.pending.shape[1]
        K = C + P + n * B
        key = torch.arange(K, device=dev)
        ks = self.key_start[:, None]  # [b, 1]
        real = key[None, :] >= ks  # [b, K]
        block_of = torch.div(key[None, :] - ks, B, rounding_mode="floor")  # block index of each real column
        # pending queries: the real prefix keys of their own and earlier blocks; a pad sees only itself
        q_pend = key[C:C + P]
        in_prefix = key[None, :] < C + P
        pend = (real[:, None, :] & in_prefix[:, None, :]
                & (block_of[:, None, :] <= block_of[:, C:C + P, None]))
        pend |= (q_pend[None, :, None] == key[None, None, :]) & ~real[:, C:C + P, None]
        # node queries: the whole real prefix and their own copy
        node_of_key = torch.div(key - (C + P), B, rounding_mode="floor")  # negative in the prefix
        node_of_query = torch.arange(n * B, device=dev) // B
        nodes_vis = (real[:, None, :] & in_prefix[:, None, :]) | (node_of_query[None, :, None]
                                                                  == node_of_key[None, None, :])
        visible = torch.cat((pend, nodes_vis.expand(b, -1, -1)), dim=1)[:, None]  # [b, 1, Q, K]
        start = (C + P - self.key_start)[:, None]
        positions = torch.cat(((key[None, C:C + P] - ks).clamp_min(0),
                               start + torch.arange(B, device=dev).repeat(n)[None]), dim=1)
        ids = torch.cat((self.pending, nodes.reshape(b, n * B)), dim=1)
        logits = self.target.forward(ids, visible, positions, cache=self.cache, keep=n * B)
        _crop(self.cache, C + P)
        self.cache_len, self.pending = C + P, self.pending[:, :0]
        self.passes += 1
        return logits.reshape(b, n, B, -1)

    def append(self, block: torch.Tensor) -> None:
        self.pending = torch.cat((self.pending, block.to(self.pending.device)), dim=1)
        self.blocks_done += 1


# ------------------------------------------------------------------------------------------ by name

TARGETS = {"llada": LLaDATarget, "dream": DreamTarget, "sdar": SDARTarget, "llada2": LLaDA2Target}
BD3LM_NOT_DONE = ("BD3-LM is recognised but has no family target yet: its forward takes (input_ids, timesteps, "
                  "sample_mode, store_kv) and keeps its own KV cache in the model, and its sampler picks the "
                  "positions it unmasks at random, not by confidence (docs/integrations.md)")


__all__ = ["FAMILIES", "family_of", "family_target", "load_family_target", "LLaDATarget", "DreamTarget",
           "SDARTarget", "LLaDA2Target"]


def load_family_target(directory, family: str, *, mask_token=None, mask_id=None, eos_id="auto", dtype=torch.float32,
                       device="cpu", trust_remote_code=False, attn_implementation=None) -> HFTarget:
    """`family`'s target from a checkpoint directory (the ids found as `spot.hf.load_hf_target` finds them);
    attn_implementation None: the model's own default."""
    if family == "bd3lm":
        raise NotImplementedError(f"{directory}: {BD3LM_NOT_DONE}")
    if family not in TARGETS:
        raise ValueError(f"family: expected one of {FAMILIES}, got {family!r}")
    model, tokenizer, mask_id, eos_id = load_hf_parts(
        directory, mask_token=mask_token, mask_id=mask_id, eos_id=eos_id, dtype=dtype, device=device,
        trust_remote_code=trust_remote_code, attn_implementation=attn_implementation,
        auto_model=family == "dream")  # Dream's checkpoints map only AutoModel (its DreamModel has the LM head)
    kwargs = dict(mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer)
    if family in ("sdar", "llada2"):
        kwargs["pad_id"] = _first(getattr(model.config, "pad_token_id", None))
    return family_target(family, model, **kwargs)


def family_target(family: str, model, **kwargs) -> HFTarget:
    """The family target of `family` (one of FAMILIES) around a loaded model."""
    if family == "bd3lm":
        raise NotImplementedError(BD3LM_NOT_DONE)
    if family not in TARGETS:
        raise ValueError(f"family: expected one of {FAMILIES}, got {family!r}")
    return TARGETS[family](model, **kwargs)
