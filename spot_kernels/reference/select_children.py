"""Drafter child selection reference (docs/ops.md, "Drafter child selection").

For each frontier node: the k most likely next-commit positions, their path log-probabilities, and the token each
child commits (Gumbel-max over the stale top-K with the child's coupled step noise).
"""

from __future__ import annotations

import math

import torch

from ..contract import compute_dtype
from .noise import gumbel_from_words, row_key, words


def select_children(
    position_logits: torch.Tensor,
    masked: torch.Tensor,
    path_logprob: torch.Tensor,
    stale_topk_probs: torch.Tensor,
    stale_topk_ids: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference for spot::select_children. Arguments are validated by the router; see docs/ops.md."""
    frontier, block = position_logits.shape
    dtype = position_logits.dtype

    # NaN counts as -inf. Eligible: masked and not -inf.
    logits = torch.where(position_logits.isnan(), -math.inf, position_logits)
    eligible = masked & (logits > -math.inf)
    key = torch.where(eligible, logits, -math.inf)

    width = min(k, block)
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :width]  # ties: lowest position
    chosen = eligible.gather(-1, order)
    # log_softmax over eligible positions. A row with +inf logits takes the limit: the +inf positions share the
    # mass equally and the others get -inf (log_softmax itself would give NaN).
    infinite = key == math.inf
    key = torch.where(infinite.any(-1, keepdim=True), torch.where(infinite, 0.0, -math.inf).to(dtype), key)
    log_norm = torch.logsumexp(key, dim=-1, keepdim=True)  # -inf when nothing is eligible (then nothing chosen)
    child_logprob = torch.where(chosen, path_logprob[:, None] + (key.gather(-1, order) - log_norm), -math.inf)
    child_pos = torch.where(chosen, order, -1)

    child_tokens = _child_tokens(stale_topk_probs, stale_topk_ids, order, chosen, seed, rows, block_start, steps,
                                 temperature)

    if width < k:  # fewer positions than children asked for: pad
        pad = k - width
        child_pos = torch.cat([child_pos, child_pos.new_full((frontier, pad), -1)], dim=-1)
        child_logprob = torch.cat([child_logprob, child_logprob.new_full((frontier, pad), -math.inf)], dim=-1)
        child_tokens = torch.cat([child_tokens, child_tokens.new_full((frontier, pad), -1)], dim=-1)
    return child_pos.contiguous(), child_logprob.contiguous(), child_tokens.contiguous()


def _child_tokens(
    stale_topk_probs: torch.Tensor,
    stale_topk_ids: torch.Tensor,
    pos: torch.Tensor,
    chosen: torch.Tensor,
    seed: int,
    rows: torch.Tensor,
    block_start: torch.Tensor,
    steps: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """Token of each child. pos, chosen: [F, W] (position, is a real child) -> [F, W] int64, -1 when none."""
    frontier, width = pos.shape
    top = stale_topk_ids.shape[-1]
    if width == 0 or top == 0:
        return torch.full((frontier, width), -1, dtype=torch.int64, device=pos.device)
    index = pos[:, :, None].expand(frontier, width, top)
    ids = stale_topk_ids.gather(1, index)  # [F, W, K]
    if temperature == 0:
        return torch.where(chosen, ids[:, :, 0], -1)

    cdtype = compute_dtype(stale_topk_probs.dtype)
    probs = stale_topk_probs.gather(1, index).to(cdtype)
    key = row_key(seed, rows[:, None], block_start[:, None] + pos, steps[:, None])  # [F, W]
    gumbel = gumbel_from_words(words(key[:, :, None], ids), cdtype)
    ok = (ids >= 0) & (probs > 0)
    value = torch.where(ok, torch.log(torch.where(ok, probs, 1.0)) + gumbel, -math.inf)
    best = torch.argmax(value, dim=-1, keepdim=True)  # first maximal index: ties go to the lowest i
    token = ids.gather(-1, best)[..., 0]
    return torch.where(chosen & ok.any(-1), token, -1)


# The reference backend's implementations of this family (read by spot_kernels.backends).
KERNELS = {"select_children": select_children}
