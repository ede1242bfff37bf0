"""Reference for spot::order_logits (docs/ops.md, "Order drafter forward"): the order drafter's forward from its
packed weights, with the operations of spot.order_model.OrderModel.forward_nodes in the same order (so the same
logits bit for bit on the same device). spot_kernels never imports spot: the math is written here again."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.order_logits import NODE_COLUMNS, RESAMPLED_COLUMNS, weight_layout


def unpack_weights(weights: torch.Tensor, layout) -> dict[str, torch.Tensor]:
    """Views of the packed `weights` [P], one per (name, shape) of `layout`."""
    out, at = {}, 0
    for name, shape in layout:
        n = 1
        for s in shape:
            n *= s
        out[name] = weights[at:at + n].view(shape)
        at += n
    return out


def node_columns(stale_masked, node_masked, resampled=None) -> torch.Tensor:
    """The node feature columns [N, B, 3 (+ 2)]: masked now, committed along the draft path, fraction masked
    (then the clamped resampled probability and its log / 14)."""
    just_committed = stale_masked & ~node_masked
    frac_masked = node_masked.float().mean(-1, keepdim=True).expand(node_masked.shape)
    cols = [node_masked.float()[..., None], just_committed.float()[..., None], frac_masked[..., None]]
    if resampled is not None:
        r = resampled.float().nan_to_num(0.0).clamp(0, 1)
        cols += [r[..., None], r.clamp_min(1e-6).log()[..., None] / 14.0]
    return torch.cat(cols, -1)


def order_logits(features, stale_masked, tokens, node_row, node_masked, depth, resampled, weights, d_model: int,
                 n_layers: int, n_heads: int, d_ff: int, max_block: int, max_depth: int,
                 scale: float = 1.0) -> torch.Tensor:
    """Reference for spot::order_logits: [N, B] float32, -inf where node_masked is False, times scale."""
    n, B = node_masked.shape
    if resampled is not None:  # per row [R, B], or per row and depth [R, D, B]: each node's [N, B]
        resampled = resampled[node_row] if resampled.dim() == 2 else resampled[node_row, depth]
    n_inputs = features.shape[2] + NODE_COLUMNS + (RESAMPLED_COLUMNS if resampled is not None else 0)
    token_dim = tokens.shape[2] if tokens is not None else 0
    w = unpack_weights(weights, weight_layout(n_inputs, d_model, n_layers, d_ff, max_block, max_depth, token_dim))
    stale_m = stale_masked[node_row]
    feats = torch.cat((features[node_row], node_columns(stale_m, node_masked, resampled)), -1)
    x = F.linear(feats, w["inp.weight"], w["inp.bias"])
    j = torch.arange(B, device=x.device)
    first = torch.where(node_masked.any(1), node_masked.to(torch.int8).argmax(1), B)
    rel = (j[None] - first[:, None]).clamp(-max_block, max_block - 1) + max_block
    x = (x + F.embedding(j, w["pos.weight"])[None] + F.embedding(rel, w["rel.weight"])
         + F.embedding(depth.clamp(0, max_depth - 1), w["depth.weight"])[:, None])
    if tokens is not None:
        x = x + F.linear(tokens[node_row], w["tok_proj.weight"])
    head_dim = d_model // n_heads
    for i in range(n_layers):
        p = f"layers.{i}."
        h = F.layer_norm(x, (d_model,), w[p + "norm1.weight"], w[p + "norm1.bias"])
        q, k, v = F.linear(h, w[p + "qkv.weight"], w[p + "qkv.bias"]).view(n, B, 3, n_heads, head_dim).permute(
            2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)  # bidirectional over the block
        x = x + F.linear(a.transpose(1, 2).reshape(n, B, d_model), w[p + "out.weight"], w[p + "out.bias"])
        h = F.layer_norm(x, (d_model,), w[p + "norm2.weight"], w[p + "norm2.bias"])
        h = F.gelu(F.linear(h, w[p + "ff.0.weight"], w[p + "ff.0.bias"]))
        x = x + F.linear(h, w[p + "ff.2.weight"], w[p + "ff.2.bias"])
    h = F.layer_norm(x, (d_model,), w["norm.weight"], w["norm.bias"])
    logits = F.linear(h, w["head.weight"], w["head.bias"]).squeeze(-1)
    logits = logits.masked_fill(~node_masked, float("-inf"))
    return logits if scale == 1 else logits * scale


# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {"order_logits": order_logits}
