"""The linear-time core of linearized attention, forward and decode: out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z with S = Σ φ(k_j) v_jᵀ.

Both `linear` (elu+1) and `performer` (FAVOR+) are a feature map φ plus this core; the feature map
is part of the algorithm, so the dense reference and the native path use the same φ.
"""

from __future__ import annotations

import math

import torch

from variants.native.core import cache_elements, cache_rows
from variants.native.linearized.chunks import bidirectional_chunks, causal_chunks
from variants.native.linearized.grad import Bidirectional, Causal
from variants.native.linearized.state import FeatureMap, features_of, masked_rows, recording, rescale, rows_per_step

MIN_ROWS = 256  # a bidirectional chunk's rows, at least


def linear_time(phi: FeatureMap, q, k, v, causal: bool, *, budget: int = 1 << 18) -> torch.Tensor:
    """Q′(K′ᵀV) in O(n·m·d) time, streaming over row chunks so the working set stays in cache
    (chunks of `rows_per_step`).

    Bidirectional: one pass accumulates S = Σ φ(k_j) v_jᵀ and z = Σ φ(k_j), a second applies them.
    Causal: one pass over chunks; within a chunk the masked (C × C) form, before it the running
    state of all earlier chunks (chunked prefix sums). Under autograd each has its own backward
    (variants.native.linearized.grad), which recomputes φ chunk by chunk.
    """
    b, h, n, d = q.shape
    budget, m = cache_elements(q, budget), features_of(phi, d)
    if causal:  # NB: each chunk's (C × C) scores are at most a quarter of the output's size: C² ≤ n·d/4
        step = rows_per_step(
            phi,
            q,
            min(
                cache_rows(q, masked_rows(m, d)),
                max(32, budget // (b * h * max(d, m))),
                max(32, math.isqrt(n * d // 4)),
            ),
            causal=True,
        )
    else:  # NB: 256 rows at least: rfa's and performer's forwards (m = 256 features) were slower with 128;
        # elu+1's 512 (m = d = 64) stay, where 1024 was slower (docs/performance.md, "Figures behind the code's
        # choices")
        step = rows_per_step(phi, q, max(MIN_ROWS, budget // (b * h * max(d, m))))
    if recording(q, k, v):
        return (Causal if causal else Bidirectional).apply(q, k, v, phi, step)
    return (causal_chunks(phi, q, k, v, step) if causal else bidirectional_chunks(phi, q, k, v, step))[0]


def state_of(phi: FeatureMap, k, v):
    """The running state (S, z, log-scale) of the keys and values given: a decode cache. Setup."""
    fk, scale = phi.key(k)  # (B, H, n, m)
    return fk.transpose(-1, -2) @ v, fk.sum(dim=-2), scale  # (B, H, m, d), (B, H, m)


def decode_step(phi: FeatureMap, q, k, v, state) -> torch.Tensor:
    """One decode step: the newest key and value into the state, the one query out of it. O(m·d),
    whatever the length of the cache behind the state."""
    fk, s = phi.key(k)  # (B, H, 1, m)
    big_s, z, scale = state
    big_s, z, _, weight = rescale(big_s, z, scale, s)
    fk = fk * weight
    big_s, z = big_s + fk.transpose(-1, -2) @ v, z + fk.sum(dim=-2)
    fq = phi.query(q)  # (B, H, 1, m)
    return (fq @ big_s) / (fq @ z[..., None])
