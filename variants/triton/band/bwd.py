"""The band backward, FlashAttention-2's: P recomputed from the scores and the whole pattern's
log-sum-exp, dS = P ∘ (dO·Vᵀ − δ) with δ = rowsum(dO ∘ O). Two kernels, no atomics: dQ by blocks of
queries over the keys they reach (as the forward), dK and dV by blocks of keys over the queries
that reach them (`ranges.query_range`). Each adds its part's share to what earlier parts left in the
buffers, so the parts of a pattern go one after another, or writes it (variants.triton.backward)."""

from __future__ import annotations

import triton
import triton.language as tl

from variants.triton.backward import put
from variants.triton.band.ranges import allowed, key_count, key_position, key_range, query_range
from variants.triton.online import head_scale
from variants.triton.tiles import Tiles, launch, launch_dtypes


@triton.jit(
    do_not_specialize=["H", "keys", "r0", "r1", "p1", "p2"]
)  # the parameters: one compile for all (variants.triton.tiles)
def band_dq_kernel(
    Q,
    K,
    V,
    DO,
    L,
    DELTA,
    DQ,
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
    ACC: tl.constexpr,
    PREC: tl.constexpr,
    ADD: tl.constexpr,
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
    tile = rows[:, None] & cols[None, :]
    own = bh * n * d + i[:, None] * d + c[None, :]  # the contiguous (B, H, n, d) buffers
    q = tl.load(Q + b * sq_b + h * sq_h + i[:, None] * sq_n + c[None, :], mask=tile, other=0.0)
    do = tl.load(DO + own, mask=tile, other=0.0)
    lse = tl.load(L + bh * n + i, mask=rows, other=0.0)
    delta = tl.load(DELTA + bh * n + i, mask=rows, other=0.0)
    scale = head_scale(d, ACC)
    dq = tl.zeros([BM, BD], ACC)
    lo, hi = key_range(KIND, CAUSAL, first, tl.minimum(first + BM, r1) - 1, n, keys, p1, p2)
    for t0 in range((lo // BN) * BN, hi, BN):
        t = t0 + tl.arange(0, BN)
        j = key_position(KIND, t, p1, p2)
        inside = (t >= lo) & (t < hi)
        k = tl.load(
            K + b * sk_b + h * sk_h + j[:, None] * sk_n + c[None, :], mask=inside[:, None] & cols[None, :], other=0.0
        )
        v = tl.load(
            V + b * sv_b + h * sv_h + j[:, None] * sv_n + c[None, :], mask=inside[:, None] & cols[None, :], other=0.0
        )
        s = tl.dot(q, tl.trans(k), input_precision=PREC).to(ACC) * scale
        ok = rows[:, None] & inside[None, :] & allowed(KIND, CAUSAL, i[:, None], j[None, :], n, p1, p2)
        p = tl.where(ok, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do.to(v.dtype), tl.trans(v), input_precision=PREC).to(ACC)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC).to(ACC)
    put(DQ + own, dq * scale, tile, ADD)


@triton.jit(
    do_not_specialize=["H", "keys", "r0", "r1", "p1", "p2"]
)  # the parameters: one compile for all (variants.triton.tiles)
def band_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    L,
    DELTA,
    DK,
    DV,
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
    ACC: tl.constexpr,
    PREC: tl.constexpr,
    ADD: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
):
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    t = tl.program_id(0) * BN + tl.arange(0, BN)
    inside = t < keys
    j = key_position(KIND, t, p1, p2)
    c = tl.arange(0, BD)
    cols = c < d
    tile = inside[:, None] & cols[None, :]
    k = tl.load(K + b * sk_b + h * sk_h + j[:, None] * sk_n + c[None, :], mask=tile, other=0.0)
    v = tl.load(V + b * sv_b + h * sv_h + j[:, None] * sv_n + c[None, :], mask=tile, other=0.0)
    scale = head_scale(d, ACC)
    dk = tl.zeros([BN, BD], ACC)
    dv = tl.zeros([BN, BD], ACC)
    lo, hi = query_range(
        KIND, CAUSAL, tl.program_id(0) * BN, tl.minimum(tl.program_id(0) * BN + BN, keys) - 1, n, p1, p2
    )
    lo, hi = tl.maximum(lo, r0), tl.minimum(hi, r1)
    for m0 in range((lo // BM) * BM, hi, BM):
        i = m0 + tl.arange(0, BM)
        rows = (i >= lo) & (i < hi)
        q_tile = rows[:, None] & cols[None, :]
        q = tl.load(Q + b * sq_b + h * sq_h + i[:, None] * sq_n + c[None, :], mask=q_tile, other=0.0)
        do = tl.load(DO + bh * n * d + i[:, None] * d + c[None, :], mask=q_tile, other=0.0)
        lse = tl.load(L + bh * n + i, mask=rows, other=0.0)
        delta = tl.load(DELTA + bh * n + i, mask=rows, other=0.0)
        st = tl.dot(k, tl.trans(q), input_precision=PREC).to(ACC) * scale  # (keys, queries)
        ok = inside[:, None] & rows[None, :] & allowed(KIND, CAUSAL, i[None, :], j[:, None], n, p1, p2)
        pt = tl.where(ok, tl.exp(st - lse[None, :]), 0.0)
        dv += tl.dot(pt.to(v.dtype), do.to(v.dtype), input_precision=PREC).to(ACC)
        dpt = tl.dot(v, tl.trans(do.to(v.dtype)), input_precision=PREC).to(ACC)
        dst = pt * (dpt - delta[None, :])
        dk += tl.dot(dst.to(q.dtype), q, input_precision=PREC).to(ACC)
    at = bh * n * d + j[:, None] * d + c[None, :]
    put(DK + at, dk * scale, tile, ADD)
    put(DV + at, dv, tile, ADD)


def band_bwd(
    q,
    k,
    v,
    do,
    lse,
    delta,
    dq,
    dk,
    dv,
    *,
    kind: int,
    p1: int,
    p2: int = 0,
    rows: tuple[int, int] | None = None,
    causal: bool,
    add: bool = True,
) -> None:
    """Add one band part's share of dQ, dK, dV (contiguous; `add=False`: write it, see variants.triton.backward). `do`:
    contiguous
    (B, H, n, d) in the inputs' dtype; lse and delta (B, H, n) of the whole pattern."""
    b, h, n, d = q.shape
    r0, r1 = rows or (0, n)
    keys = key_count(kind, n, p1, p2)
    if r1 <= r0 or keys == 0:
        return
    acc, prec = launch_dtypes(q)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    common = dict(KIND=int(kind), CAUSAL=causal, ACC=acc, PREC=prec, ADD=add)
    t = Tiles.band_dq(q)
    launch(
        band_dq_kernel,
        (triton.cdiv(r1 - r0, t.bm), b * h),
        q,
        k,
        v,
        do,
        lse,
        delta,
        dq,
        *strides,
        h,
        n,
        d,
        keys,
        r0,
        r1,
        p1,
        p2,
        **common,
        BM=t.bm,
        BN=t.bn,
        BD=t.bd,
        num_warps=t.warps,
        num_stages=t.stages,
    )
    t = Tiles.band_dkdv(q)
    launch(
        band_dkdv_kernel,
        (triton.cdiv(keys, t.bn), b * h),
        q,
        k,
        v,
        do,
        lse,
        delta,
        dk,
        dv,
        *strides,
        h,
        n,
        d,
        keys,
        r0,
        r1,
        p1,
        p2,
        **common,
        BM=t.bm,
        BN=t.bn,
        BD=t.bd,
        num_warps=t.warps,
        num_stages=t.stages,
    )
