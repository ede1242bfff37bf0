"""Hugging Face targets: SPOT on a transformers model people already run (docs/integrations.md).

`HFTarget` wraps a `PreTrainedModel` whose forward takes `input_ids`, a 4D `attention_mask`, `position_ids` and
`past_key_values` (the Llama / Qwen2 / Qwen3 families, and remote-code DLMs with that signature) in one of two
attention layouts:

- "block_causal" (SDAR, BD3-LM, LLaDA2): committed tokens live in a `DynamicCache`. A pass feeds the tokens that
  joined the prefix since the last pass (the prompt, then each finished block), then N copies of the current block;
  `spot_kernels.tree_mask` lets every copy see the prefix and itself only. The copies' keys and values are cropped
  from the cache after the pass, so a finished block joins the prefix inside the next pass, as with the embedded
  target.
- "bidirectional" (LLaDA, Dream): no cache. A pass runs N copies of the whole sequence (prompt, committed blocks,
  one node's block, the still-masked future blocks) as N rows of one batch, because in a bidirectional model every
  position's output depends on every token.

Left padding batches prompts of different lengths; the mask hides the pads. The mask is handed over in the form
the model's attention implementation reads (bool for sdpa, additive for eager and flex_attention); attention
implementations that cannot take an arbitrary mask (flash attention) are refused. A self-check on first use scores
nodes together and apart and refuses a model that ignores the mask.
"""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import spot_kernels

from .limits import kv_cache_limit_bytes, prompts_without_mask, size, token_id
from .model import Kernels
from .target import Session, Target

LAYOUTS = ("block_causal", "bidirectional")
BOOL_MASK_ATTENTION = ("sdpa",)  # read a bool mask, True = attend
ADDITIVE_MASK_ATTENTION = ("eager", "flex_attention")  # add the mask to the scores: a bool mask would be wrong
# How a model reads the 4D mask it is handed: bool (True = attend), additive (0 / -inf added to the scores), float
# (1.0 = attend, 0.0 = hidden: remote code that converts it itself), or none (the model takes no mask: LLaDA).
MASK_FORMS = ("bool", "additive", "float", "none")
# Self-check tolerance on logits, relative to the logit scale (1 + the largest |logit|), by the precision the model
# computes in (`HFTarget.compute_dtype`), not the dtype of its logits: a float64 transformers model computes its RoPE,
# RMSNorm and (eager attention) softmax in float32, whose rounding follows the call's shapes and ATen's SIMD path, so
# a node's float64 logits move by a few float32 ulps with the other nodes of a pass (measured on the tiny test models:
# up to 9e-8 of the scale under ATEN_CPU_CAPABILITY=avx2, 2.5e-7 for float32 models, 5.4e-3 for bfloat16). A semantic
# fault (the mask ignored or misread, positions ignored) moves them by order one (0.17 to 0.21 of the scale on the same
# models). Each tolerance lies within a factor 3 of sqrt(eps) of its precision, the geometric middle between its
# rounding (about eps) and order one, so a factor of about 1 / sqrt(eps) separates it from either; the half-precision
# ones, where that factor is only about 10, sit 9x above the measured rounding and 3.4x below the smallest fault.
CHECK_TOLERANCE = {torch.float64: 1e-8, torch.float32: 1e-3, torch.bfloat16: 5e-2, torch.float16: 5e-2}


class IncompatibleModelError(TypeError):
    """A model whose forward or config does not take what the target hands it (the message names the target or
    flag that fits)."""


class SelfCheckError(ValueError):
    """The self-check found the model does not do what the target relies on; `cause` is one of CAUSES."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


CAUSES = ("non-finite logits", "mask ignored", "mask form misread (additive vs bool)", "position ids ignored",
          "batch-dependent numerics", "causal block")


class HFTarget(Target):
    """A transformers model as a SPOT target (the generic path; spot.families holds the family targets).

    model: a `PreTrainedModel` (or any module with the same forward signature and a `config`).
    layout: "block_causal" or "bidirectional" (module docstring).
    mask_id: the mask token's id; eos_id: the end-of-sequence id (None: never stop).
    tokenizer: optional, anything with encode(text) -> ids and decode(ids) -> text (the CLI uses it).
    logits_shift: 1 for models whose logits for position i are read at position i - 1 (Dream); bidirectional only.
    pad_id: the id placed in left padding (never attended to); default mask_id.
    self_check: run the mask self-check on the first `start` (default True).
    """

    def __init__(self, model, layout: str = "block_causal", *, mask_id: int, eos_id: int | None = None,
                 tokenizer=None, logits_shift: int = 0, pad_id: int | None = None, self_check: bool = True,
                 mask_form: str | None = None):
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
        if logits_shift not in (0, 1):
            raise ValueError(f"logits_shift: expected 0 or 1, got {logits_shift!r}")
        if logits_shift and layout != "bidirectional":
            raise ValueError("logits_shift=1 (logits read one position to the left, as Dream does) needs "
                             "layout='bidirectional': in 'block_causal' a block's first logit would come from a "
                             "cached prefix position")
        config = getattr(model, "config", None)
        attention = getattr(config, "_attn_implementation", None) or "eager"
        if mask_form is not None and mask_form not in MASK_FORMS:
            raise ValueError(f"mask_form: expected one of {MASK_FORMS}, got {mask_form!r}")
        if mask_form is None and attention not in BOOL_MASK_ATTENTION + ADDITIVE_MASK_ATTENTION:
            raise ValueError(f"model attention implementation {attention!r} cannot take an arbitrary 4D mask; load "
                             f"the model with attn_implementation='sdpa' (or 'eager')")
        self.model = model.eval()
        self.layout, self.logits_shift, self.attention = layout, logits_shift, attention
        self.mask_form = mask_form or ("bool" if attention in BOOL_MASK_ATTENTION else "additive")
        self.tokenizer = tokenizer
        self.vocab_size = _vocab_size(model)
        mask_id = token_id("mask_id", mask_id, self.vocab_size)
        eos_id = token_id("eos_id", eos_id, self.vocab_size, optional=True)
        pad_id = token_id("pad_id", pad_id, self.vocab_size, optional=True)
        if mask_id == eos_id:
            raise ValueError(f"mask_id, eos_id: the mask and end-of-sequence ids must differ (both {mask_id})")
        self.mask_id, self.eos_id = mask_id, eos_id
        self.pad_id = mask_id if pad_id is None else pad_id
        self._checked = not self_check
        self._compute_dtype = None  # measured on first use (`compute_dtype`)
        # What the forward takes is read once, not on every pass: transformers >= 5.24 names the cache `cache`
        # (earlier versions `past_key_values`), and `logits_to_keep` spares the LM head the prefix rows.
        self._cache_kwarg = "cache" if _accepts(model, "cache") else "past_key_values"
        self._keeps_logits = _accepts(model, "logits_to_keep")

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(p for p in self.model.parameters() if p.is_floating_point()).dtype

    @property
    def compute_dtype(self) -> torch.dtype:
        """The coarsest floating dtype the model's forward computes in: of every tensor an operation returns in one
        forward over a few tokens (0-dim constants aside), and of the logits. Measured once. float32 for a float64
        transformers model, whose RoPE, RMSNorm and eager attention's softmax run in float32 whatever its dtype: its
        float64 logits carry float32 rounding. The self-check's tolerance and the decoder's batch-invariance warning
        follow it."""
        if self._compute_dtype is None:
            self._compute_dtype = self._measure_compute_dtype()
        return self._compute_dtype

    def _measure_compute_dtype(self) -> torch.dtype:
        L = 4
        ids = torch.tensor([[self._probe_token(i) for i in range(L)]], device=self.device)
        full = torch.ones((1, 1, L, L), dtype=torch.bool, device=self.device)
        recorder = _FloatDtypes()
        try:
            with recorder:
                logits = self.forward(ids, full, torch.arange(L, device=self.device)[None])
        except IncompatibleModelError:
            raise
        except (RuntimeError, NotImplementedError):
            # an operation the recording mode cannot run through (a higher-order op such as flex_attention):
            # assume the float32 of transformers' RoPE and norms, or the model's own dtype if coarser
            return coarsest((self.dtype, torch.float32))
        return coarsest(recorder.dtypes | {logits.dtype})

    def check_tolerance(self) -> float:
        """The self-check's tolerance (relative to the logit scale) for the precision the model computes in."""
        return CHECK_TOLERANCE.get(self.compute_dtype, CHECK_TOLERANCE[torch.bfloat16])

    def start(self, prompts, max_new_tokens, block_size, *, backend: str = "auto") -> Session:
        if not self._checked:
            self.self_check(block_size)
            self._checked = True
        if self.logits_shift and any(len(p) == 0 for p in prompts):
            raise ValueError("prompts: logits_shift=1 reads a block's first logit at the token before it, so every "
                             "prompt needs at least one token")
        prompts_without_mask(prompts, self.mask_id)
        self.check_room(max((len(p) for p in prompts), default=0), len(prompts), max_new_tokens, block_size)
        return self.session_class()(self, prompts, max_new_tokens, block_size, backend=backend)

    def session_class(self):
        return BlockCausalSession if self.layout == "block_causal" else BidirectionalSession

    def check_room(self, longest: int, rows: int, max_new_tokens: int, block_size: int) -> None:
        """`max_new_tokens` and the prompt length bounded before a session allocates anything: block_causal's KV
        cache may grow to the longest prompt + max_new_tokens (SPOT_KV_CACHE_LIMIT_GB); a bidirectional pass
        attends over the whole sequence, scores of [rows, heads, L, L] for one node per row at least
        (SPOT_MEMORY_LIMIT_GB)."""
        config = getattr(self.model, "config", None)
        length = longest + -(-max_new_tokens // block_size) * block_size + block_size
        layers = getattr(config, "num_hidden_layers", None) or 1
        heads = getattr(config, "num_attention_heads", None) or 1
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        hidden = getattr(config, "hidden_size", None) or 1
        head_dim = getattr(config, "head_dim", None) or max(hidden // heads, 1)
        itemsize = self.dtype.itemsize
        if self.layout == "block_causal":
            need = 2 * layers * rows * kv_heads * head_dim * itemsize * length
            limit = kv_cache_limit_bytes()
            if need > limit:
                raise ValueError(f"max_new_tokens: {max_new_tokens} new tokens after prompts of up to {longest} "
                                 f"tokens, for {rows} prompt(s), could need {need / 1e9:.3g} GB of KV cache, above "
                                 f"the limit of {limit / 1e9:.3g} GB; lower max_new_tokens, the prompt length or the "
                                 "batch, or raise SPOT_KV_CACHE_LIMIT_GB")
        else:
            size(f"max_new_tokens: {max_new_tokens} new tokens after prompts of up to {longest} tokens, for {rows} "
                 f"prompt(s), make a sequence of {length} tokens whose attention scores ({heads} heads, one node per "
                 "row) need about", rows * heads * length * length * max(itemsize, 4))

    # ---------------------------------------------------------------------------------------------- forward

    def mask(self, visible: torch.Tensor, form: str | None = None) -> torch.Tensor | None:
        """A bool mask (True = attend) in the form the model reads (`mask_form`, or `form`)."""
        form = form or self.mask_form
        if form == "bool":
            return visible
        if form == "none":
            return None
        if form == "float":
            return visible.to(self.dtype)
        zero = torch.zeros((), dtype=self.dtype, device=visible.device)
        return torch.where(visible, zero, torch.full((), -math.inf, dtype=self.dtype, device=visible.device))

    def model_kwargs(self, visible, positions) -> dict:
        """The mask and position arguments of one model call (family targets hand over other ones)."""
        kwargs = dict(position_ids=positions)
        if self.mask_form != "none":
            kwargs["attention_mask"] = self.mask(visible)
        return kwargs

    @torch.no_grad()
    def forward(self, ids, visible, positions, cache=None, keep: int = 0) -> torch.Tensor:
        """Logits [rows, keep or all, V] of one model call; `visible` is the bool mask [rows, 1, Q, K]."""
        kwargs = self.model_kwargs(visible, positions)
        if cache is not None:
            kwargs[self._cache_kwarg] = cache
        kwargs["use_cache"] = cache is not None
        if keep and self._keeps_logits:
            kwargs["logits_to_keep"] = keep
        try:
            out = self.model(input_ids=ids, **kwargs)
        except (TypeError, AttributeError) as e:
            raise IncompatibleModelError(self._incompatible(e)) from e
        logits = out.logits if hasattr(out, "logits") else out[0]
        if logits.shape[-1] != self.vocab_size:
            raise ValueError(f"model: returned logits over {logits.shape[-1]} tokens, but its vocabulary (output "
                             f"embeddings / config.vocab_size) has {self.vocab_size}; the ids it would commit must "
                             "be ids of that vocabulary")
        return logits[:, -keep:] if keep else logits

    def _incompatible(self, error: Exception) -> str:
        family = family_of(getattr(self.model, "config", {}) or {})
        name = type(self).__name__
        own = getattr(self, "family", None)
        if family and own != family:
            hint = (f"this is a {family!r} checkpoint: use its family target (spot.load_target(DIR, "
                    f"trust_remote_code=True) picks it; or family={family!r}, CLI --family {family})")
        elif own:
            hint = (f"the {own!r} family target hands the model that family's inputs; this checkpoint's code takes "
                    "others (another version of the family's code?)")
        else:
            hint = ("SPOT's generic path needs a forward taking input_ids, a 4D attention_mask, position_ids and a "
                    "transformers cache; family targets (spot.families) cover LLaDA, Dream, SDAR, LLaDA2 and BD3-LM")
        return f"{name}: the model's forward failed on SPOT's inputs ({type(error).__name__}: {error}); {hint}"

    def new_cache(self):
        from transformers import DynamicCache
        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # transformers < 4.56 takes no config
            return DynamicCache()
        except AttributeError as e:  # a config without the fields a transformers cache reads (BD3-LM)
            raise IncompatibleModelError(self._incompatible(e)) from e

    # ---------------------------------------------------------------------------------------------- self-check

    def self_check(self, block_size: int) -> None:
        """Score two nodes together and apart, and a short prompt alone and beside a longer one: the logits must be
        finite and agree (to `CHECK_TOLERANCE`), and a block's first position must see its last. Raises
        `SelfCheckError` naming the cause (one of CAUSES: the mask ignored, its form misread, the position ids
        ignored, ...): a model that fails would otherwise decode wrong tokens."""
        self._check(block_size, padded=True)

    def check_unpadded(self, block_size: int) -> None:
        """The self-check without the padding probe, for targets that never pad (LLaDA, Dream)."""
        self._check(block_size, padded=False)

    def _check(self, block_size: int, padded: bool) -> None:
        problem = self._probe_problem(block_size, padded)
        if problem is None:
            return
        cause, how = self._diagnose(block_size, padded, problem)
        raise SelfCheckError(f"{type(self).__name__} self-check: {problem}; cause: {cause}{how}. SPOT would decode "
                             "wrong tokens with it", cause)

    def _probe_problem(self, block_size: int, padded: bool) -> str | None:
        """What the standard probes find wrong, or None."""
        B = block_size
        short = [self._probe_token(i) for i in range(2)]
        long = [self._probe_token(i) for i in range(2, 7)] if padded else [self._probe_token(i) for i in (2, 3)]
        a = torch.full((B,), self.mask_id, dtype=torch.long, device=self.device)
        b = a.clone()
        b[-1] = self._probe_token(7)
        together, only_a, only_b = self._probe([short, long], B, [[a, b], [a], [b]])
        alone = self._probe([short], B, [[a, b]])[0] if padded else together[:1]
        tol = self.check_tolerance()  # the precision the model computes in, not its logits' dtype
        together, only_a, only_b, alone = (x.double() for x in (together, only_a, only_b, alone))
        for name, x in (("together", together), ("apart", only_a), ("alone", alone)):
            if _non_finite(x):
                return f"the model returns NaN / inf logits (scoring nodes {name})"
        scale = 1.0 + together.nan_to_num(0.0, 0.0, 0.0).abs().max().item()
        worst = max(_gap(together[:, 0], only_a[:, 0]), _gap(together[:, 1], only_b[:, 0]))
        if worst > tol * scale:
            return f"a node's logits change by {worst:.3g} when another node shares its pass"
        padded_diff = _gap(alone[0], together[0])
        if padded_diff > tol * scale:
            return f"a prompt's logits change by {padded_diff:.3g} when it is left-padded beside a longer prompt"
        if B > 1 and torch.equal(together[:, 0, 0], together[:, 1, 0]):
            return "a block's first position does not see its last (changing the last token left the first " \
                   "position's logits unchanged)"
        return None

    def _diagnose(self, block_size: int, padded: bool, problem: str) -> tuple[str, str]:
        """(cause, advice) for a failed probe: another mask form that passes, else a mask without effect, else
        position ids without effect."""
        own = self.mask_form
        if own != "none":
            for form in ("bool", "additive", "float"):
                if form == own:
                    continue
                self.mask_form = form
                try:
                    fixed = self._probe_problem(block_size, padded) is None
                except (RuntimeError, TypeError, ValueError):
                    fixed = False
                finally:
                    self.mask_form = own
                if fixed:
                    return ("mask form misread (additive vs bool)",
                            f": the model reads the 4D mask as {form}, the target handed it {own} (attention "
                            f"{self.attention!r}); pass mask_form={form!r}, load it with another "
                            "attn_implementation, or use its family target")
        L = 6
        ids = torch.tensor([[self._probe_token(i) for i in range(L)]], device=self.device)
        full = torch.ones((1, 1, L, L), dtype=torch.bool, device=self.device)
        arange = torch.arange(L, device=self.device)[None]
        base = self.forward(ids, full, arange)
        tol = self.check_tolerance() * (1.0 + base.double().nan_to_num(0.0, 0.0, 0.0).abs().max().item())
        base = base.double()
        if own != "none":
            alone = full.clone()
            alone[..., -1, :-1] = False  # the last token sees only itself
            hidden = self.forward(ids, alone, arange).double()
            if _gap(hidden[0, -1], base[0, -1]) <= tol:
                return ("mask ignored", ": hiding every other token from the last one left its logits unchanged; "
                        "the model does not apply the 4D attention mask it is given (LLaDA's code runs attention "
                        "without one: use its family target)")
        swapped = arange.clone()
        swapped[0, [1, L - 2]] = swapped[0, [L - 2, 1]]
        moved = self.forward(ids, full, swapped).double()
        if "position_ids" in self.model_kwargs(full, swapped) and _gap(moved, base) <= tol:
            return ("position ids ignored", ": swapping two tokens' position ids left every logit unchanged; the "
                    "model computes its own positions, so left padding shifts them (use the family target, which "
                    "never pads, or equal-length prompts)")
        if "NaN" in problem:
            return "non-finite logits", ""
        if "first position" in problem:
            return "causal block", ": the model attends causally inside the block (it ignores the 4D mask's " \
                "bidirectional block)"
        return "batch-dependent numerics", ": the mask and position ids take effect, so the model's numerics " \
            "depend on the other rows or positions of a call"

    def _probe_token(self, i: int) -> int:
        """The i-th token id used by the self-check: small ids, skipping the mask and end-of-sequence ids."""
        ids = [t for t in range(min(self.vocab_size, 16)) if t not in (self.mask_id, self.eos_id)]
        return ids[i % len(ids)]

    def _probe(self, prompts, block_size, node_sets) -> list[torch.Tensor]:
        session = self.session_class()(self, prompts, block_size, block_size)
        root = torch.full((len(prompts), 1, block_size), self.mask_id, dtype=torch.long, device=self.device)
        if self.layout == "block_causal":
            session.score(root)  # prefill, so every probe below reads the same cached prefix
        return [session.score(torch.stack(nodes)[None].expand(len(prompts), -1, -1)) for nodes in node_sets]


class _LeftPadded(Session):
    """Prompts left-padded to one width: `key_start` [b] is the first real token of each row. `backend`: the
    spot_kernels backend of the session's tree ops (`generate(backend=...)`; "cpu", which has none, covers them with
    the reference, as on the embedded target: `Kernels.tree_backend`)."""

    def __init__(self, target: HFTarget, prompts, max_new_tokens: int, block_size: int, *, backend: str = "auto"):
        self.target, self.batch, self.passes = target, len(prompts), 0
        self.tree_backend = Kernels(backend=backend).tree_backend
        self.block_size = block_size
        self.width = max((len(p) for p in prompts), default=0)
        ids = torch.full((self.batch, self.width), target.pad_id, dtype=torch.long)
        for i, p in enumerate(prompts):
            if len(p):
                ids[i, self.width - len(p):] = torch.as_tensor(p, dtype=torch.long)
        self.prompt_ids = ids.to(target.device)
        self.key_start = torch.tensor([self.width - len(p) for p in prompts], dtype=torch.long,
                                      device=target.device)


class BlockCausalSession(_LeftPadded):
    """Committed tokens in a KV cache; N copies of the current block per pass (module docstring)."""

    def __init__(self, target, prompts, max_new_tokens, block_size, *, backend: str = "auto"):
        super().__init__(target, prompts, max_new_tokens, block_size, backend=backend)
        self.pending = self.prompt_ids  # tokens that join the prefix in the next pass
        self.cache = target.new_cache()
        self.cache_len = 0

    @property
    def block_start(self) -> torch.Tensor:
        return self.cache_len + self.pending.shape[1] - self.key_start

    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        b, n, B = nodes.shape
        num_new = self.pending.shape[1]
        prefix_len = self.cache_len + num_new
        shape = dict(prefix_len=prefix_len, num_new=num_new, num_nodes=n, block_size=B)
        visible = spot_kernels.tree_mask(self.key_start, **shape, backend=self.tree_backend)
        positions = spot_kernels.tree_position_ids(self.key_start, **shape, backend=self.tree_backend)
        ids = torch.cat((self.pending, nodes.reshape(b, n * B)), dim=1)
        logits = self.target.forward(ids, visible, positions, cache=self.cache, keep=n * B)
        _crop(self.cache, prefix_len)  # the node copies' keys and values never stay in the cache
        self.cache_len, self.pending = prefix_len, self.pending[:, :0]
        self.passes += 1
        return logits.reshape(b, n, B, -1)

    def append(self, block: torch.Tensor) -> None:
        self.pending = torch.cat((self.pending, block.to(self.pending.device)), dim=1)


class BidirectionalSession(_LeftPadded):
    """No cache: N copies of the whole sequence per pass, as N batch rows (module docstring)."""

    def __init__(self, target, prompts, max_new_tokens, block_size, *, backend: str = "auto"):
        super().__init__(target, prompts, max_new_tokens, block_size, backend=backend)
        blocks = -(-max_new_tokens // block_size)
        masked = torch.full((self.batch, blocks * block_size), target.mask_id, dtype=torch.long,
                            device=target.device)
        self.ids = torch.cat((self.prompt_ids, masked), dim=1)  # [b, L]: prompt, committed and future blocks
        self.start_slot = self.width  # column of the current block's first token

    @property
    def block_start(self) -> torch.Tensor:
        return self.start_slot - self.key_start

    def score(self, nodes: torch.Tensor) -> torch.Tensor:
        b, n, B = nodes.shape
        L, s = self.ids.shape[1], self.start_slot
        if s + B > L:
            raise RuntimeError(f"session: block at {s} of {B} tokens runs past the sequence ({L})")
        ids = self.ids.repeat_interleave(n, dim=0)
        ids[:, s:s + B] = nodes.reshape(b * n, B)
        key_start = self.key_start.repeat_interleave(n)
        # Every token sees every real token of its row; the pads are hidden (and see the real tokens, so no
        # attention row is empty).
        index = torch.arange(L, device=ids.device)
        visible = (index[None, None, None, :] >= key_start[:, None, None, None]).expand(b * n, 1, L, L)
        positions = (index[None, :] - key_start[:, None]).clamp_min(0)
        first = s - self.target.logits_shift
        logits = self.target.forward(ids, visible, positions, keep=L - first)
        self.passes += 1
        return logits[:, :B].reshape(b, n, B, -1)

    def append(self, block: torch.Tensor) -> None:
        s = self.start_slot
        self.ids[:, s:s + block.shape[1]] = block.to(self.ids.device)
        self.start_slot = s + block.shape[1]


def coarsest(dtypes) -> torch.dtype:
    """The floating dtype of largest machine epsilon among `dtypes` (bfloat16 > float16 > float32 > float64)."""
    return max(dtypes, key=lambda d: torch.finfo(d).eps)


class _FloatDtypes(TorchDispatchMode):
    """Records the real dtype of every floating or complex tensor an operation returns, 0-dim tensors aside (a
    constant such as an epsilon does not set the precision of the tensors it meets: type promotion ignores it)."""

    def __init__(self):
        super().__init__()
        self.dtypes: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dim() > 0 and (t.is_floating_point() or t.is_complex()):
                self.dtypes.add(t.dtype.to_real())
        return out


def _non_finite(logits: torch.Tensor) -> bool:
    """NaN, +inf, or a position whose every logit is -inf (-inf on some ids is a model masking them)."""
    return bool(torch.isnan(logits).any() or torch.isposinf(logits).any()
                or torch.isneginf(logits).all(-1).any())


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b|, equal infinities counting as equal, NaN as infinitely far."""
    diff = torch.where(a == b, torch.zeros((), dtype=a.dtype, device=a.device), (a - b).abs())
    return float(diff.nan_to_num(math.inf).max())


def _crop(cache, length: int) -> None:
    """Cut a transformers cache back to `length` positions (a negative count: the form every version takes)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def _vocab_size(model) -> int:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if not isinstance(size, int):
        raise ValueError("model: cannot tell its vocabulary size (no output embeddings, no config.vocab_size)")
    return size


def _accepts(model, name: str) -> bool:
    import inspect
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------------------------ loading

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")  # safetensors only: nothing is unpickled
PICKLED_WEIGHT_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# config.json's shape fields, wherever a config holds them: whole numbers >= 1 (transformers divides by some, and
# HFTarget's memory estimates read them)
CONFIG_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "head_dim", "max_position_embeddings")


def is_hf_directory(path) -> bool:
    """A Hugging Face checkpoint directory (config.json), not an embedded-model one (target.json)."""
    from pathlib import Path
    path = Path(path)
    return (path / "config.json").is_file() and not (path / "target.json").is_file()


def checkpoint_config(directory) -> dict:
    """config.json of a checkpoint directory, after the checks that run before transformers sees the directory:
    config.json is a JSON object (spot.files' input-file rule: a regular file under a size cap, read without
    blocking) whose shape fields (CONFIG_SIZES), where present, are integers >= 1; every entry of the directory is
    a regular file or a folder (a symlink resolved: transformers would block on a FIFO or read a device); and every
    weights file the checkpoint names is safetensors, the files an index's weight_map names included, each inside
    the directory (nothing is unpickled: docs/design.md §7). Errors name the file (FileNotFoundError when there is
    no config.json or no weights, else ValueError)."""
    from pathlib import Path

    from .files import path_kind, read_json

    directory = Path(directory)
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"{directory}: no config.json, not a Hugging Face checkpoint directory")
    config = read_json(directory / "config.json")
    for name in CONFIG_SIZES:
        value = config.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{directory / 'config.json'}: field {name!r} must be an integer >= 1, got {value!r}")
    for entry in sorted(directory.iterdir()):
        kind = path_kind(entry)
        if kind not in (None, "regular file", "folder"):  # None: a dangling symlink, which transformers reports
            raise ValueError(f"{entry}: is a {kind}; a checkpoint directory holds regular files and folders only")
    if not any((directory / name).is_file() for name in WEIGHT_FILES):
        if any((directory / name).is_file() for name in PICKLED_WEIGHT_FILES):
            raise ValueError(f"{directory}: holds pickled weights only (pytorch_model.bin), which spot does not load "
                             "(unpickling can run code); convert them to safetensors (model.save_pretrained(dir) "
                             "in transformers writes model.safetensors)")
        raise FileNotFoundError(f"{directory}: no weights (expected one of {', '.join(WEIGHT_FILES)})")
    if (directory / WEIGHT_FILES[1]).is_file():
        _check_weight_index(directory, directory / WEIGHT_FILES[1])
    return config


def _check_weight_index(directory, index) -> None:
    """Every shard a safetensors index's weight_map names is a .safetensors file inside `directory` (transformers
    would hand a .bin shard to torch.load)."""
    from .files import read_json

    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index}: expected a non-empty 'weight_map' object (tensor name -> shard file)")
    root = directory.resolve()
    for shard in sorted(set(map(str, weight_map.values()))):
        path = (directory / shard).resolve()
        if not shard.endswith(".safetensors"):
            raise ValueError(f"{index}: weight_map names {shard!r}, not a .safetensors file; spot loads safetensors "
                             "only (a .bin shard is a pickle, and unpickling can run code)")
        if root not in path.parents:
            raise ValueError(f"{index}: weight_map names {shard!r}, outside {directory}")
        if not path.is_file():
            raise FileNotFoundError(f"{index}: weight_map names {shard!r}, which is not a file in {directory}")


def load_hf_target(directory, *, layout: str = "block_causal", mask_token: str | None = None,
                   mask_id: int | None = None, eos_id: int | None | str = "auto", dtype: torch.dtype = torch.float32,
                   device="cpu", trust_remote_code: bool = False, logits_shift: int = 0,
                   attn_implementation: str | None = "sdpa") -> HFTarget:
    """The generic `HFTarget(layout, logits_shift)` from a local checkpoint directory (config.json, weights,
    tokenizer files). Nothing is downloaded; remote code runs only with `trust_remote_code=True`.
    `spot.load_target(DIR)` gives a LLaDA, Dream, SDAR, LLaDA2 or BD3-LM checkpoint its family target instead
    (spot.families).

    The mask id is `mask_id`, else the tokenizer's id of `mask_token`, else the tokenizer's or config's mask token
    (LLaDA, Dream and SDAR checkpoints name one); eos_id "auto" takes the config's or tokenizer's (the first one
    when several are listed)."""
    model, tokenizer, mask_id, eos_id = load_hf_parts(directory, mask_token=mask_token, mask_id=mask_id,
                                                      eos_id=eos_id, dtype=dtype, device=device,
                                                      trust_remote_code=trust_remote_code,
                                                      attn_implementation=attn_implementation or "sdpa")
    return HFTarget(model, layout, mask_id=mask_id, eos_id=eos_id, tokenizer=tokenizer, logits_shift=logits_shift,
                    pad_id=_first(getattr(model.config, "pad_token_id", None)))


def load_hf_parts(directory, *, mask_token=None, mask_id=None, eos_id="auto", dtype=torch.float32, device="cpu",
                  trust_remote_code=False, attn_implementation=None, auto_model: bool = False,
                  model_options: dict | None = None):
    """(model, tokenizer or None, mask id, eos id) of a checkpoint directory (`load_hf_target`'s docstring says how
    the ids are found). auto_model: load with AutoModel (Dream), else AutoModelForCausalLM unless the config's
    auto_map maps only AutoModel (or AutoModelForMaskedLM and no AutoModelForCausalLM: BD3-LM);
    attn_implementation None: the model's own default; model_options: more from_pretrained keyword arguments."""
    from pathlib import Path

    directory = Path(directory)
    config = checkpoint_config(directory)
    try:
        import transformers
    except ImportError:
        raise ImportError("Hugging Face targets need transformers: pip install 'spot-kernels[hf]'") from None
    tokenizer = None
    if any((directory / name).is_file() for name in TOKENIZER_FILES):
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True,
                                                                   trust_remote_code=trust_remote_code)
        except Exception as e:  # noqa: BLE001 (named: _named_error)
            raise _named_error(f"{directory}: transformers cannot load its tokenizer files", e) from e
    options = dict(local_files_only=True, trust_remote_code=trust_remote_code, dtype=dtype, use_safetensors=True)
    if attn_implementation is not None:
        options["attn_implementation"] = attn_implementation
    auto_map = config.get("auto_map") or {}
    auto_map = auto_map if isinstance(auto_map, dict) else {}
    only_auto_model = trust_remote_code and "AutoModel" in auto_map and "AutoModelForCausalLM" not in auto_map
    masked_lm = trust_remote_code and "AutoModelForMaskedLM" in auto_map and "AutoModelForCausalLM" not in auto_map
    auto = transformers.AutoModel if auto_model or only_auto_model else transformers.AutoModelForCausalLM
    if masked_lm and not auto_model:
        auto = transformers.AutoModelForMaskedLM
    options.update(model_options or {})
    try:
        model = auto.from_pretrained(directory, **options).to(device)
    except Exception as e:  # noqa: BLE001 (transformers' and the checkpoint code's errors, named: _named_error)
        if type(e).__name__ in ("SafetensorError", "HeaderTooLarge", "HeaderTooSmall", "InvalidHeader") \
                or isinstance(e, (OSError, EOFError)):
            raise _named_error(f"{directory}: cannot read its weights", e) from e
        raise _named_error(f"{directory}: transformers cannot build the model from config.json and its weights",
                           e) from e
    config = model.config
    if mask_id is None and mask_token is not None:
        if tokenizer is None:
            raise ValueError(f"mask_token {mask_token!r}: {directory} has no tokenizer files; give mask_id instead")
        mask_id = tokenizer.convert_tokens_to_ids(mask_token)
        if mask_id is None or (mask_id == tokenizer.unk_token_id and mask_token != tokenizer.unk_token):
            raise ValueError(f"mask_token {mask_token!r} is not in the tokenizer's vocabulary")
    if mask_id is None:
        mask_id = _first(getattr(tokenizer, "mask_token_id", None))
        if mask_id is None:
            mask_id = _first(getattr(config, "mask_token_id", None))
    if mask_id is None:
        raise ValueError(f"{directory}: neither the tokenizer nor config.json names a mask token; pass mask_token= "
                         "(CLI: --mask-token) or mask_id= (CLI: --mask-id)")
    if eos_id == "auto":
        eos_id = _first(getattr(config, "eos_token_id", None))
        if eos_id is None and tokenizer is not None:
            eos_id = _first(tokenizer.eos_token_id)
    return model, tokenizer, int(mask_id), eos_id


# ------------------------------------------------------------------------------------------------ families

FAMILIES = ("llada", "dream", "sdar", "llada2", "bd3lm")
# Lower-cased markers of each family in model_type, architectures and auto_map, checked in this order ("llada2"
# before "llada"). The family targets are in spot.families; this module only names them.
_FAMILY_MARKERS = (("llada2", ("llada2",)), ("bd3lm", ("bd3lm",)), ("sdar", ("sdar",)), ("dream", ("dream",)),
                   ("llada", ("llada",)))


def family_of(config) -> str | None:
    """The family of a config (a dict from config.json or a transformers config object), or None: read from its
    model_type, architectures and auto_map, whatever JSON types those hold."""
    if not isinstance(config, dict):
        config = config.to_dict() if hasattr(config, "to_dict") else {}
    text = " ".join(_strings(config.get(key)) for key in ("model_type", "architectures", "auto_map")).lower()
    for family, markers in _FAMILY_MARKERS:
        if any(m in text for m in markers):
            return family
    return None


def _strings(value) -> str:
    """The text of a config value: a string, or the strings of a list or of a mapping's values."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return " ".join(_strings(v) for v in value)
    return value if isinstance(value, str) else ""


def _named_error(what: str, error: Exception) -> Exception:
    """What loading a checkpoint raised, as one line that starts with `what` (naming the directory) and gives the
    original's type and message (raise it `from` the original: --debug shows both). An ImportError stays one
    (a missing package of the checkpoint's code)."""
    message = " ".join(str(error).split())[:500] or "no message"
    kind = ImportError if isinstance(error, ImportError) else ValueError
    return kind(f"{what} ({type(error).__name__}: {message})")


def _first(value):
    """An id, or the first of a list of ids (configs list several end-of-sequence ids)."""
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value
