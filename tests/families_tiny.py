"""Stand-ins for the diffusion-LM families of spot.families, written for these tests (no family's code is copied):
tiny random transformers that re-derive what each family's modeling code does with its inputs, and each family's
own one-commit-per-step sampler. docs/integrations.md records how each was checked against the real code.

- LLaDA: forward(input_ids, attention_mask=None, ...) with no position_ids argument (passing one is a TypeError),
  no 4D mask (a RuntimeError), attention with no mask at all, positions 0..L-1.
- Dream (Fast-dLLM's copy): forward(input_ids, attention_mask=None, position_ids=None); attention_mask "full" or
  None means no mask, a 4D one is used as given; position_ids are taken and ignored (positions 0..L-1); the caller
  shifts the logits (position i is read at i - 1).
- SDAR: forward(..., past_key_values, **kwargs) with `store_kv` in kwargs: True appends the call's keys and values to
  the cache, False reads the cache and appends nothing; the 4D mask is read with `.bool()` (an additive 0 / -inf mask
  is therefore inverted).
- LLaDA2: forward(..., store_kv=None) (None stores); under sdpa no mask or a 2D all-ones mask means no mask (fully
  bidirectional: its attention is not causal), a 2D mask with zeros the token-causal padding mask transformers'
  converter builds, a 4D mask is used as given (bool, or additive floats); under eager no mask or a 2D one is
  token-causal, and a 4D mask is read as 1.0 = attend (transformers' 4D converter: (1 - mask) filled with the
  dtype's minimum where non-zero; a bool 4D mask is a NotImplementedError).
- BD3-LM: forward(input_ids, timesteps, sample_mode, store_kv) (the `BD3LM` docstring: block-causal attention in
  blocks of config.block_size from position 0, positions 0..L-1, its in-model `kv_cache` protocol, timesteps
  ignored without time conditioning, a float32 timestep embedding) and a config without num_hidden_layers.

Every stand-in but BD3-LM's puts -inf on the mask token's logit, as a trained checkpoint effectively does (BD3-LM's
sampler lowers it by 1e6 itself, which its family target reproduces).

This file is also the remote code of the checkpoint directories the loading tests write (config.json's auto_map
names its classes), so it imports nothing from the tests.
"""

import math

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast, MaskedLMOutput

VOCAB, MASK_ID, EOS_ID = 64, 63, 2
PROMPTS = [[5, 9, 14, 20], [7, 8, 10, 11, 12, 13, 40, 41], [3, 50, 60, 17, 11], [4, 6, 9, 30, 31, 32, 33, 34, 35, 36,
                                                                                  37]]


class TinyConfig(PretrainedConfig):
    model_type = "spot_tiny"

    def __init__(self, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, mask_token_id=None, eos_token_id=EOS_ID, suppressed_id=MASK_ID, **kwargs):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        self.num_attention_heads, self.intermediate_size = num_attention_heads, intermediate_size
        self.num_key_value_heads, self.head_dim = num_attention_heads, hidden_size // num_attention_heads
        self.mask_token_id, self.suppressed_id = mask_token_id, suppressed_id
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(eos_token_id=eos_token_id, **kwargs)


class LLaDAConfig(TinyConfig):
    model_type = "llada"

    def __init__(self, mask_token_id=MASK_ID, **kwargs):  # LLaDA's and Dream's configs name their mask token
        super().__init__(mask_token_id=mask_token_id, **kwargs)


class DreamConfig(TinyConfig):
    model_type = "Dream"

    def __init__(self, mask_token_id=MASK_ID, **kwargs):
        super().__init__(mask_token_id=mask_token_id, **kwargs)


class SDARConfig(TinyConfig):
    model_type = "sdar"

    def __init__(self, **kwargs):  # an __init__ of its own: transformers 5 generates one otherwise
        super().__init__(**kwargs)


class LLaDA2Config(TinyConfig):
    model_type = "llada2_moe"

    def __init__(self, **kwargs):  # an __init__ of its own: transformers 5 generates one otherwise
        super().__init__(**kwargs)


def _rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _rope(x, positions):
    """Rotate-half RoPE; x [b, h, q, d], positions [b, q]."""
    d = x.shape[-1]
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    angle = positions.to(torch.float64)[:, None, :, None] * inv  # [b, 1, q, d/2]
    cos, sin = torch.cat((angle, angle), -1).cos().to(x.dtype), torch.cat((angle, angle), -1).sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


def _cached(cache, layer: int):
    """(keys, values) a transformers cache holds for `layer`, or None (both transformers lines)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        if len(layers) > layer and getattr(layers[layer], "keys", None) is not None \
                and getattr(layers[layer], "is_initialized", True):
            return layers[layer].keys, layers[layer].values
        return None
    if len(cache) > layer:
        return cache[layer]
    return None


class TinyPreTrained(PreTrainedModel):
    config_class = TinyConfig
    base_model_prefix = "tiny"
    _supports_sdpa = True
    _tied_weights_keys = []

    def __init__(self, config):
        super().__init__(config)
        H, F, V = config.hidden_size, config.intermediate_size, config.vocab_size
        self.embed = nn.Embedding(V, H)
        self.layers = nn.ModuleList(nn.ModuleDict(dict(qkv=nn.Linear(H, 3 * H, bias=False),
                                                        o=nn.Linear(H, H, bias=False),
                                                        up=nn.Linear(H, F, bias=False),
                                                        down=nn.Linear(F, H, bias=False)))
                                    for _ in range(config.num_hidden_layers))
        self.lm_head = nn.Linear(H, V, bias=False)
        self.post_init()

    def _init_weights(self, module):
        pass  # `randomize` sets every weight

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.lm_head

    def randomize(self, seed: int = 0, head_scale: float = 4.0):
        """Random weights from `seed`; the LM head scaled so predictions are peaked (drafted trees are accepted)."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * 0.3)
            self.lm_head.weight.mul_(head_scale)
        return self

    def run(self, ids, mask=None, positions=None, cache=None, store=True, mask_kind="visible"):
        """Logits of one call. mask: None (no mask), or [b, 1, Q, K]: bool True = attend (mask_kind "visible") or
        float added to the scores (mask_kind "additive"). cache: a transformers cache; `store` appends this call's
        keys and values to it, else they are only read after the cached ones."""
        b, q = ids.shape
        cfg = self.config
        h_, d = cfg.num_attention_heads, cfg.head_dim
        if positions is None:
            start = cache.get_seq_length() if cache is not None else 0
            positions = torch.arange(start, start + q, device=ids.device)[None].expand(b, q)
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            qkv = layer["qkv"](_rms(x)).view(b, q, 3, h_, d).permute(2, 0, 3, 1, 4)
            qs, ks, vs = _rope(qkv[0], positions), _rope(qkv[1], positions), qkv[2]
            if cache is not None:
                if store:
                    ks, vs = cache.update(ks, vs, i)
                else:
                    held = _cached(cache, i)
                    if held is not None:
                        ks, vs = torch.cat((held[0], ks), -2), torch.cat((held[1], vs), -2)
            scores = qs @ ks.transpose(-1, -2) / math.sqrt(d)
            if mask is not None:
                scores = scores.masked_fill(~mask, -math.inf) if mask_kind == "visible" else scores + mask
            att = torch.softmax(scores, -1) @ vs
            x = x + layer["o"](att.transpose(1, 2).reshape(b, q, h_ * d))
            x = x + layer["down"](torch.nn.functional.silu(layer["up"](_rms(x))))
        logits = self.lm_head(_rms(x))
        logits[..., cfg.suppressed_id] = -math.inf
        return CausalLMOutputWithPast(logits=logits, past_key_values=cache)


class LLaDAModelLM(TinyPreTrained):
    config_class = LLaDAConfig

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None):
        if attention_mask is not None and attention_mask.dim() != 2:
            raise RuntimeError("LLaDA takes a 2D padding mask only")
        return self.run(input_ids)  # attention without a mask; positions 0..L-1


class DreamModel(TinyPreTrained):
    config_class = DreamConfig

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None):
        # Fast-dLLM's Dream computes its own positions 0..L-1 whatever position_ids says (its sampler passes them
        # only with padding, which spot's Dream target never uses)
        if isinstance(attention_mask, str) or attention_mask is None:  # "full": no mask
            return self.run(input_ids)
        if attention_mask.dim() != 4:
            raise RuntimeError("Dream takes 'full' or a 4D mask")
        kind = "visible" if attention_mask.dtype == torch.bool else "additive"
        return self.run(input_ids, attention_mask, mask_kind=kind)


class SDARForCausalLM(TinyPreTrained):
    config_class = SDARConfig

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                **kwargs):
        mask = attention_mask.bool() if attention_mask is not None else None  # 0 / -inf would read inverted
        if mask is not None and bool(mask.all()):
            mask = None
        return self.run(input_ids, mask, position_ids, past_key_values, store=bool(kwargs.get("store_kv", False)))


class LLaDA2MoeModelLM(TinyPreTrained):
    config_class = LLaDA2Config

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                store_kv=None):
        store = True if store_kv is None else store_kv
        eager = self.config._attn_implementation == "eager"
        mask, kind = None, "visible"
        if attention_mask is None or attention_mask.dim() == 2:
            # sdpa: no mask, or an all-ones 2D one, means no mask (its attention is not causal); eager, or a 2D mask
            # with zeros: transformers' token-causal (+ padding) mask
            if eager or (attention_mask is not None and not bool(attention_mask.bool().all())):
                q = input_ids.shape[1]
                mask = torch.ones(q, q, dtype=torch.bool, device=input_ids.device).tril()[None, None]
                if attention_mask is not None:
                    mask = mask & attention_mask.bool()[:, None, None, :]
        else:
            if eager:  # transformers' 4D converter: 1.0 attends, anything else gets the dtype's minimum
                if attention_mask.dtype == torch.bool:
                    raise NotImplementedError("eager LLaDA2 computes 1.0 - mask, which a bool tensor refuses")
                inverted = 1.0 - attention_mask.to(self.dtype)
                mask, kind = inverted.masked_fill(inverted.bool(), torch.finfo(self.dtype).min), "additive"
            elif attention_mask.dtype == torch.bool:
                mask = attention_mask
            else:
                mask, kind = attention_mask.to(self.dtype), "additive"
        return self.run(input_ids, mask, position_ids, past_key_values, store=store, mask_kind=kind)


class BD3LMConfig(PretrainedConfig):
    """BD3-LM's config names: no num_hidden_layers / hidden_size (hence the generic path's AttributeError)."""
    model_type = "bd3lm"

    def __init__(self, block_size=4, vocab_size=VOCAB, model_length=64, hidden_dim=32, cond_dim=16, n_blocks=2,
                 n_heads=4, cross_attn=True, adaln=True, attn_backend="sdpa", time_conditioning=False, **kwargs):
        self.block_size, self.vocab_size, self.model_length = block_size, vocab_size, model_length
        self.hidden_dim, self.cond_dim, self.n_blocks, self.n_heads = hidden_dim, cond_dim, n_blocks, n_heads
        self.cross_attn, self.adaln, self.attn_backend = cross_attn, adaln, attn_backend
        self.time_conditioning = time_conditioning
        super().__init__(**kwargs)


class BD3LMLayer(nn.Module):
    """One attention + MLP layer modulated by the conditioning vector; holds BD3-LM's in-model cache protocol:
    `kv_cache` [batch, model_length, 3 * dim] of un-rotated q/k/v (None: no cache) and `cache_idx`."""

    def __init__(self, dim, cond_dim):
        super().__init__()
        self.qkv, self.o = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.adaLN_modulation = nn.Linear(cond_dim, 2 * dim)
        self.kv_cache, self.cache_idx = None, 0


class BD3LMBackbone(nn.Module):
    def __init__(self, config):
        super().__init__()
        D, V = config.hidden_dim, config.vocab_size
        self.embed = nn.Parameter(torch.zeros(V, D))
        self.sigma_map = nn.Sequential(nn.Linear(16, config.cond_dim), nn.SiLU(), nn.Linear(config.cond_dim,
                                                                                          config.cond_dim))
        self.blocks = nn.ModuleList(BD3LMLayer(D, config.cond_dim) for _ in range(config.n_blocks))
        self.out = nn.Linear(D, V)


class BD3LM(PreTrainedModel):
    """BD3-LM's sampling forward (sample_mode=True). Without a cache: block-causal attention over blocks of
    config.block_size counted from position 0 (a token sees its own block and every earlier one), positions 0..L-1.
    With each layer's `kv_cache` set (`reset_kv_cache`): the call is one block, its q/k/v written at `cache_idx`, it
    attends to the cache up to its end with no mask, positions 0..cache_idx + B - 1; store_kv=True then advances
    `cache_idx` by a block. timesteps are zeroed unless config.time_conditioning; their sinusoidal embedding is
    computed in float32 whatever the model's dtype (so a float64 model needs its conditioning path in float32).
    The logits are finite: the mask token is not suppressed (BD3-LM's sampler does that)."""

    config_class = BD3LMConfig
    base_model_prefix = "bd3lm"
    _tied_weights_keys = []

    def __init__(self, config):
        super().__init__(config)
        self.backbone = BD3LMBackbone(config)
        self.post_init()

    def _init_weights(self, module):
        pass  # `randomize` sets every weight

    def randomize(self, seed: int = 0, head_scale: float = 4.0):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * 0.3)
            self.backbone.out.weight.mul_(head_scale)
        return self

    def reset_kv_cache(self, eval_batch_size=1):
        cfg = self.config
        for layer in self.backbone.blocks:
            layer.kv_cache = torch.zeros(eval_batch_size, cfg.model_length, 3 * cfg.hidden_dim, dtype=self.dtype)
            layer.cache_idx = 0

    def forward(self, input_ids=None, timesteps=None, sample_mode=None, store_kv=None, output_hidden_states=None,
                return_dict=None):
        if not sample_mode:
            raise NotImplementedError("this stand-in has BD3-LM's sampling forward only (sample_mode=True)")
        cfg, bb = self.config, self.backbone
        b, q = input_ids.shape
        H, D = cfg.n_heads, cfg.hidden_dim
        d = D // H
        sigma = timesteps if cfg.time_conditioning else torch.zeros_like(timesteps)
        freqs = torch.exp(-math.log(10000.0) * torch.arange(8, dtype=torch.float32) / 8)
        angle = sigma[:, None].float() * freqs[None]
        c = torch.nn.functional.silu(bb.sigma_map(torch.cat((angle.cos(), angle.sin()), -1)))  # float32 in
        cached = bb.blocks[0].kv_cache is not None
        if cached:
            if q != cfg.block_size:
                raise ValueError("with a KV cache the call is one block")
            start = bb.blocks[0].cache_idx
            positions = torch.arange(start + q)[None].expand(b, -1)
            visible = None
        else:
            positions = torch.arange(q)[None].expand(b, -1)
            block = torch.arange(q) // cfg.block_size
            visible = (block[None, :] <= block[:, None])[None, None]
        x = bb.embed[input_ids]
        for layer in bb.blocks:
            shift, scale = layer.adaLN_modulation(c)[:, None].chunk(2, -1)
            h = _rms(x) * (1 + scale) + shift
            qkv = layer.qkv(h)
            if cached:
                layer.kv_cache[:, layer.cache_idx:layer.cache_idx + q] = qkv
                qkv = layer.kv_cache[:, :layer.cache_idx + q].clone()
                if store_kv:
                    layer.cache_idx += q
            k_len = qkv.shape[1]
            qkv = qkv.view(b, k_len, 3, H, d).permute(2, 0, 3, 1, 4)
            qs, ks, vs = _rope(qkv[0], positions), _rope(qkv[1], positions), qkv[2]
            scores = qs @ ks.transpose(-1, -2) / math.sqrt(d)
            if visible is not None:
                scores = scores.masked_fill(~visible, -math.inf)
            att = (torch.softmax(scores, -1) @ vs).transpose(1, 2).reshape(b, k_len, D)[:, -q:]
            x = x + layer.o(att)
            x = x + layer.down(torch.nn.functional.gelu(layer.up(_rms(x))))
        logits = bb.out(_rms(x))
        return MaskedLMOutput(logits=logits) if return_dict is not False else logits


# ---------------------------------------------------------------------------------------------- own samplers
# Each family's own sampler at T = 0, one row: one commit per forward (what spot's `standard` is with rule "one"),
# and at the settings where one forward commits several positions (`steps`, `threshold`, and the samplers below:
# `standard` with the family's rule, docs/integrations.md). Confidences in float64; among equal confidences the lower
# position first, where the families' torch.topk leaves the order unspecified (float64 confidences do not tie here).


def _greedy(logits):
    probs = torch.softmax(logits.double(), -1)
    conf, token = probs.max(-1)
    return token, conf


def _most_confident(conf, m: int):
    """The m highest entries of conf (1-D, -inf where not eligible), ties to the lower index."""
    return torch.sort(conf, descending=True, stable=True).indices[:m]


def _split(total: int, steps: int) -> list[int]:
    """LLaDA's get_num_transfer_tokens (and SDAR's / LLaDA2's on block_length): total // steps per step, the
    remainder to the first steps."""
    return [total // steps + (i < total % steps) for i in range(steps)]


def llada_generate(model, prompt, gen_length: int, block_length: int, mask_id: int = MASK_ID,
                   steps: int | None = None):
    """LLaDA generate.py's low_confidence remasking with `steps` per block (default block_length: one commit per
    step; its `steps` argument is steps * gen_length / block_length): every step the whole sequence, the block's
    quota (its mask count split over the steps, the remainder to the first) of most confident masked positions of
    the current block committed; exactly `steps` forwards per block."""
    x = torch.tensor([prompt + [mask_id] * gen_length])
    P = len(prompt)
    for block in range(gen_length // block_length):
        lo, hi = P + block * block_length, P + (block + 1) * block_length
        for quota in _split(int((x[0, lo:hi] == mask_id).sum()), steps or block_length):
            token, conf = _greedy(model(x).logits[0])
            conf[:lo], conf[hi:] = -math.inf, -math.inf
            conf[x[0] != mask_id] = -math.inf
            at = _most_confident(conf, quota)
            x[0, at] = token[at]
    return x[0, P:].tolist()


def dream_generate(model, prompt, gen_length: int, mask_id: int = MASK_ID):
    """Dream's maskgit_plus with one commit per step (the whole generation one block), logits shifted right."""
    x = torch.tensor([prompt + [mask_id] * gen_length])
    for _ in range(gen_length):
        logits = model(x, "full").logits
        logits = torch.cat((logits[:, :1], logits[:, :-1]), 1)[0]
        token, conf = _greedy(logits)
        conf[x[0] != mask_id] = -math.inf
        pos = int(conf.argmax())
        x[0, pos] = token[pos]
    return x[0, len(prompt):].tolist()


def block_aligned_generate(model, prompt, gen_length: int, block_length: int, mask_id: int = MASK_ID,
                           cached: bool = True, steps: int | None = None, threshold: float | None = None):
    """SDAR's block generate (cached=True: whole prompt blocks prefilled with store_kv=True, each block denoised
    over the cache with store_kv=False, then stored) or LLaDA2's generate() (cached=False: the window up to the
    current block recomputed every step): blocks at absolute positions, a block-causal 4D mask, `steps` per block
    (default B: one commit per step). With `threshold` (SDAR's low_confidence_dynamic, LLaDA2's threshold < 1), step
    i commits every masked position whose confidence is > threshold when they are at least the step's quota
    (block_length split over `steps`), else the quota's most confident. SDAR's topk is not clamped to the masked
    count (it would then commit unmasked positions): that case is refused here; LLaDA2's clamps."""
    from transformers import DynamicCache

    B, P = block_length, len(prompt)
    n_blocks = -(-(P + gen_length) // B)
    x = torch.full((1, n_blocks * B), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    block_of = torch.arange(n_blocks * B) // B
    visible = (block_of[None, :] <= block_of[:, None])[None, None]
    positions = torch.arange(n_blocks * B)[None]
    cache = DynamicCache() if cached else None
    first = P // B
    if cached and first:
        model(x[:, :first * B], visible[..., :first * B, :first * B], positions[:, :first * B],
              past_key_values=cache, use_cache=True, store_kv=True)
    quotas = _split(B, steps or B)
    for k in range(first, n_blocks):
        lo, hi = k * B, (k + 1) * B
        for quota in quotas:
            masked = x[0, lo:hi] == mask_id
            if not bool(masked.any()):
                break
            if cached:
                logits = model(x[:, lo:hi], visible[..., lo:hi, :hi], positions[:, lo:hi], past_key_values=cache,
                               use_cache=True, store_kv=False).logits[0]
            else:
                logits = model(x[:, :hi], visible[..., :hi, :hi], positions[:, :hi]).logits[0, lo:]
            token, conf = _greedy(logits)
            conf[~masked] = -math.inf
            high = conf > (math.inf if threshold is None else threshold)
            if int(high.sum()) >= quota:
                at = high.nonzero()[:, 0]
            else:
                if cached and quota > int(masked.sum()):
                    raise ValueError("SDAR's unclamped topk would commit unmasked positions (steps < block_length)")
                at = _most_confident(conf, min(quota, int(masked.sum())))
            x[0, lo + at] = token[at]
        if cached:
            model(x[:, lo:hi], visible[..., lo:hi, :hi], positions[:, lo:hi], past_key_values=cache, use_cache=True,
                  store_kv=True)
    return x[0, P:P + gen_length].tolist()


def bd3lm_generate(model, prompt, gen_length: int, mask_id: int = MASK_ID):
    """One commit per forward, T = 0, on BD3-LM's sampling forward without a cache (its sampler's kv_cache=False
    path: the window up to the current block), blocks of config.block_size at absolute positions, the mask token's
    logit lowered by 1e6 (its sampler's parameterization), the most confident masked position committed."""
    B, P = model.config.block_size, len(prompt)
    n_blocks = -(-(P + gen_length) // B)
    x = torch.full((1, n_blocks * B), mask_id, dtype=torch.long)
    x[0, :P] = torch.tensor(prompt)
    for k in range(P // B, n_blocks):
        lo, hi = k * B, (k + 1) * B
        while bool((x[0, lo:hi] == mask_id).any()):
            with torch.no_grad():
                logits = model(input_ids=x[:, :hi], timesteps=torch.zeros(1), sample_mode=True).logits[0, lo:]
            logits[:, mask_id] -= 1e6
            token, conf = _greedy(logits)
            conf[x[0, lo:hi] != mask_id] = -math.inf
            pos = int(conf.argmax())
            x[0, lo + pos] = token[pos]
    return x[0, P:P + gen_length].tolist()


def fast_dllm_generate(model, prompt, gen_length: int, block_length: int, threshold: float | None = None,
                       factor: float | None = None, mask_id: int = MASK_ID):
    """Fast-dLLM's LLaDA generate (no cache) with `threshold` (the most confident masked position of the block and
    every one whose float64 confidence is >= threshold) or `factor` (get_transfer_index_dynamic: the sorted
    confidences pass while c(r) >= 1 - factor / (r + 2); the first failing rank r >= 1 is how many commit, all of
    them when none fails or only the last does). Forwards until the block has no mask."""
    x = torch.tensor([prompt + [mask_id] * gen_length])
    P = len(prompt)
    for block in range(gen_length // block_length):
        lo, hi = P + block * block_length, P + (block + 1) * block_length
        while bool((x[0, lo:hi] == mask_id).any()):
            token, conf = _greedy(model(x).logits[0])
            conf[:lo], conf[hi:] = -math.inf, -math.inf
            conf[x[0] != mask_id] = -math.inf
            n = int((x[0, lo:hi] == mask_id).sum())
            ranked = torch.sort(conf, descending=True, stable=True).values[:n]
            if factor is None:
                m = 1 + int((ranked[1:] >= threshold).sum())
            else:
                fails = [r for r in range(1, n) if ranked[r] < 1 - factor / (r + 2)]
                m = n if not fails or fails[0] == n - 1 else fails[0]
            at = _most_confident(conf, m)
            x[0, at] = token[at]
    return x[0, P:].tolist()


def dream_schedule_generate(model, prompt, gen_length: int, steps: int, alg: str = "maskgit_plus",
                            eps: float = 1e-3, mask_id: int = MASK_ID):
    """Dream's diffusion_generate (the whole generation one block, logits shifted right): float32 timesteps
    t = linspace(1, eps, steps + 1); step i commits int(n (1 - t[i+1] / t[i])) of the n masked positions (all of
    them at the last step), the most confident by `alg`: maskgit_plus the token's probability, entropy
    sum p log(p + 1e-10) (Dream's own form, 1e-10 inside the log). Exactly `steps` forwards."""
    x = torch.tensor([prompt + [mask_id] * gen_length])
    t = torch.linspace(1, eps, steps + 1)
    for i in range(steps):
        masked = x[0] == mask_id
        logits = model(x, "full").logits
        logits = torch.cat((logits[:, :1], logits[:, :-1]), 1)[0]
        probs = torch.softmax(logits, -1)
        conf, token = probs.max(-1)
        if alg == "entropy":
            conf = (probs * torch.log(probs + 1e-10)).sum(-1)
        conf[~masked] = -math.inf
        n = masked.sum().to(torch.float32)
        m = int(n * (1 - t[i + 1] / t[i])) if i < steps - 1 else int(n)
        at = _most_confident(conf, m)
        x[0, at] = token[at]
    return x[0, len(prompt):].tolist()


def bd3lm_float32_conditioning(m):
    """The stand-in's conditioning path (timestep MLP, adaLN) in float32, as its float32 timestep embedding needs."""
    m.backbone.sigma_map.float()
    for layer in m.backbone.blocks:
        layer.adaLN_modulation.float()
    return m


def model(family: str, seed: int = 0, attn: str = "sdpa", dtype=torch.float64, block_size: int = 4):
    """A tiny random stand-in of `family` ("llada", "dream", "sdar", "llada2", "bd3lm": of `block_size`; its
    conditioning path stays float32)."""
    if family == "bd3lm":
        m = BD3LM(BD3LMConfig(block_size=block_size)).to(dtype).randomize(seed).eval()
        return bd3lm_float32_conditioning(m) if dtype != torch.float32 else m
    cls, config = {"llada": (LLaDAModelLM, LLaDAConfig), "dream": (DreamModel, DreamConfig),
                   "sdar": (SDARForCausalLM, SDARConfig), "llada2": (LLaDA2MoeModelLM, LLaDA2Config)}[family]
    cfg = config()
    cfg._attn_implementation = attn
    return cls(cfg).to(dtype).randomize(seed).eval()


AUTO_MAP = {"llada": ("LLaDAConfig", "LLaDAModelLM", "AutoModelForCausalLM"),
            "dream": ("DreamConfig", "DreamModel", "AutoModel"),
            "sdar": ("SDARConfig", "SDARForCausalLM", "AutoModelForCausalLM"),
            "llada2": ("LLaDA2Config", "LLaDA2MoeModelLM", "AutoModelForCausalLM"),
            "bd3lm": ("BD3LMConfig", "BD3LM", "AutoModelForMaskedLM")}


def save_checkpoint(family: str, directory, seed: int = 0, **options):
    """A checkpoint directory laid out as the family ships it: config.json with its auto_map naming this file as
    the remote code, the code file beside it, safetensors weights."""
    import json
    import shutil
    from pathlib import Path

    directory = Path(directory)
    m = model(family, seed, **options)
    m.save_pretrained(directory, safe_serialization=True)
    shutil.copy(Path(__file__), directory / "families_tiny.py")
    config_name, model_name, auto = AUTO_MAP[family]
    cfg = json.loads((directory / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": f"families_tiny.{config_name}", auto: f"families_tiny.{model_name}"}
    cfg["architectures"] = [model_name]
    (directory / "config.json").write_text(json.dumps(cfg, indent=1))
    return directory
