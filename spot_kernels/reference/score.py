"""Fused scoring reference (docs/ops.md, "Fused scoring"): coupled Gumbel-max tokens, confidences, top-K, commit.

Works on row chunks so that the [rows, V] temporaries (noise words, probabilities) stay around 2^22 elements
whatever the batch; the reference is also the CPU fallback of the decoder.
"""

from __future__ import annotations

import math

import torch

from ..contract import compute_dtype
from .noise import gumbel_from_words, row_key, words

_CHUNK_ELEMENTS = 1 << 22


def topk_lowest_id(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest entries of each row, descending, ties by lowest index.

    torch.topk does not promise which of tied entries it returns, so the set is fixed explicitly: everything above
    the k-th largest value, then the lowest indices among entries equal to it.

    Args:
        values: [R, V] floating, no NaN.
        k: 1 <= k <= V.
    Returns:
        (vals [R, k] same dtype as values, ids [R, k] int64).
    """
    n = values.shape[-1]
    vals, ids = torch.topk(values, min(k + 1, n), dim=-1, sorted=True)
    threshold = vals[:, k - 1:k]
    # The set is already exact unless the (k+1)-th value ties the k-th: then a tie straddles the cut and the
    # lowest ids among the tied entries must win. Fix only those rows.
    straddles = (vals[:, k] == threshold[:, 0]) if n > k else torch.zeros_like(vals[:, 0], dtype=torch.bool)
    vals, ids = vals[:, :k], ids[:, :k]
    if bool(straddles.any()):
        sub = values[straddles]
        cut = threshold[straddles]
        index = torch.arange(n, device=values.device)
        # rank: above the cut first (-1), then tied entries by index; the k smallest ranks are the wanted set
        rank = torch.where(sub > cut, -1, torch.where(sub == cut, index, n))
        sub_ids = torch.topk(rank, k, dim=-1, largest=False).indices
        ids[straddles] = sub_ids
        vals = values.gather(-1, ids)
    # descending by value, ties by lowest id: sort by id, then a stable sort by value
    by_id = ids.sort(dim=-1)
    vals, ids = vals.gather(-1, by_id.indices), by_id.values
    order = torch.sort(vals, dim=-1, descending=True, stable=True).indices
    return vals.gather(-1, order), ids.gather(-1, order)


def _confidence(kind: str, p: torch.Tensor, raw: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
    """Confidence per row. p: [R, V] softmax(x); raw: [R, V] untempered logits (only for "raw_prob");
    tokens: [R] int64 (valid rows only matter)."""
    if kind == "prob":
        return p.gather(-1, tokens[:, None])[:, 0]
    if kind == "raw_prob":
        return torch.softmax(raw, dim=-1).gather(-1, tokens[:, None])[:, 0]
    if kind == "margin":
        top = torch.topk(p, min(2, p.shape[-1]), dim=-1).values
        second = top[:, 1] if top.shape[-1] > 1 else torch.zeros_like(top[:, 0])
        return top[:, 0] - second
    return torch.special.xlogy(p, p).sum(-1)  # "neg_entropy": xlogy gives 0 log 0 = 0


def _score_rows(
    logits: torch.Tensor,
    keys: torch.Tensor | None,
    temperature: float,
    confidence: str,
    top_k: int,
    cdtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Score a chunk of rows. logits: [R, V] any float dtype; keys: [R] int64 noise row keys (T > 0).
    Returns tokens [R], confidence [R], topk_probs [R, K], topk_ids [R, K], valid [R] bool."""
    rows, vocab = logits.shape
    raw = logits.to(cdtype)
    if temperature > 0:
        # IEEE division by the temperature rounded to cdtype (not a multiply by its reciprocal), as specified.
        x = raw / torch.full((), temperature, dtype=cdtype, device=raw.device)
    else:
        x = raw
    valid = torch.isfinite(x.amax(-1))  # amax is NaN for a NaN row, +inf with a +inf, -inf when all are -inf
    if not bool(valid.all()):
        x = torch.where(valid[:, None], x, 0.0)  # invalid rows are overwritten below; zeros keep the math clean

    if temperature > 0:
        tokens = _gumbel_argmax(x, keys, cdtype)
    else:
        tokens = torch.argmax(x, dim=-1)

    p = torch.softmax(x, dim=-1)
    raw_clean = torch.where(valid[:, None], raw, 0.0) if confidence == "raw_prob" and temperature > 0 else None
    if confidence == "raw_prob" and raw_clean is None:
        conf = _confidence("prob", p, None, tokens)  # T = 0: the untempered softmax is p itself
    else:
        conf = _confidence(confidence, p, raw_clean, tokens)

    kc = min(top_k, vocab)
    probs, ids = topk_lowest_id(p, kc)
    if kc < top_k:  # K > V: pad with prob 0, id -1
        probs = torch.cat([probs, probs.new_zeros(rows, top_k - kc)], dim=-1)
        ids = torch.cat([ids, ids.new_full((rows, top_k - kc), -1)], dim=-1)

    tokens = torch.where(valid, tokens, -1)
    conf = torch.where(valid, conf, math.nan)
    probs = torch.where(valid[:, None], probs, 0.0)
    ids = torch.where(valid[:, None], ids, -1)
    return tokens, conf, probs, ids, valid


def _gumbel_argmax(x: torch.Tensor, keys: torch.Tensor, cdtype: torch.dtype) -> torch.Tensor:
    """argmax_v(x[r, v] + g(keys[r], v)), ties to the lowest id, computing g only where it can matter.

    With L = x[best] + g[best] for the row's largest x, an entry whose x + G_MAX < L cannot win (G_MAX bounds
    every g), so the noise is hashed only for the few entries near the top; the result equals the dense argmax.
    """
    rows, vocab = x.shape
    best = torch.argmax(x, dim=-1)
    r_all = torch.arange(rows, device=x.device)
    lower = x[r_all, best] + gumbel_from_words(words(keys, best), cdtype)
    r, v = torch.nonzero(x + _G_MAX.get(cdtype) >= lower[:, None], as_tuple=True)
    val = x[r, v] + gumbel_from_words(words(keys[r], v), cdtype)
    top = torch.full((rows,), -math.inf, dtype=cdtype, device=x.device).scatter_reduce(0, r, val, "amax")
    hit = val == top[r]
    first = torch.full((rows,), vocab, dtype=torch.int64, device=x.device)
    return first.scatter_reduce(0, r[hit], v[hit], "amin")


# Largest Gumbel value the hash can produce (u = 1 - 2^-24), plus slack for log implementations.
_G_MAX = {dt: float(gumbel_from_words(torch.tensor([2**32 - 1], dtype=torch.int64), dt)[0]) + 1e-3
          for dt in (torch.float32, torch.float64)}


def score(
    logits: torch.Tensor,
    masked: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
    confidence: str,
    top_k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference for spot::score. Arguments are validated by the router; see docs/ops.md for shapes."""
    lead = logits.shape[:-2]
    block, vocab = logits.shape[-2:]
    cdtype = compute_dtype(logits.dtype)
    device = logits.device
    n_rows = math.prod(lead) * block

    tokens = torch.full((n_rows,), -1, dtype=torch.int64, device=device)
    conf = torch.full((n_rows,), math.nan, dtype=cdtype, device=device)
    probs = torch.zeros((n_rows, top_k), dtype=cdtype, device=device)
    ids = torch.full((n_rows, top_k), -1, dtype=torch.int64, device=device)
    valid = torch.zeros((n_rows,), dtype=torch.bool, device=device)

    if n_rows > 0:
        flat = logits.reshape(n_rows, vocab)
        keys = None
        if temperature > 0:
            j = torch.arange(block, dtype=torch.int64, device=device)
            keys = row_key(seed, rows[..., None], block_start[..., None] + j, steps[..., None]).reshape(n_rows)
        chunk = max(1, _CHUNK_ELEMENTS // vocab)
        for s in range(0, n_rows, chunk):
            e = min(s + chunk, n_rows)
            out = _score_rows(flat[s:e], None if keys is None else keys[s:e], temperature, confidence, top_k,
                              cdtype)
            tokens[s:e], conf[s:e], probs[s:e], ids[s:e], valid[s:e] = out

    tokens = tokens.reshape(*lead, block)
    conf = conf.reshape(*lead, block)
    valid = valid.reshape(*lead, block)
    probs = probs.reshape(*lead, block, top_k)
    ids = ids.reshape(*lead, block, top_k)
    return tokens, conf, probs, ids, commit_position(conf, masked & valid)


def commit_position(conf: torch.Tensor, eligible: torch.Tensor) -> torch.Tensor:
    """The eligible position with the highest confidence, ties lowest position, -1 when none.

    Args:
        conf: [..., B] floating (finite on eligible positions).
        eligible: [..., B] bool.
    Returns:
        [...] int64.
    """
    block = conf.shape[-1]
    if block == 0:
        return torch.full(conf.shape[:-1], -1, dtype=torch.int64, device=conf.device)
    key = torch.where(eligible, conf, -math.inf)
    best = key.max(dim=-1, keepdim=True).values
    j = torch.arange(block, dtype=torch.int64, device=conf.device)
    pos = torch.where(eligible & (key == best), j, block).min(dim=-1).values
    return torch.where(pos == block, -1, pos)


# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {"score": score}
