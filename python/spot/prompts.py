"""Prompts the package makes for a user: the held-out prompts it ships, and random token-id prompts.

The held-out prompts, so the demo and benchmarks need no corpus on a fresh machine, were built from the held-out
split (documents the target never trained on) by `spot build prompts`: math questions up to "Solution:", and the
first lines of held-out code and documentation. Random prompts never hold one of the target's special ids (mask,
end-of-sequence, padding, its tokenizer's special tokens): a target reads a mask id as a position to fill in and an
end-of-sequence id as the end of the text.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .limits import integer, size

PROMPTS_FILE = Path(__file__).parent / "assets" / "heldout_prompts.json"
# What one token of a made-up prompt holds in memory, estimated before any is drawn: the int64 drawn, then a list
# slot and an int object in the Python list a prompt is.
PROMPT_TOKEN_BYTES = 8 + 8 + 32


def held_out_prompts(count: int | None = None) -> list[str]:
    """The first `count` shipped held-out prompts (all when None)."""
    items = json.loads(PROMPTS_FILE.read_text())
    return [p["text"] for p in items[:count]]


def special_ids(target) -> set[int]:
    """The ids of `target`'s vocabulary that a made-up prompt must not hold: its mask, end-of-sequence and padding
    ids, every end-of-sequence and padding id its model's config lists, and its tokenizer's special tokens."""
    config = getattr(getattr(target, "model", None), "config", None)
    tokenizer = getattr(target, "tokenizer", None)
    found = [getattr(target, name, None) for name in ("mask_id", "eos_id", "pad_id")]
    found += [getattr(config, name, None) for name in ("mask_token_id", "eos_token_id", "pad_token_id")]
    found += [getattr(tokenizer, name, None) for name in ("all_special_ids", "special_ids")]
    ids = set()
    for value in found:
        for i in value if isinstance(value, (list, tuple, set, frozenset)) else [value]:
            if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < target.vocab_size:
                ids.add(i)
    return ids


def random_prompts(vocab_size: int, count: int, length: int, seed: int, exclude=()) -> list[list[int]]:
    """`count` prompts of `length` token ids drawn uniformly from [0, vocab_size) less the ids in `exclude` (a
    target's `special_ids`), from `seed`. Their memory is estimated (PROMPT_TOKEN_BYTES a token) and refused above
    SPOT_MEMORY_LIMIT_GB before any id is drawn."""
    vocab_size, count, length, seed = (integer(name, value) for name, value in
                                       (("vocab_size", vocab_size), ("count", count), ("length", length),
                                        ("seed", seed)))
    for name, value in (("count", count), ("length", length)):
        if value < 0:
            raise ValueError(f"{name}: expected >= 0, got {value}")
    size(f"count ({count}) x length ({length}) give prompts of", count * length * PROMPT_TOKEN_BYTES)
    excluded = torch.tensor(sorted({int(i) for i in exclude if 0 <= int(i) < vocab_size}), dtype=torch.long)
    allowed = vocab_size - len(excluded)
    if allowed < 1 and count * length:
        raise ValueError(f"vocab_size: every id of the {vocab_size}-token vocabulary is a special id; no prompt "
                         "can be drawn")
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(0, max(allowed, 1), (count, length), generator=g)
    # the k-th allowed id is k plus the number of excluded ids e_j (sorted, j = 0, 1, ...) with e_j - j <= k
    return (k + torch.searchsorted(excluded - torch.arange(len(excluded)), k, right=True)).tolist()
