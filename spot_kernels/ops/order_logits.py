"""spot::order_logits: the learned order drafter's whole forward for N draft nodes in one op (docs/ops.md,
"Order drafter forward"); the packed weight layout, schema, wrapper, check and fake.

The drafter (spot.order_model.OrderModel, docs/design.md §2.4) is a small bidirectional transformer over the B
positions of a block. Eagerly it is about 100 dispatched ops per call, once per tree depth; this op is one. Its
weights travel as one flat float32 tensor in the order `weight_layout` lists (built once per drafter by
`spot.order_model.pack_order_weights`), its sizes as int arguments.
"""

from __future__ import annotations

import functools
import types

import torch

from .. import checks
from ..opdef import OpDef, call

SCHEMA = ('order_logits(Tensor features, Tensor stale_masked, Tensor? tokens, Tensor node_row, Tensor node_masked, '
          'Tensor depth, Tensor? resampled, Tensor weights, int d_model, int n_layers, int n_heads, int d_ff, '
          'int max_block, int max_depth, float scale=1., str backend="auto") -> Tensor')

# The stale feature columns come first, then 3 node columns (masked now, committed along the draft path, the
# fraction masked), then 2 with `resampled` (its clamped value and log).
NODE_COLUMNS = 3
RESAMPLED_COLUMNS = 2


def weight_layout(n_inputs: int, d_model: int, n_layers: int, d_ff: int, max_block: int, max_depth: int,
                  token_dim: int = 0) -> list[tuple[str, tuple[int, ...]]]:
    """The packed weights, in order: (name, shape) of each piece, each stored row-major, back to back.
    n_inputs: the input projection's columns (stale features + node columns); token_dim: 0 without tokens.
    Names follow spot.order_model.OrderModel's state dict (`layers.{i}.ff.0` is the first FF linear)."""
    d = d_model
    layout = [("inp.weight", (d, n_inputs)), ("inp.bias", (d,)), ("pos.weight", (max_block, d)),
              ("rel.weight", (2 * max_block, d)), ("depth.weight", (max_depth, d))]
    if token_dim:
        layout.append(("tok_proj.weight", (d, token_dim)))
    for i in range(n_layers):
        p = f"layers.{i}."
        layout += [(p + "norm1.weight", (d,)), (p + "norm1.bias", (d,)), (p + "qkv.weight", (3 * d, d)),
                   (p + "qkv.bias", (3 * d,)), (p + "out.weight", (d, d)), (p + "out.bias", (d,)),
                   (p + "norm2.weight", (d,)), (p + "norm2.bias", (d,)), (p + "ff.0.weight", (d_ff, d)),
                   (p + "ff.0.bias", (d_ff,)), (p + "ff.2.weight", (d, d_ff)), (p + "ff.2.bias", (d,))]
    return layout + [("norm.weight", (d,)), ("norm.bias", (d,)), ("head.weight", (1, d)), ("head.bias", (1,))]


def weight_count(layout) -> int:
    return sum(_numel(shape) for _, shape in layout)


@functools.cache
def weight_offsets(n_inputs: int, d_model: int, n_layers: int, d_ff: int, max_block: int, max_depth: int,
                   token_dim: int = 0) -> types.MappingProxyType:
    """Where each piece of `weight_layout` starts in the packed weights, and "end": their total. Cached, read-only:
    the check and the Triton launch ask once per call, and building the layout costs about as much as a small op."""
    at, start = 0, {}
    for name, shape in weight_layout(n_inputs, d_model, n_layers, d_ff, max_block, max_depth, token_dim):
        start[name] = at
        at += _numel(shape)
    return types.MappingProxyType({**start, "end": at})


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def order_logits(features: torch.Tensor, stale_masked: torch.Tensor, tokens: torch.Tensor | None,
                 node_row: torch.Tensor, node_masked: torch.Tensor, depth: torch.Tensor,
                 resampled: torch.Tensor | None, weights: torch.Tensor, d_model: int, n_layers: int, n_heads: int,
                 d_ff: int, max_block: int, max_depth: int, scale: float = 1.0, backend: str = "auto") -> torch.Tensor:
    """The order drafter's logits of N draft nodes, each reading one row of a pass's stale inputs.

    Args:
        features: [R, B, S] float32, the stale feature columns of R rows (spot.order_model.stale_features).
        stale_masked: [R, B] bool, masked in the stale pass.
        tokens: [R, B, token_dim] float32 (the stale top-1 token embeddings) or None (a drafter without tokens).
        node_row: [N] int64 in [0, R): the row node i reads.
        node_masked: [N, B] bool, the node's masked positions (the eligible ones).
        depth: [N] int64 >= 0, the node's tree depth (clamped to max_depth - 1).
        resampled: float32 spot.order_model.resampled_confidence, computed once per pass: [R, B] (the same at
            every depth: node i reads row node_row[i]) or [R, D, B] (per depth: node i reads [node_row[i], depth[i]],
            depth < D), or None.
        weights: [P] float32, contiguous, packed as `weight_layout(S + 3 (+ 2), d_model, ...)` lists.
        d_model, n_layers, n_heads (dividing d_model), d_ff, max_block (>= B), max_depth: the model's sizes, >= 1.
        scale: finite, > 0: the logits are multiplied by it (a drafter's sharpness), 1 by default.
        backend: see spot_kernels.ops.
    Returns:
        [N, B] float32: per node, input projection + position / relative-position / depth (/ token) embeddings,
        n_layers pre-norm layers (bidirectional attention, GELU MLP), a final LayerNorm and the head; -inf where
        node_masked is False; times scale. The same operations as OrderModel.forward_nodes.
    """
    return call("order_logits", features, stale_masked, tokens, node_row, node_masked, depth, resampled, weights,
                d_model, n_layers, n_heads, d_ff, max_block, max_depth, scale, backend)


def check(features, stale_masked, tokens, node_row, node_masked, depth, resampled, weights, d_model, n_layers,
          n_heads, d_ff, max_block, max_depth, scale, *, values: bool) -> torch.device:
    op = "order_logits"
    checks.tensor(op, "features", features, (torch.float32,), ndim=3)
    n_rows, block, n_stale = features.shape
    checks.tensor(op, "stale_masked", stale_masked, checks.BOOL)
    checks.shape(op, "stale_masked", stale_masked, (n_rows, block), "[R, B] from features")
    token_dim = 0
    if tokens is not None:
        checks.tensor(op, "tokens", tokens, (torch.float32,), ndim=3)
        token_dim = tokens.shape[2]
        checks.shape(op, "tokens", tokens, (n_rows, block, token_dim), "[R, B, token_dim] from features")
        if token_dim < 1:
            raise ValueError(f"spot.{op}: tokens must have token_dim >= 1, got shape {list(tokens.shape)}")
    checks.tensor(op, "node_row", node_row, checks.I64, ndim=1)
    n = node_row.shape[0]
    checks.tensor(op, "node_masked", node_masked, checks.BOOL)
    checks.shape(op, "node_masked", node_masked, (n, block), "[N, B] from node_row and features")
    checks.tensor(op, "depth", depth, checks.I64)
    checks.shape(op, "depth", depth, (n,), "[N] from node_row")
    if resampled is not None:
        checks.tensor(op, "resampled", resampled, (torch.float32,))
        if resampled.dim() == 3:
            checks.shape(op, "resampled", resampled, (n_rows, resampled.shape[1], block),
                         "[R, D, B] (R, B from features)")
        else:
            checks.shape(op, "resampled", resampled, (n_rows, block), "[R, B] or [R, D, B] (R, B from features)")
    d_model = checks.integer(op, "d_model", d_model, 1)
    n_layers = checks.integer(op, "n_layers", n_layers, 1)
    n_heads = checks.integer(op, "n_heads", n_heads, 1)
    if d_model % n_heads:
        raise ValueError(f"spot.{op}: n_heads ({n_heads}) must divide d_model ({d_model})")
    d_ff = checks.integer(op, "d_ff", d_ff, 1)
    max_block = checks.integer(op, "max_block", max_block, 1)
    if block > max_block:
        raise ValueError(f"spot.{op}: the block size B = {block} (features.shape[1]) exceeds max_block {max_block}")
    max_depth = checks.integer(op, "max_depth", max_depth, 1)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 < scale < float("inf"):
        raise ValueError(f"spot.{op}: scale must be a finite float > 0, got {scale!r}")
    checks.tensor(op, "weights", weights, (torch.float32,), ndim=1)
    n_inputs = n_stale + NODE_COLUMNS + (RESAMPLED_COLUMNS if resampled is not None else 0)
    sizes = (n_inputs, d_model, n_layers, d_ff, max_block, max_depth, token_dim)
    # symbolic sizes (torch.compile's tracing) cannot key the cache
    expected = (weight_offsets(*sizes)["end"] if all(type(s) is int for s in sizes)
                else weight_count(weight_layout(*sizes)))
    if weights.shape[0] != expected:
        raise ValueError(f"spot.{op}: weights must hold {expected} float32 values (weight_layout with {n_inputs} "
                         f"input columns, d_model {d_model}, n_layers {n_layers}, d_ff {d_ff}, max_block "
                         f"{max_block}, max_depth {max_depth}, token_dim {token_dim}), got {weights.shape[0]}")
    if not weights.is_contiguous():
        raise ValueError(f"spot.{op}: weights must be contiguous (one packed tensor)")
    checks.size(f"spot.{op}: N = {n} nodes x B = {block} positions x d_ff = {d_ff} give activations of",
                4 * n * block * (4 * d_model + d_ff + block * n_heads))
    named = dict(features=features, stale_masked=stale_masked, node_row=node_row, node_masked=node_masked,
                 depth=depth, weights=weights)
    named.update({k: v for k, v in (("tokens", tokens), ("resampled", resampled)) if v is not None})
    device = checks.same_device(op, **named)
    checks.footprint(op, 0, **named)  # the outputs and activations are sized above
    if values and checks.values_enabled(device):
        checks.in_range(op, "node_row", node_row, 0, n_rows, what="a row of features")
        checks.in_range(op, "depth", depth, 0, 1 << 62, what="a tree depth >= 0")
        if resampled is not None and resampled.dim() == 3:
            checks.in_range(op, "depth", depth, 0, resampled.shape[1], what="a depth of resampled [R, D, B]")
    return device


def fake(features, stale_masked, tokens, node_row, node_masked, depth, resampled, weights, d_model, n_layers,
         n_heads, d_ff, max_block, max_depth, scale=1.0, backend="auto"):
    check(features, stale_masked, tokens, node_row, node_masked, depth, resampled, weights, d_model, n_layers,
          n_heads, d_ff, max_block, max_depth, scale, values=False)
    return features.new_empty(node_masked.shape)


OPS = [OpDef(SCHEMA, check, fake)]
