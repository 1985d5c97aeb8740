"""The key-list backward, atomic-free: dQ by blocks of query rows over their lists (as the forward);
dK and dV by blocks of keys over the entries that name them, the lists transposed in setup (CSR by
key: `transpose`), each block looping as far as its longest entry list. P is recomputed from the
whole pattern's log-sum-exp; dS = P ∘ (dO·vᵀ − δ)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from variants.triton.backward import put
from variants.triton.online import head_scale
from variants.triton.tiles import Tiles, launch, launch_dtypes


@triton.jit(do_not_specialize=["H", "R"])  # the parameters: one compile for all (variants.triton.tiles)
def gather_dq_kernel(
    Q,
    K,
    V,
    DO,
    L,
    DELTA,
    DQ,
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
    ACC: tl.constexpr,
    ADD: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
):
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    c = tl.arange(0, BD)
    rows, cols = i < n, c < d
    tile = rows[:, None] & cols[None, :]
    own = bh * n * d + i[:, None] * d + c[None, :]
    q = tl.load(Q + b * sq_b + h * sq_h + i[:, None] * sq_n + c[None, :], mask=tile, other=0.0).to(ACC)
    do = tl.load(DO + own, mask=tile, other=0.0).to(ACC)
    lse = tl.load(L + bh * n + i, mask=rows, other=0.0)
    delta = tl.load(DELTA + bh * n + i, mask=rows, other=0.0)
    scale = head_scale(d, ACC)
    dq = tl.zeros([BM, BD], ACC)
    for s0 in range(0, R, BN):
        slot = s0 + tl.arange(0, BN)
        j = tl.load(IDX + i[:, None] * R + slot[None, :], mask=rows[:, None] & (slot < R)[None, :], other=-1)
        ok = j >= 0
        gathered = ok[:, :, None] & cols[None, None, :]
        k = tl.load(K + b * sk_b + h * sk_h + j[:, :, None] * sk_n + c[None, None, :], mask=gathered, other=0.0).to(ACC)
        v = tl.load(V + b * sv_b + h * sv_h + j[:, :, None] * sv_n + c[None, None, :], mask=gathered, other=0.0).to(ACC)
        p = tl.where(ok, tl.exp(tl.sum(k * q[:, None, :], 2) * scale - lse[:, None]), 0.0)
        ds = p * (tl.sum(v * do[:, None, :], 2) - delta[:, None])
        dq += tl.sum(ds[:, :, None] * k, 1)
    put(DQ + own, dq * scale, tile, ADD)


@triton.jit(do_not_specialize=["H"])  # the parameters: one compile for all (variants.triton.tiles)
def gather_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    L,
    DELTA,
    DK,
    DV,
    CROW,
    QROW,
    LONGEST,
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
    ACC: tl.constexpr,
    ADD: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
):
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    j = tl.program_id(0) * BM + tl.arange(0, BM)  # BM keys, BN entries of each a step
    c = tl.arange(0, BD)
    keys, cols = j < n, c < d
    tile = keys[:, None] & cols[None, :]
    k = tl.load(K + b * sk_b + h * sk_h + j[:, None] * sk_n + c[None, :], mask=tile, other=0.0).to(ACC)
    v = tl.load(V + b * sv_b + h * sv_h + j[:, None] * sv_n + c[None, :], mask=tile, other=0.0).to(ACC)
    start = tl.load(CROW + j, mask=keys, other=0)
    end = tl.load(CROW + j + 1, mask=keys, other=0)
    scale = head_scale(d, ACC)
    dk = tl.zeros([BM, BD], ACC)
    dv = tl.zeros([BM, BD], ACC)
    for e0 in range(0, tl.load(LONGEST + tl.program_id(0)), BN):
        entry = start[:, None] + e0 + tl.arange(0, BN)[None, :]
        ok = entry < end[:, None]
        i = tl.load(QROW + entry, mask=ok, other=0)  # (BM, BN) the queries naming these keys
        gathered = ok[:, :, None] & cols[None, None, :]
        q = tl.load(Q + b * sq_b + h * sq_h + i[:, :, None] * sq_n + c[None, None, :], mask=gathered, other=0.0).to(ACC)
        do = tl.load(DO + bh * n * d + i[:, :, None] * d + c[None, None, :], mask=gathered, other=0.0).to(ACC)
        lse = tl.load(L + bh * n + i, mask=ok, other=0.0)
        delta = tl.load(DELTA + bh * n + i, mask=ok, other=0.0)
        p = tl.where(ok, tl.exp(tl.sum(q * k[:, None, :], 2) * scale - lse), 0.0)
        dv += tl.sum(p[:, :, None] * do, 1)
        ds = p * (tl.sum(do * v[:, None, :], 2) - delta)
        dk += tl.sum(ds[:, :, None] * q, 1)
    at = bh * n * d + j[:, None] * d + c[None, :]
    put(DK + at, dk * scale, tile, ADD)
    put(DV + at, dv, tile, ADD)


def transpose(idx: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The lists by key: (crow (n + 1,), the query of each entry (entries,), the longest list of each
    block of `block` keys (blocks,)), int32, for `gather_dkdv_kernel`. Setup, O(n·R log)."""
    n = idx.shape[0]
    rows = torch.arange(n, device=idx.device)[:, None].expand_as(idx)
    ok = idx >= 0
    keys, queries = idx[ok].long(), rows[ok]
    order = torch.argsort(keys * n + queries)  # by key, then by query (locality of the gathers)
    counts = torch.bincount(keys, minlength=n)
    crow = torch.zeros(n + 1, dtype=torch.long, device=idx.device)
    crow[1:] = counts.cumsum(0)
    pad = (-n) % block
    longest = torch.nn.functional.pad(counts, (0, pad)).view(-1, block).amax(dim=1)
    return crow.int(), queries[order].int(), longest.int()


def gather_bwd(q, k, v, do, lse, delta, dq, dk, dv, idx, by_key, add: bool = True) -> None:
    """Add one key-list part's share of dQ, dK, dV (as band_bwd's); `by_key` = transpose(idx, Tiles.gather(q).bm)."""
    b, h, n, d = q.shape
    if idx.shape[1] == 0:
        return
    t = Tiles.gather(q)
    acc, _ = launch_dtypes(q)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3])
    launch(
        gather_dq_kernel,
        (triton.cdiv(n, t.bm), b * h),
        q,
        k,
        v,
        do,
        lse,
        delta,
        dq,
        idx,
        *strides,
        h,
        n,
        d,
        idx.shape[1],
        ACC=acc,
        ADD=add,
        BM=t.bm,
        BN=t.bn,
        BD=t.bd,
        num_warps=t.warps,
        num_stages=t.stages,
    )
    crow, queries, longest = by_key
    launch(
        gather_dkdv_kernel,
        (triton.cdiv(n, t.bm), b * h),
        q,
        k,
        v,
        do,
        lse,
        delta,
        dk,
        dv,
        crow,
        queries,
        longest,
        *strides,
        h,
        n,
        d,
        ACC=acc,
        ADD=add,
        BM=t.bm,
        BN=t.bn,
        BD=t.bd,
        num_warps=t.warps,
        num_stages=t.stages,
    )
