"""Strided's residue classes, backward (as the band's: FlashAttention-2's, no atomics): dQ by blocks
of a class's members over its keys, dK and dV by blocks of its keys over the members that take them."""

from __future__ import annotations

import triton
import triton.language as tl

from variants.triton.backward import put
from variants.triton.online import head_scale
from variants.triton.tiles import Tiles, launch, launch_dtypes


@triton.jit(do_not_specialize=["H", "l", "blocks"])  # the parameters: one compile for all (variants.triton.tiles)
def residue_dq_kernel(
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
    l,
    blocks,
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
    r = tl.program_id(0) // blocks
    m = (tl.program_id(0) % blocks) * BM + tl.arange(0, BM)
    i = r + m * l
    count = (n - r + l - 1) // l
    c = tl.arange(0, BD)
    rows, cols = m < count, c < d
    tile = rows[:, None] & cols[None, :]
    own = bh * n * d + i[:, None] * d + c[None, :]
    q = tl.load(Q + b * sq_b + h * sq_h + i[:, None] * sq_n + c[None, :], mask=tile, other=0.0)
    do = tl.load(DO + own, mask=tile, other=0.0)
    lse = tl.load(L + bh * n + i, mask=rows, other=0.0)
    delta = tl.load(DELTA + bh * n + i, mask=rows, other=0.0)
    scale = head_scale(d, ACC)
    dq = tl.zeros([BM, BD], ACC)
    hi = tl.minimum(count, (tl.program_id(0) % blocks) * BM + BM) if CAUSAL else count
    for t0 in range(0, hi, BN):
        t = t0 + tl.arange(0, BN)
        j = r + t * l
        inside = t < count
        k = tl.load(
            K + b * sk_b + h * sk_h + j[:, None] * sk_n + c[None, :], mask=inside[:, None] & cols[None, :], other=0.0
        )
        v = tl.load(
            V + b * sv_b + h * sv_h + j[:, None] * sv_n + c[None, :], mask=inside[:, None] & cols[None, :], other=0.0
        )
        s = tl.dot(q, tl.trans(k), input_precision=PREC).to(ACC) * scale
        ok = rows[:, None] & inside[None, :] & ((t[None, :] < m[:, None]) if CAUSAL else (t[None, :] != m[:, None]))
        p = tl.where(ok, tl.exp(s - lse[:, None]), 0.0)
        ds = p * (tl.dot(do.to(v.dtype), tl.trans(v), input_precision=PREC).to(ACC) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC).to(ACC)
    put(DQ + own, dq * scale, tile, ADD)


@triton.jit(do_not_specialize=["H", "l", "blocks"])  # the parameters: one compile for all (variants.triton.tiles)
def residue_dkdv_kernel(
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
    l,
    blocks,
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
    r = tl.program_id(0) // blocks
    t = (tl.program_id(0) % blocks) * BN + tl.arange(0, BN)  # BN keys of class r
    j = r + t * l
    count = (n - r + l - 1) // l
    c = tl.arange(0, BD)
    inside, cols = t < count, c < d
    tile = inside[:, None] & cols[None, :]
    k = tl.load(K + b * sk_b + h * sk_h + j[:, None] * sk_n + c[None, :], mask=tile, other=0.0)
    v = tl.load(V + b * sv_b + h * sv_h + j[:, None] * sv_n + c[None, :], mask=tile, other=0.0)
    scale = head_scale(d, ACC)
    dk = tl.zeros([BN, BD], ACC)
    dv = tl.zeros([BN, BD], ACC)
    lo = (tl.program_id(0) % blocks) * BN if CAUSAL else 0
    for m0 in range(lo, count, BM):
        m = m0 + tl.arange(0, BM)
        i = r + m * l
        rows = m < count
        q_tile = rows[:, None] & cols[None, :]
        q = tl.load(Q + b * sq_b + h * sq_h + i[:, None] * sq_n + c[None, :], mask=q_tile, other=0.0)
        do = tl.load(DO + bh * n * d + i[:, None] * d + c[None, :], mask=q_tile, other=0.0)
        lse = tl.load(L + bh * n + i, mask=rows, other=0.0)
        delta = tl.load(DELTA + bh * n + i, mask=rows, other=0.0)
        st = tl.dot(k, tl.trans(q), input_precision=PREC).to(ACC) * scale
        ok = inside[:, None] & rows[None, :] & ((t[:, None] < m[None, :]) if CAUSAL else (t[:, None] != m[None, :]))
        pt = tl.where(ok, tl.exp(st - lse[None, :]), 0.0)
        dv += tl.dot(pt.to(v.dtype), do.to(v.dtype), input_precision=PREC).to(ACC)
        dst = pt * (tl.dot(v, tl.trans(do.to(v.dtype)), input_precision=PREC).to(ACC) - delta[None, :])
        dk += tl.dot(dst.to(q.dtype), q, input_precision=PREC).to(ACC)
    at = bh * n * d + j[:, None] * d + c[None, :]
    put(DK + at, dk * scale, tile, ADD)
    put(DV + at, dv, tile, ADD)


def residue_bwd(q, k, v, do, lse, delta, dq, dk, dv, *, stride: int, causal: bool, add: bool = True) -> None:
    """Add the residue classes' share of dQ, dK, dV (as band_bwd's)."""
    b, h, n, d = q.shape
    acc, prec = launch_dtypes(q)
    count = triton.cdiv(n, stride)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    t = Tiles.band_dq(q)
    blocks = triton.cdiv(count, t.bm)
    launch(
        residue_dq_kernel,
        (stride * blocks, b * h),
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
        stride,
        blocks,
        CAUSAL=causal,
        ACC=acc,
        PREC=prec,
        ADD=add,
        BM=t.bm,
        BN=t.bn,
        BD=t.bd,
        num_warps=t.warps,
        num_stages=t.stages,
    )
    t = Tiles.band_dkdv(q)
    blocks = triton.cdiv(count, t.bn)
    launch(
        residue_dkdv_kernel,
        (stride * blocks, b * h),
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
        stride,
        blocks,
        CAUSAL=causal,
        ACC=acc,
        PREC=prec,
        ADD=add,
        BM=t.bm,
        BN=t.bn,
        BD=t.bd,
        num_warps=t.warps,
        num_stages=t.stages,
    )
