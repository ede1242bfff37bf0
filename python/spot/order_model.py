"""The learned order drafter (docs/design.md §2.4): which masked position does the target commit next?

A 3-layer, d_model 128, 8-head bidirectional transformer over the B positions of a block (B <= 64). Each position
reads the target's stale outputs from its previous pass (the top-32 probabilities, the confidence of the sampled
token, whether the position was masked then) and the draft node's state (masked now, committed along the draft
path, where the leftmost masked position is, the tree depth). With `resampled=True` it also reads, per position,
the stale probability of the token that position would get if committed at the node's own step: at T > 0 the
target's commit depends on that step's coupled noise (docs/design.md §2.3), which is known in advance. It returns one
logit per position; only positions masked in the node are eligible (`spot_kernels.select_children` masks the
others out).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

import spot_kernels
from spot_kernels.ops.order_logits import weight_layout

from .drafters import StaleFeatures, resampled_confidence  # (re-exported: the drafter and the lab read it here)
from .limits import size
from .loading import WEIGHTS_DIR, check_config_fields, load_checked_state, load_weights, save_weights


@dataclass
class OrderModelConfig:
    d_model: int = 128
    n_layers: int = 3
    n_heads: int = 8
    d_ff: int = 512
    top_k: int = 32  # stale top-K probabilities read per position
    max_block: int = 64
    max_depth: int = 16  # deeper nodes share the last depth embedding
    resampled: bool = False  # also read resampled_confidence at the node's step
    token_buckets: int = 0  # > 0: also read an embedding of each position's stale top-1 token id
    token_dim: int = 32
    vocab_size: int = 0  # the vocabulary the token buckets were trained on (0: not recorded)

    @property
    def n_features(self) -> int:
        return 2 * self.top_k + 6 + 2 * self.resampled


def order_features(topk_probs, confidence, stale_masked, node_masked, k: int, resampled=None) -> torch.Tensor:
    """Per-position input features [N, B, 2k + 6 (+ 2 with `resampled`)] (float32). All inputs [N, B, ...]:
    the `stale_features` columns, then the `node_features` columns."""
    return torch.cat((stale_features(topk_probs, confidence, stale_masked, k),
                      node_features(stale_masked, node_masked, resampled)), -1)


def stale_features(topk_probs, confidence, stale_masked, k: int) -> torch.Tensor:
    """The feature columns that depend on the stale pass alone [N, B, 2k + 3] (float32): the same for every node
    drafted from it, so a decoder computes them once per pass."""
    p = topk_probs[..., :k].float().nan_to_num(0.0).clamp(0, 1)
    if p.shape[-1] < k:  # a vocabulary smaller than k
        p = F.pad(p, (0, k - p.shape[-1]))
    conf = confidence.float().nan_to_num(0.0, 0.0, 0.0)
    return torch.cat([p, p.clamp_min(1e-6).log() / 14.0, conf[..., None], conf.clamp_min(1e-6).log()[..., None] / 14.0,
                      stale_masked.float()[..., None]], -1)


def node_features(stale_masked, node_masked, resampled=None) -> torch.Tensor:
    """The feature columns of a draft node [N, B, 3 (+ 2 with `resampled`)] (float32)."""
    just_committed = stale_masked & ~node_masked  # committed along the draft path, after the stale pass
    frac_masked = node_masked.float().mean(-1, keepdim=True).expand(node_masked.shape)
    cols = [node_masked.float()[..., None], just_committed.float()[..., None], frac_masked[..., None]]
    if resampled is not None:
        r = resampled.float().nan_to_num(0.0).clamp(0, 1)
        cols += [r[..., None], r.clamp_min(1e-6).log()[..., None] / 14.0]
    return torch.cat(cols, -1)


class _Layer(nn.Module):
    def __init__(self, cfg: OrderModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))

    def forward(self, x):
        n, B, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, B, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)  # bidirectional over the block
        x = x + self.out(a.transpose(1, 2).reshape(n, B, d))
        return x + self.ff(self.norm2(x))


def check_order_size(cfg: OrderModelConfig, where: str = "OrderModelConfig") -> None:
    """The float32 bytes of an order model's weights, estimated from its config and refused above
    SPOT_MEMORY_LIMIT_GB before any is allocated (the same estimate check as a target's, spot.limits.size)."""
    d = cfg.d_model
    per_layer = 4 * d * d + 2 * d * cfg.d_ff + cfg.d_ff + 9 * d
    embeddings = (3 * cfg.max_block + cfg.max_depth) * d + cfg.token_buckets * cfg.token_dim + cfg.token_dim * d
    size(f"{where}: config fields 'n_layers' ({cfg.n_layers}), 'd_model' ({d}), 'd_ff' ({cfg.d_ff}), 'max_block' "
         f"({cfg.max_block}), 'max_depth' ({cfg.max_depth}), 'token_buckets' ({cfg.token_buckets}) give weights of",
         4 * (cfg.n_features * d + cfg.n_layers * per_layer + embeddings))


class OrderModel(nn.Module):
    def __init__(self, cfg: OrderModelConfig | None = None):
        super().__init__()
        self.cfg = cfg = cfg or OrderModelConfig()
        check_order_size(cfg)
        self.inp = nn.Linear(cfg.n_features, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_block, cfg.d_model)
        # position relative to the node's leftmost masked position, in [-max_block, max_block)
        self.rel = nn.Embedding(2 * cfg.max_block, cfg.d_model)
        self.depth = nn.Embedding(cfg.max_depth, cfg.d_model)
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, 1)
        if cfg.token_buckets:
            self.tok = nn.Embedding(cfg.token_buckets, cfg.token_dim)
            self.tok_proj = nn.Linear(cfg.token_dim, cfg.d_model, bias=False)

    def forward(self, topk_probs, confidence, stale_masked, node_masked, depth, resampled=None,
                top_ids=None) -> torch.Tensor:
        """topk_probs [N, B, >=K]; confidence [N, B]; stale_masked, node_masked bool [N, B]; depth int64 [N];
        resampled [N, B] (`resampled_confidence` at each node's step; read only when cfg.resampled); top_ids int
        [N, B] (the stale top-1 token id, -1 = none; read only when cfg.token_buckets)
        -> logits [N, B] (float32; -inf where the node is not masked)."""
        return self.forward_nodes(self.stale_inputs(topk_probs, confidence, stale_masked, top_ids), node_masked,
                                  depth, resampled)

    def stale_inputs(self, topk_probs, confidence, stale_masked, top_ids=None) -> "StaleInputs":
        """What `forward` reads of the stale pass alone (features and token embeddings), per row [N, B, ...]:
        computed once per pass and shared by every depth of a tree (`forward_nodes` gathers the rows)."""
        if self.cfg.token_buckets and top_ids is None:
            raise ValueError("this order model reads `top_ids` (the stale top-1 token id of each position)")
        tok = None
        if self.cfg.token_buckets:  # bucket 0 = no token, ids past the buckets share the last one
            tok = self.tok((top_ids.long() + 1).clamp(0, self.cfg.token_buckets - 1))
        return StaleInputs(stale_features(topk_probs, confidence, stale_masked, self.cfg.top_k), stale_masked, tok)

    def forward_nodes(self, stale: "StaleInputs", node_masked, depth, resampled=None, node_row=None) -> torch.Tensor:
        """`forward` from `stale_inputs`: node i reads row node_row[i] of `stale` (default: row i). The same
        operations on the same values as `forward`, so the same logits bit for bit."""
        n, B = node_masked.shape
        if B > self.cfg.max_block:
            raise ValueError(f"block size {B} exceeds the drafter's max_block {self.cfg.max_block}")
        if self.cfg.resampled and resampled is None:
            raise ValueError("this order model reads `resampled` (resampled_confidence at the node's step)")
        if node_row is not None:
            stale = StaleInputs(*(None if t is None else t[node_row] for t in stale))
        feats = torch.cat((stale.features, node_features(stale.masked, node_masked,
                                                         resampled if self.cfg.resampled else None)), -1)
        x = self.inp(feats)
        j = torch.arange(B, device=x.device)
        first = torch.where(node_masked.any(1), node_masked.to(torch.int8).argmax(1), B)
        rel = (j[None] - first[:, None]).clamp(-self.cfg.max_block, self.cfg.max_block - 1) + self.cfg.max_block
        x = x + self.pos(j)[None] + self.rel(rel) + self.depth(depth.clamp(0, self.cfg.max_depth - 1))[:, None]
        if self.cfg.token_buckets:
            x = x + self.tok_proj(stale.tokens)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x)).squeeze(-1)
        return logits.masked_fill(~node_masked, float("-inf"))


def pack_order_weights(model: OrderModel) -> torch.Tensor:
    """The model's weights as one flat float32 tensor on its device, in `spot_kernels.ops.order_logits.weight_layout`
    order: what `spot_kernels.order_logits` reads (built once per drafter, see `LearnedDrafter`)."""
    cfg = model.cfg
    layout = weight_layout(cfg.n_features, cfg.d_model, cfg.n_layers, cfg.d_ff, cfg.max_block, cfg.max_depth,
                           cfg.token_dim if cfg.token_buckets else 0)
    state = model.state_dict()
    return torch.cat([state[name].detach().float().reshape(-1) for name, _ in layout])


class StaleInputs(NamedTuple):
    """`OrderModel.stale_inputs`: per row [N, B, ...]."""

    features: torch.Tensor  # float32 [N, B, 2k + 3], `stale_features`
    masked: torch.Tensor  # bool [N, B], masked in the stale pass
    tokens: torch.Tensor | None  # float32 [N, B, token_dim], the stale top-1 token embedding (token_buckets > 0)


class LearnedDrafter:
    """The `Drafter` backed by an `OrderModel` (method="spot").

    A tree calls `position_logits` once per depth with the same `StaleFeatures`: what depends on them alone (the
    stale feature columns, token embeddings and, per sequence and depth, the resampled probabilities) is computed
    once per pass and per sequence, not once per frontier node and depth; each depth's forward is then one op,
    `spot_kernels.order_logits`, on weights packed once (`pack_order_weights`)."""

    def __init__(self, model: OrderModel, sharpness: float | dict = 1.0, branch: int | None = None,
                 backend: str = "auto"):
        """sharpness: `position_logits` returns the model's logits times this: one number, or {"greedy": g,
        "sampling": s} for T = 0 and T > 0 apart. A tree ranks its nodes by the product of their drafted
        probabilities along the path, as if the drafter's errors at successive depths were independent; they are
        not (a block it reads well at depth 0 it tends to read well deeper down), so a sharper distribution (> 1)
        grows deeper chains along its first choices and fewer siblings. Which value is best is measured: the shipped
        drafter's (`tree_sharpness` in its drafter.json) came from held-out prompts (docs/drafter.md).
        branch: the children per frontier node its trees draft when `generate` is given none (None: the decoder's
        default, spot.tree.BRANCH; `tree_branch` in drafter.json).
        backend: the spot_kernels backend of its ops (`order_logits`, `select_children` for the resampled inputs);
        "auto" honours SPOT_BACKEND."""
        self.model = model.eval()
        self.branch = _positive_int("branch", branch)
        self.sharpness = _sharpness("sharpness", sharpness)
        self._stale = self._inputs = None  # the StaleFeatures last seen and what was computed from them
        self._weights = self._weights_key = None  # pack_order_weights(model), and the parameters it was built from
        self._resampled = None  # float32 resampled_confidence of the pass's rows (_resampled_by_depth)
        self._modules = None  # the model's modules, listed once per pass (position_logits)
        self.backend = backend
        if self._per_pass():
            self._pack_weights()

    @property
    def device(self):
        return self.model.head.weight.device

    @property
    def max_block(self) -> int:
        """The largest block this drafter reads (its model's max_block)."""
        return self.model.cfg.max_block

    @property
    def token_vocab(self) -> int | None:
        """The vocabulary whose token ids it reads (a model trained with token buckets), else None."""
        return self.model.cfg.vocab_size if self.model.cfg.token_buckets else None

    # `position_logits` takes `depths`, a bound on the depths of the pass's tree (the `Drafter` protocol)
    takes_depths = True

    @torch.no_grad()
    def position_logits(self, stale: StaleFeatures, node_masked, node_row, depth, *, depths: int | None = None):
        """The `Drafter` protocol's position logits. depths: every call with these `stale` features (one pass's
        tree) has depth < depths (the CPU path knows it on the host): at T > 0 the per-pass resampled inputs are
        computed for those depths only. None: every depth a block allows (B; the static round)."""
        dev, cfg = self.device, self.model.cfg
        node_row_d, depth_d = node_row.to(dev), depth.to(dev)
        if cfg.resampled and stale.noise is None:
            raise ValueError("this drafter reads the coupled noise: StaleFeatures.noise is not set")
        new_pass = stale is not self._stale
        if new_pass:  # the model's modules, listed once per pass: `_per_pass` reads their hooks at every call
            self._modules = tuple(self.model.modules())
        if not self._per_pass(self._modules):
            resampled = None
            if cfg.resampled:
                noise, r = stale.noise, node_row_d
                resampled = resampled_confidence(stale.topk_probs.to(dev)[r], stale.topk_ids.to(dev)[r], noise.seed,
                                                 noise.rows.to(dev)[r], stale.block_start.to(dev)[r],
                                                 noise.root_step.to(dev)[r] + depth_d, noise.temperature,
                                                 backend=self.backend)
            top_ids = stale.topk_ids[node_row, :, 0].to(dev) if cfg.token_buckets else None
            logits = self.model(stale.topk_probs[node_row].to(dev), stale.confidence[node_row].to(dev),
                                stale.masked[node_row].to(dev), node_masked.to(dev), depth_d, resampled, top_ids)
            return self._sharpened(logits, stale).to(node_masked.device)
        n_depths = stale.masked.shape[1] if depths is None else max(1, min(int(depths), stale.masked.shape[1]))
        if new_pass:  # a new pass (StaleFeatures are never modified): its inputs, once per sequence
            top_ids = stale.topk_ids[:, :, 0].to(dev) if cfg.token_buckets else None
            self._inputs = self.model.stale_inputs(stale.topk_probs.to(dev), stale.confidence.to(dev),
                                                   stale.masked.to(dev), top_ids)
            self._resampled = None
            self._stale = stale
            self._pack_weights()
        if cfg.resampled and (self._resampled is None or self._resampled.dim() == 3
                              and self._resampled.shape[1] < n_depths):
            self._resampled = _resampled_by_depth(stale, dev, self.backend, n_depths)
        inputs = self._inputs
        # the whole forward in one op (spot_kernels.order_logits: the same operations as OrderModel.forward_nodes),
        # reading the per-pass resampled inputs (T = 0: per row [R, B]; T > 0: per row and depth [R, D, B]) at each
        # node's row and depth, the sharpness multiply folded in
        logits = spot_kernels.order_logits(
            inputs.features, inputs.masked, inputs.tokens, node_row_d, node_masked.to(dev), depth_d, self._resampled,
            self._weights, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff, cfg.max_block, cfg.max_depth,
            float(self._sharpness_of(stale)), backend=self.backend)
        return logits.to(node_masked.device)

    def _per_pass(self, modules=None) -> bool:
        """Whether the per-pass path (stale inputs once per pass, the fused op per depth) computes what the model
        would: a plain float32 OrderModel whose modules (`modules`, default all of them) carry no hooks (a hook,
        such as OnlineCalibrated's hidden-state one, must see the modules run, so such a model is called as a
        module, per node)."""
        m = self.model
        if not isinstance(m, OrderModel) or type(m).forward is not OrderModel.forward:
            return False
        if nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks:
            return False
        return m.head.weight.dtype == torch.float32 and not any(
            mod._forward_hooks or mod._forward_pre_hooks for mod in (m.modules() if modules is None else modules))

    def _pack_weights(self) -> None:
        """The packed weights of `spot_kernels.order_logits`, rebuilt only when a parameter changed (its storage
        or its in-place version counter). Under torch.compile the weights packed eagerly (at the latest at
        construction) are used: a compiled round does not follow a model trained meanwhile."""
        if torch.compiler.is_compiling() and self._weights is not None:
            return
        modules = self._modules if self._modules is not None else tuple(self.model.modules())
        key = tuple((p.data_ptr(), p._version) for mod in modules for p in mod._parameters.values() if p is not None)
        if key != self._weights_key:
            self._weights, self._weights_key = pack_order_weights(self.model), key

    def sharpness_at(self, temperature: float) -> float:
        """The factor applied when decoding at `temperature` (greedy at 0, sampling above)."""
        return self.sharpness["sampling" if temperature > 0 else "greedy"]

    def _sharpness_of(self, stale: StaleFeatures) -> float:
        return self.sharpness_at(stale.noise.temperature if stale.noise is not None else 0.0)

    def _sharpened(self, logits: torch.Tensor, stale: StaleFeatures) -> torch.Tensor:
        factor = self._sharpness_of(stale)
        return logits if factor == 1 else logits * factor


def _resampled_by_depth(stale: StaleFeatures, device, backend: str, depths: int | None = None) -> torch.Tensor:
    """`resampled_confidence` of every row of a pass (float32, on `device`), once per pass: at T = 0 it is the same at
    every depth, [R, B]; at T > 0 it depends on the step, root_step + depth, so [R, D, B] for depths 0 .. D - 1,
    D = `depths` (None: B, as deep as a tree can grow in a block), one select_children call for them all. Row by
    row the same values as the per-node call."""
    noise = stale.noise
    probs, ids = stale.topk_probs.to(device), stale.topk_ids.to(device)
    if noise.temperature == 0:
        return resampled_confidence(probs, ids, noise.seed, noise.rows, stale.block_start, noise.root_step, 0.0,
                                    backend=backend).float()
    n, B, K = probs.shape
    D = B if depths is None else depths
    steps = (noise.root_step.to(device)[:, None] + torch.arange(D, device=device)).reshape(-1)

    def per_depth(x):  # [R, ...] -> [R * D, ...], row r's copy for depth d at r * D + d
        return x.to(device)[:, None].expand(n, D, *x.shape[1:]).reshape(n * D, *x.shape[1:])

    out = resampled_confidence(per_depth(probs), per_depth(ids), noise.seed, per_depth(noise.rows),
                               per_depth(stale.block_start), steps, noise.temperature, backend=backend)
    return out.float().view(n, D, B)


def with_resampled_inputs(model: OrderModel) -> OrderModel:
    """A copy of `model` that also reads `resampled`, computing exactly what `model` computes until trained (the
    new input columns start at zero weight)."""
    if model.cfg.resampled:
        return model
    wide = OrderModel(replace(model.cfg, resampled=True))
    state = dict(model.state_dict())
    w = state["inp.weight"]
    state["inp.weight"] = torch.cat([w, w.new_zeros(w.shape[0], wide.cfg.n_features - w.shape[1])], 1)
    wide.load_state_dict(state)
    return wide.train(model.training)


def with_token_inputs(model: OrderModel, buckets: int = 1024) -> OrderModel:
    """A copy of `model` that also reads the stale top-1 token ids, computing exactly what `model` computes until
    trained (the embedding's projection starts at zero)."""
    if model.cfg.token_buckets:
        return model
    wide = OrderModel(replace(model.cfg, token_buckets=buckets))
    nn.init.zeros_(wide.tok_proj.weight)
    missing, unexpected = wide.load_state_dict(model.state_dict(), strict=False)
    assert set(missing) == {"tok.weight", "tok_proj.weight"} and not unexpected
    return wide.train(model.training)


def without_token_inputs(model: OrderModel, bucket_weights: torch.Tensor | None = None) -> OrderModel:
    """A copy of `model` that reads no token ids (a portable drafter, for any vocabulary): the token embedding is
    dropped and its average contribution, over the buckets weighted by `bucket_weights` [token_buckets] (how often
    each bucket is some position's stale top-1; uniform if None), folded into the input projection's bias."""
    if not model.cfg.token_buckets:
        return model
    narrow = OrderModel(replace(model.cfg, token_buckets=0, vocab_size=0))
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("tok")}
    with torch.no_grad():
        w = torch.ones(model.cfg.token_buckets) if bucket_weights is None else bucket_weights.float()
        if w.shape != (model.cfg.token_buckets,) or not bool((w >= 0).all()) or float(w.sum()) <= 0:
            raise ValueError(f"bucket_weights: expected {model.cfg.token_buckets} non-negative weights, not all zero")
        mean = (w / w.sum()) @ model.tok_proj(model.tok.weight)  # [d_model]
        state["inp.bias"] = state["inp.bias"] + mean
    narrow.load_state_dict(state)
    return narrow.train(model.training)


def token_bucket_counts(top_ids: torch.Tensor, buckets: int) -> torch.Tensor:
    """How often each token bucket occurs among stale top-1 ids `top_ids` (any shape; -1 = none), as
    `OrderModel.forward` buckets them."""
    return torch.bincount((top_ids.long().flatten() + 1).clamp(0, buckets - 1), minlength=buckets).float()


def save_order_model(model: OrderModel, directory, name: str = "drafter", extra: dict | None = None) -> None:
    save_weights(model, directory, name, {"config": asdict(model.cfg), **(extra or {})})


def check_order_config(meta, path) -> OrderModelConfig:
    """A drafter's saved config, checked at load time: every field present with its type, sizes positive, heads
    dividing d_model (errors name `path` and the field)."""
    cfg = OrderModelConfig(**check_config_fields(meta, OrderModelConfig, path, optional=("vocab_size",)))
    for name in ("d_model", "n_layers", "n_heads", "d_ff", "top_k", "max_block", "max_depth", "token_dim"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{path}: config field {name!r} must be >= 1, got {getattr(cfg, name)}")
    if cfg.token_buckets < 0:
        raise ValueError(f"{path}: config field 'token_buckets' must be >= 0, got {cfg.token_buckets}")
    if cfg.d_model % cfg.n_heads:
        raise ValueError(f"{path}: config field 'n_heads' ({cfg.n_heads}) must divide d_model ({cfg.d_model})")
    check_order_size(cfg, str(path))
    return cfg


# the drafters shipped in the package, by name: "default" (trained for the default target) and "causal" (for the
# "causal" target) read token ids (the embedded targets' vocabulary only), "portable" reads none (any target with
# blocks up to 64)
SHIPPED_DRAFTERS = {"default": WEIGHTS_DIR, "causal": WEIGHTS_DIR / "causal", "portable": WEIGHTS_DIR / "portable"}


def drafter_directory(name) -> Path:
    """The folder of drafter `name`: a shipped one ("default", "causal", "portable") or a directory path."""
    return SHIPPED_DRAFTERS.get(str(name), Path(name))


def load_learned_drafter(directory=WEIGHTS_DIR, name: str = "drafter") -> LearnedDrafter:
    """The `LearnedDrafter` of a drafter directory: its model (`load_order_model`) and the optional
    `tree_sharpness` (default 1) and `tree_branch` (default: the decoder's) of its drafter.json."""
    model, meta = _load_order_model(directory, name)
    where = f"{Path(directory) / name}.json"
    sharpness = _sharpness(f"{where}: tree_sharpness", meta.get("tree_sharpness", 1.0))
    return LearnedDrafter(model, sharpness, _positive_int(f"{where}: tree_branch", meta.get("tree_branch")))


def _positive_int(name: str, value) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    return value


def _sharpness(name: str, value) -> dict[str, float]:
    """A drafter's sharpness as {"greedy": g, "sampling": s}, each a finite number > 0."""
    if not isinstance(value, dict):
        value = {"greedy": value, "sampling": value}
    if set(value) != {"greedy", "sampling"}:
        raise ValueError(f"{name}: expected a number or {{'greedy': g, 'sampling': s}}, got keys {sorted(value)}")
    for v in value.values():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ValueError(f"{name}: expected finite numbers > 0, got {value!r}")
    return {k: float(v) for k, v in value.items()}


def load_order_model(directory=WEIGHTS_DIR, name: str = "drafter") -> OrderModel:
    """The drafter saved by `save_order_model`, its config and weights checked at load time."""
    return _load_order_model(directory, name)[0]


def _load_order_model(directory, name: str) -> tuple[OrderModel, dict]:
    """`load_order_model`, and the saved metadata it was built from (drafter.json, read once)."""
    directory = Path(directory)
    state, meta = load_weights(directory, name)
    if "config" not in meta:
        raise ValueError(f"{directory / (name + '.json')}: lacks the drafter's 'config'")
    model = OrderModel(check_order_config(meta["config"], directory / f"{name}.json"))
    load_checked_state(model, state, directory / f"{name}.safetensors")
    return model.eval(), meta
