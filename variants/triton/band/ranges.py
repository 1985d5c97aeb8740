"""The band family's index arithmetic: which keys a block of queries reaches, which queries a block
of keys is reached by, and which pairs of those are allowed, for each kind of band. Nothing is
stored: the kernels compute it (constexpr `KIND` picks the formula at compile time).

    WINDOW        |i − j| <= p1                       sliding window; strided's local part (p1 = l − 1)
    NEIGHBORHOOD  s_i <= j < s_i + p1, s_i = clamp(i − p1//2, 0, n − p1)    NATTEN's window of p1 keys
    BLOCKS        ⌊i/p1⌋ = ⌊j/p1⌋                     fixed's own block
    RECT          j < p1 and i − j > p2               global keys (p2 = −n: all; bigbird: p2 = w)
    SUMMARY       key t is position ⌊t/p2⌋·p1 + p1 − p2 + t mod p2, and ⌊i/p1⌋ ≠ ⌊j/p1⌋
                  fixed's summary keys (block p1, c = p2 per block), keys counted in summary space

Every kind adds j <= i when causal. A part's rows are [r0, r1) (bigbird's rows i >= g, say).
"""

from __future__ import annotations

import triton
import triton.language as tl

# tl.constexpr: Triton's compiler reads a global inside @triton.jit only when it is one (the interpreter reads any);
# host code compares them as numbers and launches pass int(kind)
WINDOW, NEIGHBORHOOD, BLOCKS, RECT, SUMMARY = (tl.constexpr(kind) for kind in range(5))
KINDS = {"window": WINDOW, "neighborhood": NEIGHBORHOOD, "blocks": BLOCKS, "rect": RECT, "summary": SUMMARY}


def key_count(kind: int, n: int, p1: int, p2: int) -> int:
    """Keys of the part's key space: positions, or RECT's p1 keys, or SUMMARY's summary keys."""
    if kind == RECT:
        return min(p1, n)
    if kind == SUMMARY:
        return (n // p1) * p2 + max(n % p1 - (p1 - p2), 0)
    return n


@triton.jit
def key_position(KIND: tl.constexpr, t, p1, p2):
    """The position of key t of the part's key space."""
    if KIND == SUMMARY:
        return (t // p2) * p1 + (p1 - p2) + t % p2
    else:
        return t


@triton.jit
def summaries_before(x, p1, p2):
    """How many summary positions lie below x (SUMMARY's key space up to position x)."""
    return (x // p1) * p2 + tl.maximum(x % p1 - (p1 - p2), 0)


@triton.jit
def key_range(KIND: tl.constexpr, CAUSAL: tl.constexpr, first, last, n, keys, p1, p2):
    """[lo, hi) of the key space that queries first..last reach (a superset: pairs are masked)."""
    if KIND == WINDOW:
        lo = tl.maximum(first - p1, 0)
        hi = last + p1 + 1
    elif KIND == NEIGHBORHOOD:
        lo = tl.minimum(tl.maximum(first - p1 // 2, 0), n - p1)
        hi = tl.minimum(tl.maximum(last - p1 // 2, 0), n - p1) + p1
    elif KIND == BLOCKS:
        lo = (first // p1) * p1
        hi = (last // p1 + 1) * p1
    elif KIND == RECT:
        lo = first * 0
        hi = tl.minimum(last - p2, keys)
    else:
        lo = first * 0
        hi = keys
    if CAUSAL:
        if KIND == SUMMARY:
            hi = tl.minimum(hi, summaries_before(last + 1, p1, p2))
        else:
            hi = tl.minimum(hi, last + 1)
    return lo, tl.minimum(hi, keys)


@triton.jit
def query_range(KIND: tl.constexpr, CAUSAL: tl.constexpr, first, last, n, p1, p2):
    """[lo, hi) of the queries that reach keys first..last of the key space (a superset)."""
    if KIND == WINDOW:
        lo = first - p1
        hi = last + p1 + 1
    elif KIND == NEIGHBORHOOD:
        lo = tl.where(first < p1, 0, first - p1 + p1 // 2 + 1)
        hi = tl.where(last >= n - p1, n, last + p1 // 2 + 1)
    elif KIND == BLOCKS:
        lo = (first // p1) * p1
        hi = (last // p1 + 1) * p1
    elif KIND == RECT:
        lo = first + p2 + 1
        hi = n + first * 0
    else:
        lo = first * 0
        hi = n + first * 0
    if CAUSAL:
        lo = tl.maximum(lo, key_position(KIND, first, p1, p2))
    return tl.maximum(lo, 0), tl.minimum(hi, n)


@triton.jit
def allowed(KIND: tl.constexpr, CAUSAL: tl.constexpr, i, j, n, p1, p2):
    """Whether query position i takes key position j (broadcast shapes)."""
    if KIND == WINDOW:
        ok = tl.abs(i - j) <= p1
    elif KIND == NEIGHBORHOOD:
        start = tl.minimum(tl.maximum(i - p1 // 2, 0), n - p1)
        ok = (j >= start) & (j < start + p1)
    elif KIND == BLOCKS:
        ok = (i // p1) == (j // p1)
    elif KIND == RECT:
        ok = (j < p1) & (i - j > p2)
    else:
        ok = (i // p1) != (j // p1)
    if CAUSAL:
        ok = ok & (j <= i)
    return ok
