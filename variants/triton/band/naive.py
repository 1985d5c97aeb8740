"""The band family's reference: the part's pairs as a dense (n, n) mask, from the same formulas in
torch, and a float64-friendly masked softmax. O(n²): for checks at small n."""

from __future__ import annotations

import torch

from variants.triton.band.ranges import BLOCKS, NEIGHBORHOOD, RECT, WINDOW


def band_mask(
    kind: int, n: int, p1: int, p2: int = 0, rows: tuple[int, int] | None = None, causal: bool = False
) -> torch.Tensor:
    """(n, n) bool: query i takes key j in this part."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    if kind == WINDOW:
        ok = (i - j).abs() <= p1
    elif kind == NEIGHBORHOOD:
        start = (i - p1 // 2).clamp(0, n - p1)
        ok = (j >= start) & (j < start + p1)
    elif kind == BLOCKS:
        ok = i // p1 == j // p1
    elif kind == RECT:
        ok = (j < p1) & (i - j > p2)
    else:  # SUMMARY: block p1, the last p2 keys of each block
        ok = (j % p1 >= p1 - p2) & (i // p1 != j // p1)
    if causal:
        ok = ok & (j <= i)
    r0, r1 = rows or (0, n)
    return ok & (i >= r0) & (i < r1)


def masked_softmax(q, k, v, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of softmax(q kᵀ/√d) v over the allowed pairs; a row with none: 0 and −inf."""
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.masked_fill(lse == float("-inf"), 0.0)[..., None])
    return p @ v, lse


def band_reference(q, k, v, *, kind: int, p1: int, p2: int = 0, rows=None, causal: bool):
    return masked_softmax(q, k, v, band_mask(kind, q.shape[-2], p1, p2, rows, causal).to(q.device))
