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
- "bd3lm" (BD3-LM): block-causal attention over blocks of `config.block_size` at absolute positions, driven through
  its own sampling forward `(input_ids, timesteps, sample_mode=True)` without its in-model KV cache (the path its
  sampler takes with `sampling.kv_cache=False`, its default): a pass runs, per node, the row's committed tokens and
  the node's block, positions 0..L-1. Unpadded rows only (that forward takes no mask), so prompts of different
  lengths go in separate calls. The mask token's logit is lowered by 1e6, as its sampler's parameterization does.

The family is read from config.json (`model_type`, `architectures`, `auto_map`) or named with `family=`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .hf import (FAMILIES, BidirectionalSession, HFTarget, _crop, _first, _LeftPadded, checkpoint_config, family_of,
                 load_hf_parts)
from .limits import prompts_without_mask, split_prompt_heads, token_id
from .target import Session, Target

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

    @staticmethod
    def default_rule(block_size: int) -> str:
        """LLaDA's generate.py at steps = gen_length / 2 (its demo app.py's defaults, gen_length 64 / steps 32): two
        commits per step, B / 2 steps per block of B (`rule="family"`, docs/integrations.md "Parallel defaults")."""
        return f"steps:{max(1, block_size // 2)}"

    def __init__(self, model, *, mask_id: int, eos_id: int | None = None, tokenizer=None, self_check: bool = True):
        super().__init__(model, mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer, self_check=self_check)


class DreamTarget(UnpaddedBidirectionalTarget):
    family = "dream"

    @staticmethod
    def default_rule(block_size: int) -> str:
        """Dream's diffusion_generate as its README and eval scripts run it: alg="entropy", steps = max_new_tokens,
        the whole generation one block (block_size = max_new_tokens)."""
        return f"dream:{block_size},alg:entropy"

    def __init__(self, model, *, mask_id: int, eos_id: int | None = None, tokenizer=None, self_check: bool = True):
        super().__init__(model, mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer, logits_shift=1,
                         position_ids=True, self_check=self_check)


class ByLengthSession(Session):
    """Rows grouped by prompt length, one unpadded `BidirectionalSession` per length: a pass makes one model call
    per group (each counted in `passes`)."""

    def __init__(self, target, prompts, max_new_tokens: int, block_size: int, *, backend: str = "auto"):
        self.batch = len(prompts)
        lengths = sorted({len(p) for p in prompts})
        self.groups = []
        for length in lengths:
            rows = [i for i, p in enumerate(prompts) if len(p) == length]
            sub = BidirectionalSession(target, [prompts[i] for i in rows], max_new_tokens, block_size,
                                      backend=backend)
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

    aligned_blocks = True

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

    @staticmethod
    def default_rule(block_size: int) -> str:
        """SDAR's block_diffusion_generate defaults: low_confidence_dynamic, confidence_threshold 0.85 (strict >),
        denoising_steps = block_length, so a quota of one per step: `threshold:0.85,steps:B` is `threshold:0.85`."""
        return "threshold:0.85"

    def __init__(self, model, **kwargs):
        kwargs.setdefault("mask_form", "bool")
        super().__init__(model, **kwargs)


class LLaDA2Target(BlockAlignedTarget):
    """LLaDA2: sdpa takes the 4D mask as given (bool); eager converts a 4D mask itself, reading 1.0 as attend."""

    family = "llada2"

    @staticmethod
    def default_rule(block_size: int) -> str:
        """LLaDA2's generate() defaults: threshold 0.95 (strict >, float32), steps = block_length, so a quota of one
        per step: `threshold:0.95,steps:B` is `threshold:0.95`."""
        return "threshold:0.95"

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

    def __init__(self, target: HFTarget, prompts, max_new_tokens: int, block_size: int, *, backend: str = "auto"):
        B = block_size
        whole, heads = split_prompt_heads(prompts, B, target.eos_id)
        super().__init__(target, whole, max_new_tokens, block_size, backend=backend)
        self.prompt_head = [len(h) for h in heads]
        head = torch.full((self.batch, B), target.mask_id, dtype=torch.long)
        for i, h in enumerate(heads):
            head[i, :len(h)] = torch.as_tensor(h, dtype=torch.long)
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


# ------------------------------------------------------------------------------------------ BD3-LM


class BD3LMTarget(Target):
    """BD3-LM (kuleshov-group/bd3lms `models/hf/modeling_bd3lm.py`) through its sampling forward (module docstring).

    Cost: no cache is kept, so each pass recomputes the committed prefix once per node (N x (prefix + B) tokens
    per row); its in-model cache holds one sequence per batch row and cannot hold N node copies."""

    aligned_blocks = True

    family = "bd3lm"
    # the sampler's subs parameterization: the mask token's log-probability is lowered by 1e6 (finite)
    MASK_PENALTY = 1e6

    def __init__(self, model, *, mask_id: int, eos_id: int | None = None, tokenizer=None):
        config = getattr(model, "config", None)
        backbone = getattr(model, "backbone", None)
        for name in ("block_size", "model_length", "vocab_size", "cross_attn", "time_conditioning", "attn_backend"):
            if backbone is None or not hasattr(config, name):
                raise ValueError(f"model: expected BD3-LM (a `backbone` and config.{name}), got {type(model).__name__}")
        if not config.cross_attn:
            raise ValueError("model: config.cross_attn is False: its sampling forward then attends over the whole "
                             "sequence with no block mask, which this target does not model")
        if config.time_conditioning:
            raise ValueError("model: config.time_conditioning is True: its logits depend on the noise level its "
                             "sampler passes, which one-commit-per-pass decoding has no value for")
        if config.attn_backend != "sdpa":
            raise ValueError(f"model: config.attn_backend is {config.attn_backend!r}; BD3-LM samples only with "
                             "'sdpa' (load it with attn_backend='sdpa', as spot.load_target does)")
        sigma_map = getattr(backbone, "sigma_map", None)
        if sigma_map is not None and next(sigma_map.parameters()).dtype != torch.float32:
            raise ValueError("model: BD3-LM's timestep embedding is computed in float32 whatever the model's dtype; "
                             "apply spot.families.float32_conditioning(model) first (spot.load_target does)")
        self.model = model.eval()
        self.block_size, self.model_length = int(config.block_size), int(config.model_length)
        self.vocab_size = int(config.vocab_size)
        mask_id = token_id("mask_id", mask_id, self.vocab_size)
        eos_id = token_id("eos_id", eos_id, self.vocab_size, optional=True)
        if mask_id == eos_id:
            raise ValueError(f"mask_id, eos_id: the mask and end-of-sequence ids must differ (both {mask_id})")
        self.mask_id, self.eos_id, self.tokenizer = mask_id, eos_id, tokenizer

    device, dtype = HFTarget.device, HFTarget.dtype  # read from self.model's parameters

    def start(self, prompts, max_new_tokens, block_size, *, backend: str = "auto") -> Session:
        if block_size != self.block_size:
            raise ValueError(f"block_size: this BD3-LM attends in blocks of config.block_size = {self.block_size}; "
                             f"decode with block_size={self.block_size}, got {block_size}")
        prompts_without_mask(prompts, self.mask_id)
        self.check_room(max((len(p) for p in prompts), default=0), len(prompts), max_new_tokens, block_size)
        return BD3LMSession(self, prompts, max_new_tokens, block_size)

    def check_room(self, longest: int, rows: int, max_new_tokens: int, block_size: int) -> None:
        """A prompt and its answer must fit the model's positions (config.model_length)."""
        span = -(-(longest + max_new_tokens) // block_size) * block_size
        if span > self.model_length:
            raise ValueError(f"max_new_tokens: a prompt of {longest} tokens plus {max_new_tokens} new tokens spans "
                             f"{span} positions (whole blocks), more than the model's config.model_length = "
                             f"{self.model_length}")

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [r, L, V] of BD3-LM's sampling forward on unpadded rows ids [r, L] (blocks at k * block_size)."""
        if any(getattr(b, "kv_cache", None) is not None for b in self.model.backbone.blocks):
            raise ValueError("model: it holds a KV cache (reset_kv_cache was called); set each block's kv_cache to "
                             "None: this target runs its forward without one")
        with torch.no_grad():
            out = self.model(input_ids=ids, timesteps=torch.zeros(ids.shape[0], device=ids.device),
                             sample_mode=True, store_kv=False, return_dict=True)
        logits = out.logits
        logits[..., self.mask_id] -= self.MASK_PENALTY
        return logits


def float32_conditioning(model):
    """BD3-LM in float64 (or half) with its conditioning path in float32: its timestep embedding casts to float32
    (`t.float()`), so the timestep MLP and the adaLN modulations it feeds must be float32 for the forward to run.
    With time conditioning off that path computes one constant vector. Returns the model, changed in place."""
    backbone = model.backbone
    if getattr(backbone, "sigma_map", None) is not None:
        backbone.sigma_map.float()
    for module in backbone.modules():
        if getattr(module, "adaLN_modulation", None) is not None:
            module.adaLN_modulation.float()
    return model


class BD3LMSession(Session):
    """Blocks at absolute positions k*B; the prompt's last len % B tokens open the first block (`prompt_head`).
    Rows of one prompt length share a model call (a pass makes one call per length, each counted in `passes`)."""

    def __init__(self, target: BD3LMTarget, prompts, max_new_tokens: int, block_size: int):
        B = block_size
        self.target, self.batch, self.passes = target, len(prompts), 0
        dev = target.device
        self.prompt_head = [len(p) % B for p in prompts]
        eos = target.eos_id
        if eos is not None and any(eos in p[len(p) // B * B:] for p in prompts):
            raise ValueError(f"prompts: a prompt's last len % {B} tokens open the first block, and one of them is "
                             f"the end-of-sequence id {eos}; build the target with eos_id=None")
        self.groups = []  # (rows, committed tokens [rows, C])
        for length in sorted({len(p) for p in prompts}):
            rows = [i for i, p in enumerate(prompts) if len(p) == length]
            whole = torch.tensor([prompts[i][:length // B * B] for i in rows], dtype=torch.long, device=dev)
            whole = whole.view(len(rows), length // B * B)  # an empty prompt too
            self.groups.append((torch.tensor(rows, dtype=torch.long, device=dev), whole))
        head = torch.full((self.batch, B), target.mask_id, dtype=torch.long)
        for i, p in enumerate(prompts):
            if self.prompt_head[i]:
                head[i, :self.prompt_head[i]] = torch.as_tensor(p[len(p) // B * B:], dtype=torch.long)
        self._head = head.to(dev)
        self.blocks_done = 0

    @property
    def block_start(self) -> torch.Tensor:
        out = torch.empty(self.batch, dtype=torch.long, device=self.target.device)
        for rows, done in self.groups:
            out[rows] = done.shape[1]
        return out

    def initial_block(self, block_size: int) -> torch.Tensor | None:
        return self._head.clone() if self.blocks_done == 0 else None

    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        b, n, B = nodes.shape
        out = None
        for rows, done in self.groups:
            g, C = done.shape
            ids = torch.cat((done[:, None].expand(g, n, C), nodes[rows.to(nodes.device)].to(done.device)), dim=2)
            logits = self.target.forward(ids.reshape(g * n, C + B))[:, C:].reshape(g, n, B, -1)
            if out is None:
                out = logits.new_empty((b, n, B, logits.shape[-1]))
            out[rows.to(out.device)] = logits
            self.passes += 1
        return out

    def append(self, block: torch.Tensor) -> None:
        self.groups = [(rows, torch.cat((done, block[rows.to(block.device)].to(done.device)), dim=1))
                       for rows, done in self.groups]
        self.blocks_done += 1


# ------------------------------------------------------------------------------------------ by name

TARGETS = {"llada": LLaDATarget, "dream": DreamTarget, "sdar": SDARTarget, "llada2": LLaDA2Target,
           "bd3lm": BD3LMTarget}


__all__ = ["FAMILIES", "family_of", "family_target", "load_family_target", "LLaDATarget", "DreamTarget",
           "SDARTarget", "LLaDA2Target", "BD3LMTarget", "float32_conditioning"]


def load_family_target(directory, family: str, *, mask_token=None, mask_id=None, eos_id="auto", dtype=torch.float32,
                       device="cpu", trust_remote_code=False, attn_implementation=None,
                       force_family: bool = False) -> HFTarget:
    """`family`'s target from a checkpoint directory (the ids found as `spot.hf.load_hf_target` finds them);
    attn_implementation None: the model's own default. A `family` other than the one config.json names is refused,
    naming both (another family's target hands the model other arguments and reads its logits otherwise: it
    decodes other tokens, or fails inside the model), unless `force_family=True`; a config.json that names no
    family takes any."""
    if family not in TARGETS:
        raise ValueError(f"family: expected one of {FAMILIES}, got {family!r}")
    config = checkpoint_config(directory)
    declared = family_of(config)
    if declared not in (None, family) and not force_family:
        raise ValueError(f"family: {family!r} contradicts {Path(directory) / 'config.json'}, which names the "
                         f"{declared!r} family (model_type {config.get('model_type')!r}, architectures "
                         f"{config.get('architectures')!r}); load it as {declared!r} (family='auto'), or pass "
                         f"force_family=True (CLI: --force-family) to run it as {family!r} anyway")
    if family == "bd3lm" and attn_implementation is not None:
        raise ValueError("attn_implementation: BD3-LM chooses its attention with config.attn_backend (sampling "
                         "needs 'sdpa', which spot.load_target sets); leave attn_implementation unset")
    model, tokenizer, mask_id, eos_id = load_hf_parts(
        directory, mask_token=mask_token, mask_id=mask_id, eos_id=eos_id, dtype=dtype, device=device,
        trust_remote_code=trust_remote_code, attn_implementation=attn_implementation,
        auto_model=family == "dream",  # Dream's checkpoints map only AutoModel (its DreamModel has the LM head)
        model_options=dict(attn_backend="sdpa") if family == "bd3lm" else None)
    kwargs = dict(mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer)
    if family == "bd3lm":
        return BD3LMTarget(float32_conditioning(model), **kwargs)
    if family in ("sdar", "llada2"):
        kwargs["pad_id"] = _first(getattr(model.config, "pad_token_id", None))
    return family_target(family, model, **kwargs)


def family_target(family: str, model, **kwargs) -> HFTarget:
    """The family target of `family` (one of FAMILIES) around a loaded model."""
    if family not in TARGETS:
        raise ValueError(f"family: expected one of {FAMILIES}, got {family!r}")
    return TARGETS[family](model, **kwargs)
