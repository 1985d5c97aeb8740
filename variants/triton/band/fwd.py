"""The band forward: a program per block of BM queries and head, over the key blocks its band
reaches (`ranges.key_range`), scored BN keys at a time with tl.dot, masked by the kind's pairs,
softmax online (variants.triton.online). O(n·(reach + BN)·d), no n×n anything."""

from __future__ import annotations

import triton
import triton.language as tl

from variants.triton.band.ranges import allowed, key_count, key_position, key_range
from variants.triton.online import finish, head_scale, rescale, resume
from variants.triton.tiles import Tiles, launch, launch_dtypes


@triton.jit(
    do_not_specialize=["H", "keys", "r0", "r1", "p1", "p2"]
)  # the parameters: one compile for all (variants.triton.tiles)
def band_fwd_kernel(
    Q,
    K,
    V,
    O,
    L,
    sq_b,
    sq_h,
    sq_n,
    sk_b,
    sk_h,
    sk_n,
    sv_b,
    sv_h,
    sv_n,
    H,
    n,
    d,
    keys,
    r0,
    r1,
    p1,
    p2,
    KIND: tl.constexpr,
    CAUSAL: tl.constexpr,
    FIRST: tl.constexpr,
    ACC: tl.constexpr,
    PREC: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
):
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    first = r0 + tl.program_id(0) * BM
    i = first + tl.arange(0, BM)
    c = tl.arange(0, BD)
    rows, cols = i < r1, c < d
    q = tl.load(Q + b * sq_b + h * sq_h + i[:, None] * sq_n + c[None, :], mask=rows[:, None] & cols[None, :], other=0.0)
    o_ptrs = O + bh * n * d + i[:, None] * d + c[None, :]
    l_ptrs = L + bh * n + i
    m, l, acc = resume(o_ptrs, l_ptrs, rows, cols, FIRST, ACC, BM, BD)
    scale = head_scale(d, ACC)
    lo, hi = key_range(KIND, CAUSAL, first, tl.minimum(first + BM, r1) - 1, n, keys, p1, p2)
    for t0 in range((lo // BN) * BN, hi, BN):
        t = t0 + tl.arange(0, BN)
        j = key_position(KIND, t, p1, p2)
        inside = (t >= lo) & (t < hi)
        k = tl.load(
            K + b * sk_b + h * sk_h + j[:, None] * sk_n + c[None, :], mask=inside[:, None] & cols[None, :], other=0.0
        )
        s = tl.dot(q, tl.trans(k), input_precision=PREC).to(ACC) * scale
        ok = inside[None, :] & allowed(KIND, CAUSAL, i[:, None], j[None, :], n, p1, p2)
        s = tl.where(ok, s, float("-inf"))
        m_new, alpha, shift = rescale(m, l, s)
        p = tl.exp(s - shift[:, None])
        v = tl.load(
            V + b * sv_b + h * sv_h + j[:, None] * sv_n + c[None, :], mask=inside[:, None] & cols[None, :], other=0.0
        )
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC).to(ACC)
        m = m_new
    finish(o_ptrs, l_ptrs, m, l, acc, rows, cols)


def band_fwd(
    q,
    k,
    v,
    out,
    lse,
    *,
    kind: int,
    p1: int,
    p2: int = 0,
    rows: tuple[int, int] | None = None,
    causal: bool,
    first: bool,
    tiles: Tiles | None = None,
) -> None:
    """One band part into (out, lse) (B, H, n, d) and (B, H, n) in the accumulator's dtype: written
    (`first`: every row of the part's) or merged into what earlier parts left there."""
    b, h, n, d = q.shape
    r0, r1 = rows or (0, n)
    keys = key_count(kind, n, p1, p2)
    if r1 <= r0 or (keys == 0 and not first):  # no row or no key: nothing to merge (bigbird with g = 0)
        return
    tiles = tiles or Tiles.band_fwd(q)
    acc, prec = launch_dtypes(q)
    grid = (triton.cdiv(r1 - r0, tiles.bm), b * h)
    launch(
        band_fwd_kernel,
        grid,
        q,
        k,
        v,
        out,
        lse,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        h,
        n,
        d,
        keys,
        r0,
        r1,
        p1,
        p2,
        KIND=int(kind),
        CAUSAL=causal,
        FIRST=first,
        ACC=acc,
        PREC=prec,
        BM=tiles.bm,
        BN=tiles.bn,
        BD=tiles.bd,
        num_warps=tiles.warps,
        num_stages=tiles.stages,
    )
