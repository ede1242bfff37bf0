"""Brute-force formulations of the op contracts in plain Python (ints, floats, loops), independent of spot_kernels.

They transcribe docs/noise.md and docs/ops.md literally and are slow by design: tests use them on small inputs.
"""

import math

M32 = 0xFFFFFFFF


def mix(x: int) -> int:
    x &= M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    x ^= x >> 16
    return x


def word(seed: int, row: int, pos: int, step: int, v: int) -> int:
    h = mix((seed & M32) ^ 0x9E3779B9)
    h = mix(h ^ ((seed >> 32) & M32))
    h = mix(h ^ (row & M32))
    h = mix(h ^ (pos & M32))
    h = mix(h ^ (step & M32))
    return mix(h ^ (v & M32))


def uniform(seed: int, row: int, pos: int, step: int, v: int) -> float:
    """Exact: (w >> 9) + 0.5 needs 24 bits, so the double equals the float32 value."""
    return ((word(seed, row, pos, step, v) >> 9) + 0.5) * 2.0**-23


def gumbel(seed: int, row: int, pos: int, step: int, v: int) -> float:
    return -math.log(-math.log(uniform(seed, row, pos, step, v)))


def softmax(x: list[float]) -> list[float]:
    m = max(x)
    e = [math.exp(v - m) if v != -math.inf else 0.0 for v in x]
    s = sum(e)
    return [v / s for v in e]


def first_argmax(values) -> int:
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def row_invalid(x: list[float]) -> bool:
    return any(math.isnan(v) or v == math.inf for v in x) or all(v == -math.inf for v in x)


def score_row(logits, seed, row, pos, step, temperature, confidence, top_k):
    """One (node, position) row of spot::score in float64: (token, confidence, [(prob, id)] * K, valid)."""
    x = [v / temperature for v in logits] if temperature > 0 else list(logits)
    if row_invalid(x):
        return -1, math.nan, [(0.0, -1)] * top_k, False
    if temperature > 0:
        token = first_argmax([xv + gumbel(seed, row, pos, step, v) for v, xv in enumerate(x)])
    else:
        token = first_argmax(x)
    p = softmax(x)
    order = sorted(range(len(p)), key=lambda v: (-p[v], v))
    if confidence == "prob":
        conf = p[token]
    elif confidence == "raw_prob":
        conf = softmax(list(logits))[token]
    elif confidence == "margin":
        conf = p[order[0]] - (p[order[1]] if len(p) > 1 else 0.0)
    else:
        conf = sum(q * math.log(q) for q in p if q > 0)
    top = [(p[v], v) for v in order[:top_k]] + [(0.0, -1)] * max(0, top_k - len(p))
    return token, conf, top, True


def commit(confs, eligible) -> int:
    best = -1
    for j, (c, e) in enumerate(zip(confs, eligible)):
        if e and (best < 0 or c > confs[best]):
            best = j
    return best
