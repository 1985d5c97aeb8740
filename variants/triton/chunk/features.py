"""Feature maps computed inside the chunk kernels, on a tile of rows (BT, BD) already in registers.

    IDENTITY  φ(x) = x                                   (the backward's products)
    ELU       φ(x) = elu(x) + 1                          linear
    FAVOR     φ(x) = exp(ωᵀx′ − ‖x′‖²/2 − top − ½ log m), x′ = x·d^(−1/4)    performer: top is the
              row's largest logit for a query, the head's largest over every key for a key (`STAB`)
    FOURIER   φ(x) = √(2/m)·[sin ωx̂, cos ωx̂], x̂ = x/max(‖x‖, 1e−12); W holds ω twice    rfa

As variants.catalog.linear, .performer and .rfa define them (the dense reference uses those):
the same formulas, evaluated in the accumulator's precision. Features past m, and rows past n, are 0.
"""

from __future__ import annotations

import triton
import triton.language as tl

IDENTITY, ELU, FAVOR, FOURIER = (tl.constexpr(kind) for kind in range(4))  # constexpr: read inside @triton.jit


@triton.jit
def favor_logits(x, w, d, ACC: tl.constexpr, DOT: tl.constexpr, PREC: tl.constexpr):
    """ωᵀx′ − ‖x′‖²/2 on x′ = x·d^(−1/4): (BT, BF)."""
    xs = x * (1.0 / tl.sqrt(tl.sqrt(tl.zeros([], ACC) + d)))
    logits = tl.dot(xs.to(DOT), tl.trans(w), input_precision=PREC).to(ACC)
    return logits - tl.sum(xs * xs, 1)[:, None] * 0.5


@triton.jit
def load_w(W, d, m, BF: tl.constexpr, BD: tl.constexpr, DOT: tl.constexpr):
    f = tl.arange(0, BF)
    c = tl.arange(0, BD)
    return tl.load(W + f[:, None] * d + c[None, :], mask=(f < m)[:, None] & (c < d)[None, :], other=0.0).to(DOT)


@triton.jit
def feature_map(
    x,
    rows,
    W,
    top,
    d,
    m,
    KIND: tl.constexpr,
    QUERY: tl.constexpr,
    ACC: tl.constexpr,
    DOT: tl.constexpr,
    PREC: tl.constexpr,
    BF: tl.constexpr,
    BD: tl.constexpr,
):
    """φ of the rows x (BT, BD) in ACC (columns past d are 0): (BT, BF), 0 past m and on masked rows.
    `top`: a key's stabilizer (FAVOR keys), unused otherwise."""
    f = tl.arange(0, BF)
    keep = rows[:, None] & (f < m)[None, :]
    if KIND == IDENTITY:
        phi = x
    elif KIND == ELU:
        phi = tl.where(x > 0, x + 1.0, tl.exp(tl.minimum(x, 0.0)))
    elif KIND == FAVOR:
        logits = favor_logits(x, load_w(W, d, m, BF, BD, DOT), d, ACC, DOT, PREC)
        if QUERY:
            top = tl.max(tl.where(keep, logits, float("-inf")), 1)[:, None]
            top = tl.where(top == float("-inf"), 0.0, top)
        phi = tl.exp(logits - top - 0.5 * tl.log(tl.zeros([], ACC) + m))
    else:
        norm = tl.sqrt(tl.sum(x * x, 1))
        unit = x / tl.maximum(norm, 1e-12)[:, None]
        angles = tl.dot(unit.to(DOT), tl.trans(load_w(W, d, m, BF, BD, DOT)), input_precision=PREC).to(ACC)
        phi = tl.where((f < m // 2)[None, :], tl.sin(angles), tl.cos(angles)) * tl.sqrt(2.0 / (tl.zeros([], ACC) + m))
    return tl.where(keep, phi, 0.0)
