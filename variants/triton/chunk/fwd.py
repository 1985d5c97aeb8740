"""Linearized attention in chunks of BT rows, in the manner of flash-linear-attention's chunk form:
out_t = Σ_{s∈t} (φ(a_t)·φ(b_s)) c_s  [/ Σ_{s∈t} φ(a_t)·φ(b_s)], s ≤ t when causal, every s when not.

`chunk_states_kernel` walks the chunks in order, one program per (tile of C's columns, head, split),
and keeps the state S = Σ φ(b_s) c_sᵀ (BF × BC) and z = Σ φ(b_s) in registers: causal, it stores the
state before each chunk; bidirectional, each split its sum (added up after). `chunk_output_kernel`
takes a program per (chunk, tile of C's columns, head): φ(a)·S (+ the masked intra-chunk quadratic,
causal), and the normalizer. Feature maps are computed in the kernels (`features`). O(n·m·d): the
states are (n/BT)·m·d per head, the intra-chunk products n·BT·(m + d).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from variants.triton.chunk.features import FAVOR, favor_logits, feature_map, load_w
from variants.triton.tiles import Tiles, launch, precision

MAX_FEATURES = 256  # one tile holds a row's features (the query stabilizer is a row's maximum)


@triton.jit(do_not_specialize=["H", "m", "chunks"])  # the parameters: one compile for all (variants.triton.tiles)
def favor_key_max_kernel(
    B,
    W,
    OUT,
    sb_b,
    sb_h,
    sb_n,
    H,
    n,
    d,
    m,
    chunks,
    ACC: tl.constexpr,
    DOT: tl.constexpr,
    PREC: tl.constexpr,
    BT: tl.constexpr,
    BF: tl.constexpr,
    BD: tl.constexpr,
):
    """The largest FAVOR logit of each chunk of keys: (B·H, chunks)."""
    ch, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    t = ch * BT + tl.arange(0, BT)
    c = tl.arange(0, BD)
    rows = t < n
    x = tl.load(
        B + b * sb_b + h * sb_h + t[:, None] * sb_n + c[None, :], mask=rows[:, None] & (c < d)[None, :], other=0.0
    ).to(ACC)
    logits = favor_logits(x, load_w(W, d, m, BF, BD, DOT), d, ACC, DOT, PREC)
    keep = rows[:, None] & (tl.arange(0, BF) < m)[None, :]
    tl.store(OUT + bh * chunks + ch, tl.max(tl.max(tl.where(keep, logits, float("-inf")), 1), 0))


@triton.jit
def position(t, n, REVERSE: tl.constexpr):
    """The row of the inputs (and of the output) that step t of the walk reads: t, or n − 1 − t walking the
    rows in reverse (a suffix product without flipped copies)."""
    if REVERSE:
        return n - 1 - t
    else:
        return t


@triton.jit(
    do_not_specialize=["H", "m", "cw", "chunks", "per_split"]
)  # the parameters: one compile for all (variants.triton.tiles)
def chunk_states_kernel(
    B,
    C,
    W,
    STAB,
    HS,
    ZS,
    sb_b,
    sb_h,
    sb_n,
    sc_b,
    sc_h,
    sc_n,
    H,
    n,
    d,
    m,
    cw,
    chunks,
    per_split,
    KIND: tl.constexpr,
    CAUSAL: tl.constexpr,
    REVERSE: tl.constexpr,
    ACC: tl.constexpr,
    DOT: tl.constexpr,
    PREC: tl.constexpr,
    BT: tl.constexpr,
    BF: tl.constexpr,
    BD: tl.constexpr,
    BC: tl.constexpr,
):
    ct, bh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    b, h = bh // H, bh % H
    c = tl.arange(0, BD)
    e = ct * BC + tl.arange(0, BC)  # this program's columns of C
    f = tl.arange(0, BF)
    top = tl.load(STAB + bh) if KIND == FAVOR else 0.0
    state = tl.zeros([BF, BC], ACC)
    z = tl.zeros([BF], ACC)
    heads = tl.num_programs(1)
    for ch in range(split * per_split, tl.minimum(split * per_split + per_split, chunks)):
        if CAUSAL:  # the state before chunk ch
            at = (ch * heads + bh) * BF
            tl.store(HS + (at + f[:, None]) * cw + e[None, :], state, mask=(e < cw)[None, :])
            if ct == 0:
                tl.store(ZS + at + f, z)
        t = ch * BT + tl.arange(0, BT)
        rows = t < n
        p = position(t, n, REVERSE)
        x = tl.load(
            B + b * sb_b + h * sb_h + p[:, None] * sb_n + c[None, :], mask=rows[:, None] & (c < d)[None, :], other=0.0
        ).to(ACC)
        phi = feature_map(x, rows, W, top, d, m, KIND, False, ACC, DOT, PREC, BF, BD)
        cc = tl.load(
            C + b * sc_b + h * sc_h + p[:, None] * sc_n + e[None, :], mask=rows[:, None] & (e < cw)[None, :], other=0.0
        )
        state += tl.dot(tl.trans(phi.to(DOT)), cc.to(DOT), input_precision=PREC).to(ACC)
        z += tl.sum(phi, 0)
    if not CAUSAL:  # this split's sums
        at = (split * heads + bh) * BF
        tl.store(HS + (at + f[:, None]) * cw + e[None, :], state, mask=(e < cw)[None, :])
        if ct == 0:
            tl.store(ZS + at + f, z)


@triton.jit(do_not_specialize=["H", "m", "cw"])  # the parameters: one compile for all (variants.triton.tiles)
def chunk_output_kernel(
    A,
    B,
    C,
    W,
    STAB,
    HS,
    ZS,
    O,
    DEN,
    sa_b,
    sa_h,
    sa_n,
    sb_b,
    sb_h,
    sb_n,
    sc_b,
    sc_h,
    sc_n,
    H,
    n,
    d,
    m,
    cw,
    KIND: tl.constexpr,
    CAUSAL: tl.constexpr,
    NORMALIZE: tl.constexpr,
    REVERSE: tl.constexpr,
    ACC: tl.constexpr,
    DOT: tl.constexpr,
    PREC: tl.constexpr,
    BT: tl.constexpr,
    BF: tl.constexpr,
    BD: tl.constexpr,
    BC: tl.constexpr,
):
    ch, ct, bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    b, h = bh // H, bh % H
    c = tl.arange(0, BD)
    e = ct * BC + tl.arange(0, BC)
    f = tl.arange(0, BF)
    t = ch * BT + tl.arange(0, BT)
    rows = t < n
    p = position(t, n, REVERSE)
    x = tl.load(
        A + b * sa_b + h * sa_h + p[:, None] * sa_n + c[None, :], mask=rows[:, None] & (c < d)[None, :], other=0.0
    ).to(ACC)
    phi_q = feature_map(x, rows, W, 0.0, d, m, KIND, True, ACC, DOT, PREC, BF, BD)
    at = ((ch if CAUSAL else 0) * tl.num_programs(2) + bh) * BF
    state = tl.load(HS + (at + f[:, None]) * cw + e[None, :], mask=(e < cw)[None, :], other=0.0)
    num = tl.dot(phi_q.to(DOT), state.to(DOT), input_precision=PREC).to(ACC)
    if NORMALIZE:
        den = tl.sum(phi_q * tl.load(ZS + at + f)[None, :], 1)
    if CAUSAL:  # the chunk's own keys, s <= t: the masked quadratic form
        top = tl.load(STAB + bh) if KIND == FAVOR else 0.0
        xk = tl.load(
            B + b * sb_b + h * sb_h + p[:, None] * sb_n + c[None, :], mask=rows[:, None] & (c < d)[None, :], other=0.0
        ).to(ACC)
        phi_k = feature_map(xk, rows, W, top, d, m, KIND, False, ACC, DOT, PREC, BF, BD)
        scores = tl.dot(phi_q.to(DOT), tl.trans(phi_k.to(DOT)), input_precision=PREC).to(ACC)
        scores = tl.where(tl.arange(0, BT)[None, :] <= tl.arange(0, BT)[:, None], scores, 0.0)
        cc = tl.load(
            C + b * sc_b + h * sc_h + p[:, None] * sc_n + e[None, :], mask=rows[:, None] & (e < cw)[None, :], other=0.0
        )
        num += tl.dot(scores.to(DOT), cc.to(DOT), input_precision=PREC).to(ACC)
        if NORMALIZE:
            den += tl.sum(scores, 1)
    if NORMALIZE:
        num = num / tl.where(rows, den, 1.0)[:, None]
        if ct == 0:
            tl.store(DEN + bh * n + p, den, mask=rows)
    tl.store(O + bh * n * cw + p[:, None] * cw + e[None, :], num, mask=rows[:, None] & (e < cw)[None, :])


def chunk_dtypes(x: torch.Tensor):
    """(accumulator, dot operands, dot precision): float64 throughout in float64; float32 with IEEE
    products in float32 and float16 (NB: FAVOR+'s key features reach 1e-8, under float16's normal
    range: its products lost 4% of the output); bf16 operands (float32's range) into float32 sums, as
    flash-linear-attention's kernels."""
    dot = {
        torch.float64: tl.float64,
        torch.float32: tl.float32,
        torch.bfloat16: tl.bfloat16,
        torch.float16: tl.float32,
    }[x.dtype]
    acc = tl.float64 if x.dtype == torch.float64 else tl.float32
    return acc, dot, precision(torch.float32 if x.dtype == torch.float16 else x.dtype)


def chunk_forward(
    a,
    b,
    c,
    *,
    kind: int,
    causal: bool,
    normalize: bool,
    w: torch.Tensor | None = None,
    features: int | None = None,
    splits: int | None = None,
    reverse: bool = False,
):
    """out (B, H, n_a, c_width) in the accumulator's dtype, and the normalizer (B, H, n_a) or None.
    a: the query side, b: the key side (their feature map `kind`; W (m, d) for FAVOR/FOURIER), c: the
    values (B, H, n_b, c_width). Causal needs n_a = n_b; `reverse` (causal): s >= t, the rows walked last
    to first."""
    bsz, h, n, d = a.shape
    nk, cw = b.shape[2], c.shape[3]
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    m = features or d
    if m > MAX_FEATURES or d > MAX_FEATURES:
        raise ValueError(f"features={m}, d={d} (allowed: at most {MAX_FEATURES} in one tile)")
    tiles = Tiles.chunk(d, m, cw)
    bt, bc, bd, warps = tiles.bm, tiles.bn, tiles.bd, tiles.warps
    bf = Tiles.head(m)
    tacc, tdot, prec = chunk_dtypes(a)
    dev = a.device
    w = w if w is not None else a.new_empty(1)
    stab = torch.zeros(bsz * h, dtype=acc, device=dev)
    if kind == FAVOR:  # keys' stabilizer: the head's largest logit
        chunks = triton.cdiv(nk, bt)
        tops = torch.empty(bsz * h, chunks, dtype=acc, device=dev)
        launch(
            favor_key_max_kernel,
            (chunks, bsz * h),
            b,
            w,
            tops,
            *b.stride()[:3],
            h,
            nk,
            d,
            m,
            chunks,
            ACC=tacc,
            DOT=tdot,
            PREC=prec,
            BT=bt,
            BF=bf,
            BD=bd,
            num_warps=4,
        )
        stab = tops.amax(dim=1)
    chunks = triton.cdiv(nk, bt)
    ctiles = triton.cdiv(cw, bc)
    if causal:
        slots, per_split = chunks, chunks
    else:  # splits of the keys, so that enough programs run; their sums added after
        slots = splits or max(1, min(chunks, 128 // max(1, bsz * h * ctiles)))
        per_split = triton.cdiv(chunks, slots)
    hs = torch.empty(slots, bsz * h, bf, cw, dtype=acc, device=dev)
    zs = torch.empty(slots, bsz * h, bf, dtype=acc, device=dev)
    launch(
        chunk_states_kernel,
        (ctiles, bsz * h, 1 if causal else slots),
        b,
        c,
        w,
        stab,
        hs,
        zs,
        *b.stride()[:3],
        *c.stride()[:3],
        h,
        nk,
        d,
        m,
        cw,
        chunks,
        per_split,
        KIND=int(kind),
        CAUSAL=causal,
        REVERSE=reverse,
        ACC=tacc,
        DOT=tdot,
        PREC=prec,
        BT=bt,
        BF=bf,
        BD=bd,
        BC=bc,
        num_warps=warps,
    )
    if not causal and slots > 1:
        hs, zs = hs.sum(0, keepdim=True), zs.sum(0, keepdim=True)
    out = torch.empty(bsz, h, n, cw, dtype=acc, device=dev)
    den = torch.empty(bsz, h, n, dtype=acc, device=dev) if normalize else out
    launch(
        chunk_output_kernel,
        (triton.cdiv(n, bt), ctiles, bsz * h),
        a,
        b,
        c,
        w,
        stab,
        hs,
        zs,
        out,
        den,
        *a.stride()[:3],
        *b.stride()[:3],
        *c.stride()[:3],
        h,
        n,
        d,
        m,
        cw,
        KIND=int(kind),
        CAUSAL=causal,
        NORMALIZE=normalize,
        REVERSE=reverse,
        ACC=tacc,
        DOT=tdot,
        PREC=prec,
        BT=bt,
        BF=bf,
        BD=bd,
        BC=bc,
        num_warps=warps,
    )
    return out, (den if normalize else None)
