"""What the softmax families' backwards share (FlashAttention-2's): δ = rowsum(dO ∘ O), one kernel before
the parts, and each part's store of its share of dQ, dK or dV: added to what earlier parts left there, or
written where the part is the first and reaches every row and key (no zeroed buffer, and a lone part's
gradients written in the inputs' dtype: no cast after)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from variants.triton.tiles import Tiles, launch, launch_dtypes

ROWS = 64  # rows of a program of the δ kernel


@triton.jit
def put(ptrs, value, mask, ADD: tl.constexpr):
    """Store a part's share: added to the buffer's (ADD), or written (a store casts to the buffer's dtype)."""
    if ADD:
        value += tl.load(ptrs, mask=mask, other=0.0)
    tl.store(ptrs, value, mask=mask)


@triton.jit
def delta_kernel(O, DO, DELTA, n, d, ACC: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
    bh = tl.program_id(1)
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    c = tl.arange(0, BD)
    rows = i < n
    tile = rows[:, None] & (c < d)[None, :]
    at = bh * n * d + i[:, None] * d + c[None, :]  # the contiguous (B, H, n, d) buffers
    o = tl.load(O + at, mask=tile, other=0.0).to(ACC)
    do = tl.load(DO + at, mask=tile, other=0.0).to(ACC)
    tl.store(DELTA + bh * n + i, tl.sum(o * do, 1), mask=rows)


def row_delta(out: torch.Tensor, dout: torch.Tensor) -> torch.Tensor:
    """δ (B, H, n) in the accumulator's dtype from the contiguous (B, H, n, d) output and its gradient."""
    b, h, n, d = out.shape
    acc, _ = launch_dtypes(out)
    delta = out.new_empty((b, h, n), dtype=torch.float64 if acc == tl.float64 else torch.float32)
    launch(
        delta_kernel,
        (triton.cdiv(n, ROWS), b * h),
        out,
        dout,
        delta,
        n,
        d,
        ACC=acc,
        BM=ROWS,
        BD=Tiles.head(d),
        num_warps=4,
        num_stages=1,
    )
    return delta
