"""The checks of what a user hands over, in one place: size limits, token ids, temperatures, callbacks.

Every allocation sized by the caller is estimated first and refused above a limit (GB, decimal, from the
environment): `SPOT_MEMORY_LIMIT_GB` (default 16) for a model built from a config (target or drafter), a pass's
tree and logits, the decoder's per-prompt outputs and the ops' outputs (`spot_kernels.checks.size`, shared with the
ops), and `SPOT_KV_CACHE_LIMIT_GB` (default 16) for a session's KV cache. A limit that is not a finite number >= 0
is refused, naming the variable.
"""

from __future__ import annotations

import math
import numbers
import operator

from spot_kernels.checks import FLOAT32_MAX, MEMORY_LIMIT_GB, limit_bytes, memory_limit_bytes, size

# The KV cache of one session may grow to at most this many GB; a session whose prompts plus `max_new_tokens`
# could need more is refused before anything is allocated (SPOT_KV_CACHE_LIMIT_GB overrides it).
KV_CACHE_LIMIT_GB = 16.0
MIN_TEMPERATURE = 1e-6  # the smallest positive temperature `generate` accepts (below it the scaled logits overflow)

__all__ = ["FLOAT32_MAX", "KV_CACHE_LIMIT_GB", "MEMORY_LIMIT_GB", "MIN_TEMPERATURE", "callable_or_none", "integer",
           "kv_cache_limit_bytes", "limit_bytes", "memory_limit_bytes", "size", "split_prompt_heads", "temperature",
           "token_id"]


def kv_cache_limit_bytes() -> int:
    return limit_bytes("SPOT_KV_CACHE_LIMIT_GB", KV_CACHE_LIMIT_GB)


def integer(name: str, value) -> int:
    """`value` as an int: Python and NumPy integers (anything with __index__) but not bools."""
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        raise TypeError(f"{name}: expected an int, got a bool ({value!r})")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} ({value!r})") from None


def token_id(name: str, value, vocab_size: int, *, optional: bool = False) -> int | None:
    """A token id in [0, vocab_size) (a Python or NumPy integer), or None when `optional`."""
    if value is None and optional:
        return None
    try:
        value = integer(name, value)
    except TypeError:
        raise ValueError(f"{name}: expected a token id in [0, {vocab_size}), got {value!r}") from None
    if not 0 <= value < vocab_size:
        raise ValueError(f"{name}: expected a token id in [0, {vocab_size}), got {value!r}")
    return value


def prompts_without_mask(prompts, mask_id: int) -> None:
    """A prompt holding the mask id is refused: a target would read that position as one to fill in, not as given
    text."""
    for i, p in enumerate(prompts):
        if mask_id in (p.tolist() if hasattr(p, "tolist") else p):
            raise ValueError(f"prompts[{i}]: holds the mask id {mask_id}: the model would read that position as one to "
                             "fill in, not as given text")


def split_prompt_heads(prompts, block_size: int, eos_id: int | None) -> tuple[list[list[int]], list[list[int]]]:
    """Each prompt's whole blocks and its head, the last len % block_size tokens, which open its first block where
    blocks sit at absolute positions (SDAR). A head holding `eos_id` is refused: the decoder would read it as the
    answer's end and close the row."""
    whole, heads = [], []
    for p in prompts:
        p = [int(t) for t in p]
        cut = len(p) // block_size * block_size
        if eos_id is not None and eos_id in p[cut:]:
            raise ValueError(f"prompts: a prompt's last len % {block_size} tokens open the first block, and one of "
                             f"them is the end-of-sequence id {eos_id}; choose a block size that leaves it in a whole "
                             "prompt block, or build the target with eos_id=None")
        whole.append(p[:cut])
        heads.append(p[cut:])
    return whole, heads


def temperature(name: str, value) -> float:
    """0 (greedy) or a number in [MIN_TEMPERATURE, FLOAT32_MAX]: finite in float32 too, where the logits are
    scaled (a larger one becomes inf there)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    if value > FLOAT32_MAX:
        raise ValueError(f"{name}: expected at most {FLOAT32_MAX:.4g} (the largest float32; the logits are scaled "
                         f"in float32), got {value!r}")
    if 0 < value < MIN_TEMPERATURE:
        raise ValueError(f"{name}: expected 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {value!r} (smaller "
                         "temperatures overflow the scaled logits)")
    return float(value)


def callable_or_none(name: str, value) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name}: expected None or a callable, got {type(value).__name__} ({value!r})")
