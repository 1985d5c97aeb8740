"""The key-list forward: a program per block of BM query rows and head; each row's keys are its
row of an (n, R) int32 list (−1: no key), BN slots a step, gathered by index as (BM, BN, d) tiles.
Scores are row-wise dot products (no tensor cores: the work is O(n·R·d) gathers, bound by memory),
softmax online (variants.triton.online). No n×n anything."""

from __future__ import annotations

import triton
import triton.language as tl

from variants.triton.online import finish, head_scale, rescale, resume
from variants.triton.tiles import Tiles, launch, launch_dtypes


@triton.jit(do_not_specialize=["H", "R"])  # the parameters: one compile for all (variants.triton.tiles)
def gather_fwd_kernel(
    Q,
    K,
    V,
    O,
    L,
    IDX,
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
    R,
    FIRST: tl.constexpr,
    ACC: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
):
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    c = tl.arange(0, BD)
    rows, cols = i < n, c < d
    q = tl.load(
        Q + b * sq_b + h * sq_h + i[:, None] * sq_n + c[None, :], mask=rows[:, None] & cols[None, :], other=0.0
    ).to(ACC)
    o_ptrs = O + bh * n * d + i[:, None] * d + c[None, :]
    l_ptrs = L + bh * n + i
    m, l, acc = resume(o_ptrs, l_ptrs, rows, cols, FIRST, ACC, BM, BD)
    scale = head_scale(d, ACC)
    for s0 in range(0, R, BN):
        slot = s0 + tl.arange(0, BN)
        j = tl.load(IDX + i[:, None] * R + slot[None, :], mask=rows[:, None] & (slot < R)[None, :], other=-1)
        ok = j >= 0
        at = j[:, :, None] * sk_n + c[None, None, :]
        gathered = ok[:, :, None] & cols[None, None, :]
        k = tl.load(K + b * sk_b + h * sk_h + at, mask=gathered, other=0.0).to(ACC)  # (BM, BN, BD)
        s = tl.where(ok, tl.sum(k * q[:, None, :], 2) * scale, float("-inf"))
        m_new, alpha, shift = rescale(m, l, s)
        p = tl.exp(s - shift[:, None])
        v = tl.load(V + b * sv_b + h * sv_h + j[:, :, None] * sv_n + c[None, None, :], mask=gathered, other=0.0).to(ACC)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v, 1)
        m = m_new
    finish(o_ptrs, l_ptrs, m, l, acc, rows, cols)


def gather_fwd(q, k, v, out, lse, idx, *, first: bool) -> None:
    """One key-list part into (out, lse) (as band_fwd's): `idx` (n, R) int32, −1 where a slot is empty."""
    b, h, n, d = q.shape
    if idx.shape[1] == 0:
        if first:
            out.zero_()
            lse.fill_(float("-inf"))
        return
    t = Tiles.gather(q)
    acc, _ = launch_dtypes(q)
    launch(
        gather_fwd_kernel,
        (triton.cdiv(n, t.bm), b * h),
        q,
        k,
        v,
        out,
        lse,
        idx,
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        h,
        n,
        d,
        idx.shape[1],
        FIRST=first,
        ACC=acc,
        BM=t.bm,
        BN=t.bn,
        BD=t.bd,
        num_warps=t.warps,
        num_stages=t.stages,
    )
