"""Triton kernels for spot::score (docs/ops.md, "Fused scoring").

One program per (node, position) row streams the vocabulary once in tiles of BLOCK_V logits and keeps, in
registers:
  - the online softmax of x = logits / T (an IEEE division, `tl.div_rn`): running max m and sum s (plus the
    running sum of e^(x - m) (x - m) for "neg_entropy", and the untempered m, s for "raw_prob" at T > 0);
  - the coupled-noise Gumbel-max token: argmax of x + g with g = -log(-log(u(seed, row, pos, step, v))), ties
    lowest id. A tile whose largest x cannot beat the best so far even with the largest possible Gumbel value
    (fl(max x + 17) <= best; every g is < 16.7) skips the noise. Otherwise the words are hashed and a 1473-entry
    table gives a tight upper bound of each g (to 0.025); only a tile where some x + bound beats the best computes
    the two logs. Both filters are exact (rounding is monotone): the logs, the costly part, run on few tiles;
  - the top-KP (KP = next power of two >= max(K, 2)) entries as int64 keys (value, then lowest id; see
    _common.pack_key), merged with a tile only when the tile's max beats the current K-th value: `tl.topk` of the
    tile, then a bitonic max-merge with the running list;
  - validity: a NaN or +inf in x, or every entry -inf, makes the row invalid.
Then the K probabilities exp(x - m) / s (libdevice exp, IEEE division) are sorted (probability, then lowest id).
Entries whose probability is exactly 0 (-inf logits or underflow) tie at 0 and are ordered by id like the
reference: when fewer than min(K, V) probabilities are positive, a second pass (rare: only then) lists the
lowest ids with probability 0. Nothing of vocabulary size is written.

Each tile is loaded one iteration ahead (a register double buffer: twice the bytes in flight). A tiny second
kernel picks each node's commit position (argmax of confidence over masked valid positions, ties
lowest position).

Falls back to the reference (same results, PyTorch speed): float64 logits (the exactness dtype, computed in
float64), top_k > 1024, and V >= 2^31 - 1.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from ..ops.score import CONFIDENCE_KINDS
from ..reference import score as reference
from ._common import (GUMBEL_BOUND, MIN_KEY, NEG_INF, POS_INF, gumbel_from_words, key_index, key_value, mix32,
                      next_pow2, on_device, pack_key, precise_exp, precise_log, row_key, seed_key)

MAX_TOPK = 1024
_CONF = {kind: code for code, kind in enumerate(CONFIDENCE_KINDS)}  # the kernel's CONF codes
NAN = tl.constexpr(float("nan"))


def _block_v() -> int:
    """Vocabulary tile; SPOT_TRITON_SCORE_BLOCK / SPOT_TRITON_SCORE_WARPS override the defaults (GPU tuning)."""
    return int(os.environ.get("SPOT_TRITON_SCORE_BLOCK", "2048"))


@triton.jit(do_not_specialize=["seed_key", "temperature"])
def _score_rows_kernel(
    logits_ptr, row_stride, V, B,
    rows_ptr, bstart_ptr, steps_ptr, seed_key, temperature, gbound_ptr,
    tokens_ptr, conf_ptr, probs_ptr, ids_ptr, valid_ptr, K,
    HAS_T: tl.constexpr, CONF: tl.constexpr, KP: tl.constexpr, BLOCK_V: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    base = logits_ptr + r * row_stride
    lane = tl.arange(0, BLOCK_V)
    if HAS_T:
        node = r // B
        j = r - node * B
        key = row_key(seed_key.to(tl.uint32), tl.load(rows_ptr + node), tl.load(bstart_ptr + node) + j,
                      tl.load(steps_ptr + node))

    m = tl.full([], NEG_INF, tl.float32)  # running max of x
    s = tl.full([], 0.0, tl.float32)  # running sum of exp(x - m)
    ent = tl.full([], 0.0, tl.float32)  # running sum of exp(x - m) (x - m)   (neg_entropy)
    m_raw = tl.full([], NEG_INF, tl.float32)  # untempered max and sum        (raw_prob, T > 0)
    s_raw = tl.full([], 0.0, tl.float32)
    best = tl.full([], NEG_INF, tl.float32)  # best x + g so far (x at T = 0)
    best_id = tl.full([], 0, tl.int32)
    n_bad = tl.full([], 0, tl.int32)  # NaN or +inf entries of x
    top = tl.full([KP], MIN_KEY, tl.int64)  # top-KP keys, sorted ascending
    floor = tl.full([], NEG_INF, tl.float32)  # value of the worst kept key (-inf while slots are free)

    ahead = tl.load(base + lane, mask=lane < V, other=NEG_INF)  # tiles are loaded one iteration ahead
    for start in range(0, V, BLOCK_V):
        offs = start + lane
        inb = offs < V
        raw = ahead.to(tl.float32)
        ahead = tl.load(base + (offs + BLOCK_V), mask=offs + BLOCK_V < V, other=NEG_INF)
        if HAS_T:
            x = tl.div_rn(raw, temperature)
        else:
            x = raw
        n_bad += tl.sum(((x != x) | (x == POS_INF)).to(tl.int32), axis=0)
        tmax, targ = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)

        # online softmax
        m_new = tl.maximum(m, tmax)
        shift = tl.where(m_new == NEG_INF, 0.0, m_new)
        alpha = tl.exp(m - shift)
        e = tl.exp(x - shift)
        if CONF == 3:
            carried = tl.where(s > 0, alpha * (ent + (m - shift) * s), 0.0)
            ent = carried + tl.sum(tl.where(e > 0, e * (x - shift), 0.0), axis=0)
        s = s * alpha + tl.sum(e, axis=0)
        m = m_new
        if CONF == 1:
            if HAS_T:
                rmax = tl.max(raw, axis=0)
                rm_new = tl.maximum(m_raw, rmax)
                rshift = tl.where(rm_new == NEG_INF, 0.0, rm_new)
                s_raw = s_raw * tl.exp(m_raw - rshift) + tl.sum(tl.exp(raw - rshift), axis=0)
                m_raw = rm_new

        # coupled Gumbel-max token (T = 0: argmax of x), ties lowest id
        if HAS_T:
            if tmax + GUMBEL_BOUND > best:
                word = mix32(key ^ offs.to(tl.uint32))
                # Upper bound of each entry's Gumbel value from a small table (see _gumbel_bounds): the two logs
                # are computed only for tiles where some entry could beat the best so far.
                t = 8388607 - (word >> 9).to(tl.int32)  # 2^23 - 1 - m: small when u is close to 1
                bucket = tl.where(t == 0, 0, (t.to(tl.float32).to(tl.int32, bitcast=True) >> 17) - 8127)
                bound = tl.load(gbound_ptr + bucket)
                if tl.max(x + bound, axis=0) > best:
                    g = x + gumbel_from_words(word)
                    gmax, garg = tl.max(g, axis=0, return_indices=True, return_indices_tie_break_left=True)
                    if gmax > best:
                        best = gmax
                        best_id = start + garg
        else:
            if tmax > best:
                best = tmax
                best_id = start + targ

        # running top-KP
        if tmax > floor:
            keys = tl.where(inb, pack_key(x, offs), MIN_KEY)
            # top ascending, the tile's top-KP descending: their elementwise max is bitonic and holds the top-KP
            top = tl.bitonic_merge(tl.maximum(top, tl.topk(keys, KP)), descending=False)
            worst = tl.min(top, axis=0)
            floor = tl.where(worst == MIN_KEY, NEG_INF, key_value(worst))

    valid = (n_bad == 0) & (m > NEG_INF)

    # top-K probabilities, ordered by (probability, lowest id). The list is ascending in x, hence in p; only
    # distinct x rounding to the same p can leave ids out of order, and then a sort fixes it.
    lane_k = tl.arange(0, KP)
    p = tl.div_rn(precise_exp(key_value(top) - m), s)
    positive = (top != MIN_KEY) & (p > 0) & valid
    pkey = tl.where(positive, pack_key(p, key_index(top)), MIN_KEY)
    after = tl.gather(pkey, tl.minimum(lane_k + 1, KP - 1), 0)
    if tl.sum(((lane_k < KP - 1) & (pkey > after)).to(tl.int32), axis=0) > 0:
        pkey = tl.sort(pkey)
    npos = tl.sum(positive.to(tl.int32), axis=0)
    slot = KP - 1 - lane_k  # descending output: the largest key goes to slot 0
    p_sorted = tl.where(slot < npos, key_value(pkey), 0.0)
    id_sorted = tl.where(slot < npos, key_index(pkey).to(tl.int64), -1)
    lim = tl.where(valid, tl.minimum(K, V), 0)
    out = probs_ptr + r * K
    out_ids = ids_ptr + r * K
    direct = ((slot < npos) | (slot >= lim)) & (slot < K)  # positives, then padding; zeros are filled below
    tl.store(out + slot, p_sorted, mask=direct)
    tl.store(out_ids + slot, id_sorted, mask=direct)
    need = lim - npos
    if need > 0:
        # Fewer than min(K, V) positive probabilities: the rest are the lowest ids with probability exactly 0.
        cnt = tl.full([], 0, tl.int32)
        start = 0
        while (start < V) & (cnt < need):
            offs = start + lane
            inb = offs < V
            raw = tl.load(base + offs, mask=inb, other=NEG_INF).to(tl.float32)
            if HAS_T:
                x = tl.div_rn(raw, temperature)
            else:
                x = raw
            zero = inb & (tl.div_rn(precise_exp(x - m), s) == 0)
            at = npos + cnt + tl.cumsum(zero.to(tl.int32), axis=0) - 1
            ok = zero & (at < lim)
            tl.store(out + at, tl.zeros([BLOCK_V], tl.float32), mask=ok)
            tl.store(out_ids + at, offs.to(tl.int64), mask=ok)
            cnt += tl.sum(zero.to(tl.int32), axis=0)
            start += BLOCK_V

    # confidence
    tok = tl.where(valid, best_id, 0)
    raw_tok = tl.load(base + tok).to(tl.float32)
    if HAS_T:
        x_tok = tl.div_rn(raw_tok, temperature)
    else:
        x_tok = raw_tok
    if CONF == 0:
        c = tl.div_rn(precise_exp(x_tok - m), s)
    elif CONF == 1:
        if HAS_T:
            c = tl.div_rn(precise_exp(raw_tok - m_raw), s_raw)
        else:
            c = tl.div_rn(precise_exp(x_tok - m), s)
    elif CONF == 2:
        c = tl.sum(tl.where(slot == 0, p_sorted, 0.0), axis=0) - tl.sum(tl.where(slot == 1, p_sorted, 0.0), axis=0)
    else:
        c = ent / s - precise_log(s)
    tl.store(tokens_ptr + r, tl.where(valid, best_id.to(tl.int64), -1))
    tl.store(conf_ptr + r, tl.where(valid, c, NAN))
    tl.store(valid_ptr + r, valid.to(tl.int8))


@triton.jit
def _commit_kernel(conf_ptr, masked_ptr, valid_ptr, out_ptr, B, BLOCK_B: tl.constexpr):
    """Per node: the masked valid position with the highest confidence, ties lowest position; -1 if none."""
    n = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, BLOCK_B)
    best = tl.full([], NEG_INF, tl.float32)
    pos = tl.full([], -1, tl.int32)
    for start in range(0, B, BLOCK_B):
        j = start + lane
        inb = j < B
        c = tl.load(conf_ptr + n * B + j, mask=inb, other=0.0)
        ok = inb & (tl.load(masked_ptr + n * B + j, mask=inb, other=0) != 0)
        ok = ok & (tl.load(valid_ptr + n * B + j, mask=inb, other=0) != 0)
        key = tl.where(ok, c, NEG_INF)  # confidences of valid rows are finite
        kmax, karg = tl.max(key, axis=0, return_indices=True, return_indices_tie_break_left=True)
        if kmax > best:
            best = kmax
            pos = start + karg
    tl.store(out_ptr + n, pos.to(tl.int64))


_BOUNDS: dict = {}
_BUCKETS = 1473  # bucket 0: t = 0; then (float32 exponent, top 6 mantissa bits) of t in [1, 2^23)


def _gumbel_bounds(device: torch.device) -> torch.Tensor:
    """float32 [_BUCKETS]: for each bucket of t = 2^23 - 1 - (word >> 9) (bucketed by t's float32 exponent and top
    6 mantissa bits, so the buckets are narrow where the Gumbel value -log(-log(u)) changes fast), an upper bound of
    the Gumbel values of the bucket: their maximum (at the bucket's smallest t) plus 1e-3, a margin far above any
    difference between log implementations. Within 0.025 of the values it bounds wherever g > 0 (looser for the
    smallest values, u near 0, which never decide a token). Built once per device with the same float32 formula
    as the reference (docs/noise.md)."""
    key = (device.type, device.index)
    table = _BOUNDS.get(key)
    if table is None:
        t = torch.arange(1 << 23, dtype=torch.int32, device=device)
        bits = t.to(torch.float32).view(torch.int32)
        bucket = torch.where(t == 0, 0, (bits >> 17) - 8127).long()
        u = ((8388607 - t).to(torch.float32) + 0.5) * 2.0**-23
        g = -torch.log(-torch.log(u))
        table = torch.full((_BUCKETS,), float("-inf"), dtype=torch.float32, device=device)
        table = table.scatter_reduce(0, bucket, g, reduce="amax") + 1e-3
        _BOUNDS[key] = table
    return table


def _num_warps(block: int) -> int:
    return 8 if block >= 2048 else 4 if block >= 256 else 1


def _score_warps(block: int) -> int:
    return int(os.environ.get("SPOT_TRITON_SCORE_WARPS", _num_warps(block)))


def score(logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k):
    block, vocab = logits.shape[-2:]
    if logits.dtype == torch.float64 or top_k > MAX_TOPK or vocab >= 2**31 - 1:
        return reference.score(logits, masked, seed, rows, block_start, steps, temperature, confidence, top_k)
    lead = logits.shape[:-2]
    nodes = math.prod(lead)
    n_rows = nodes * block
    device = logits.device
    tokens = torch.empty((*lead, block), dtype=torch.int64, device=device)
    conf = torch.empty((*lead, block), dtype=torch.float32, device=device)
    probs = torch.empty((*lead, block, top_k), dtype=torch.float32, device=device)
    ids = torch.empty((*lead, block, top_k), dtype=torch.int64, device=device)
    commit = torch.empty(lead, dtype=torch.int64, device=device)
    if nodes == 0:
        return tokens, conf, probs, ids, commit
    if n_rows == 0:
        commit.fill_(-1)
        return tokens, conf, probs, ids, commit
    valid = torch.empty(n_rows, dtype=torch.int8, device=device)
    flat = logits.reshape(n_rows, vocab)
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    kp = next_pow2(max(top_k, 2))
    block_v = max(kp, min(_block_v(), next_pow2(vocab)))
    with on_device(logits):
        _score_rows_kernel[(n_rows,)](
            flat, flat.stride(0), vocab, block,
            rows.reshape(-1).contiguous(), block_start.reshape(-1).contiguous(), steps.reshape(-1).contiguous(),
            seed_key(seed), float(temperature) if temperature > 0 else 1.0, _gumbel_bounds(device),
            tokens, conf, probs, ids, valid, top_k,
            HAS_T=temperature > 0, CONF=_CONF[confidence], KP=kp, BLOCK_V=block_v,
            num_warps=_score_warps(block_v),
        )
        block_b = min(1024, next_pow2(block))
        _commit_kernel[(nodes,)](conf, masked.reshape(-1).contiguous().view(torch.uint8), valid, commit, block,
                                 BLOCK_B=block_b, num_warps=_num_warps(block_b))
    return tokens, conf, probs, ids, commit


# The triton backend's kernels of this family (read by spot_kernels.backends).
KERNELS = {"score": score}
