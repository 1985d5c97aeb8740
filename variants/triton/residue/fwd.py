"""Strided's residue classes, forward: keys j ≡ i (mod l), j ≠ i (j < i when causal). Class r holds
positions r + m·l; a program takes BM members of one class and head and scores the class's members
BN at a time, rows and keys addressed by index arithmetic (row stride l·d): no reordered copy. The
work is l classes · (n/l)² · d = n²/l · d, O(n^1.5·d) for l ∝ √n, as the claim's residue part."""

from __future__ import annotations

import triton
import triton.language as tl

from variants.triton.online import finish, head_scale, rescale, resume
from variants.triton.tiles import Tiles, launch, launch_dtypes


@triton.jit(do_not_specialize=["H", "l", "blocks"])  # the parameters: one compile for all (variants.triton.tiles)
def residue_fwd_kernel(
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
    l,
    blocks,
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
    r = tl.program_id(0) // blocks  # the class
    m = (tl.program_id(0) % blocks) * BM + tl.arange(0, BM)  # its members
    i = r + m * l
    count = (n - r + l - 1) // l  # members of class r
    c = tl.arange(0, BD)
    rows, cols = m < count, c < d
    q = tl.load(Q + b * sq_b + h * sq_h + i[:, None] * sq_n + c[None, :], mask=rows[:, None] & cols[None, :], other=0.0)
    o_ptrs = O + bh * n * d + i[:, None] * d + c[None, :]
    l_ptrs = L + bh * n + i
    mx, total, acc = resume(o_ptrs, l_ptrs, rows, cols, FIRST, ACC, BM, BD)
    scale = head_scale(d, ACC)
    hi = tl.minimum(count, (tl.program_id(0) % blocks) * BM + BM) if CAUSAL else count
    for t0 in range(0, hi, BN):
        t = t0 + tl.arange(0, BN)
        j = r + t * l
        inside = t < count
        k = tl.load(
            K + b * sk_b + h * sk_h + j[:, None] * sk_n + c[None, :], mask=inside[:, None] & cols[None, :], other=0.0
        )
        s = tl.dot(q, tl.trans(k), input_precision=PREC).to(ACC) * scale
        ok = inside[None, :] & ((t[None, :] < m[:, None]) if CAUSAL else (t[None, :] != m[:, None]))
        s = tl.where(ok, s, float("-inf"))
        m_new, alpha, shift = rescale(mx, total, s)
        p = tl.exp(s - shift[:, None])
        v = tl.load(
            V + b * sv_b + h * sv_h + j[:, None] * sv_n + c[None, :], mask=inside[:, None] & cols[None, :], other=0.0
        )
        total = total * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC).to(ACC)
        mx = m_new
    finish(o_ptrs, l_ptrs, mx, total, acc, rows, cols)


def residue_fwd(q, k, v, out, lse, *, stride: int, causal: bool, first: bool) -> None:
    """The residue classes of stride l into (out, lse), as band_fwd's."""
    b, h, n, d = q.shape
    t = Tiles.band_fwd(q)
    blocks = triton.cdiv(triton.cdiv(n, stride), t.bm)  # member blocks of the largest class
    acc, prec = launch_dtypes(q)
    launch(
        residue_fwd_kernel,
        (stride * blocks, b * h),
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
        stride,
        blocks,
        CAUSAL=causal,
        FIRST=first,
        ACC=acc,
        PREC=prec,
        BM=t.bm,
        BN=t.bn,
        BD=t.bd,
        num_warps=t.warps,
        num_stages=t.stages,
    )
