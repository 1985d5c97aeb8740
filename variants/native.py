"""Building blocks of the structure-exploiting (`native`) implementations.

A sparse pattern is split into disjoint key sets ("parts"), each scored in the layout that suits
it (a band of blocks, a gather per query, a residue class). Each part returns its own softmax
output and log-sum-exp per query row; `merge` combines them into the exact softmax over the union,
as flash-decoding merges splits. No part ever builds an n×n tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

NEG_INF = float("-inf")


@dataclass
class Partial:
    """Softmax over one key set: normalized output (B, H, n, d) and log-sum-exp (B, H, n)."""

    out: torch.Tensor
    lse: torch.Tensor | None  # None: this part is the whole softmax (single-part fast path)


def softmax_part(scores: torch.Tensor, apply_v: Callable[[torch.Tensor], torch.Tensor], need_lse: bool):
    """Softmax over the last dim of `scores` (masked with -inf), then `apply_v(probs)`.

    Rows with no allowed key get out = 0 and lse = -inf, so `merge` gives them no weight.
    """
    lse = torch.logsumexp(scores, dim=-1) if need_lse else None
    probs = torch.softmax(scores, dim=-1)
    if need_lse:
        probs = probs.nan_to_num_(0.0)  # empty rows: softmax of all -inf is NaN
    return apply_v(probs), lse


def merge(parts: list[Partial]) -> torch.Tensor:
    """Exact softmax attention over the union of the parts' disjoint key sets."""
    if len(parts) == 1 and parts[0].lse is None:
        return parts[0].out
    lse = torch.stack([p.lse for p in parts])  # (P, B, H, n)
    total = torch.logsumexp(lse, dim=0)  # (B, H, n)
    out = torch.zeros_like(parts[0].out)
    for part in parts:
        out += part.out * torch.exp(part.lse - total)[..., None]
    return out


# ------------------------------------------------------------------------------- band of blocks
def band_mask(
    seq_len: int, block: int, left: int, right: int,
    allowed: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], device,
) -> torch.Tensor:
    """Which scores of the blocked layout are real: (nb, block, span) bool, O(n · span).

    Query block t covers positions t·block + a; its keys are blocks t-left .. t+right.
    """
    nb = -(-seq_len // block)
    span = (left + right + 1) * block
    t = torch.arange(nb, device=device)[:, None, None]
    i = t * block + torch.arange(block, device=device)[None, :, None]  # (nb, block, 1)
    j = (t - left) * block + torch.arange(span, device=device)[None, None, :]  # (nb, 1, span)
    keep = (j >= 0) & (j < seq_len) & allowed(i, j)
    return keep | ((i >= seq_len) & (j == i))  # padded query rows keep one key: no NaN


def band_part(q, k, v, *, block: int, left: int, right: int, mask: torch.Tensor, need_lse: bool) -> Partial:
    """Each query block attends to `left` blocks before and `right` after its own.

    Time O(n · span · d), memory O(n · span): linear in n for a fixed band.
    """
    b, h, n, d = q.shape
    nb = mask.shape[0]
    pad = nb * block - n
    qb = F.pad(q, (0, 0, 0, pad)).view(b, h, nb, block, d)
    kp = F.pad(k, (0, 0, left * block, pad + right * block))  # (B, H, (nb+left+right)·block, d)
    vp = F.pad(v, (0, 0, left * block, pad + right * block))
    span = (left + right + 1) * block
    # Key windows overlap: window t starts at t·block. A strided view, copied once by matmul.
    stride = kp.stride()
    kw = kp.as_strided((b, h, nb, span, d), (stride[0], stride[1], block * stride[2], stride[2], stride[3]))
    vw = vp.as_strided((b, h, nb, span, d), (stride[0], stride[1], block * stride[2], stride[2], stride[3]))
    scores = (qb @ kw.transpose(-1, -2)).mul_(d**-0.5)  # (B, H, nb, block, span)
    scores.masked_fill_(~mask, NEG_INF)
    out, lse = softmax_part(scores, lambda p: p @ vw, need_lse)  # (B, H, nb, block, d)
    out = out.reshape(b, h, nb * block, d)[:, :, :n]
    return Partial(out, None if lse is None else lse.reshape(b, h, nb * block)[:, :, :n])


@dataclass(frozen=True)
class BandPlan:
    """The blocked layout of one band, built once in setup: block size, reach in blocks, mask."""

    block: int
    left: int
    right: int
    mask: torch.Tensor  # (nb, block, span) bool

    def part(self, q, k, v, need_lse: bool) -> Partial:
        return band_part(q, k, v, block=self.block, left=self.left, right=self.right,
                         mask=self.mask, need_lse=need_lse)


def band_plan(seq_len: int, reach: int, causal: bool, device) -> BandPlan:
    """Plan for the sliding window |i - j| <= reach (and j <= i when causal)."""
    block = _band_block(reach)
    left = -(-reach // block)
    right = 0 if causal else left

    def allowed(i, j):
        ok = (i - j).abs() <= reach
        return ok & (j <= i) if causal else ok

    return BandPlan(block, left, right, band_mask(seq_len, block, left, right, allowed, device))


def _band_block(reach: int) -> int:
    # A block as wide as the reach wastes a third of a window's work at most; small reaches are
    # grouped up to 64 rows so that the batched matmuls stay large enough to be efficient.
    return min(max(reach, 64), 512)


# ------------------------------------------------------------------------------- gathered keys
def gather_part(q, k, v, *, idx: torch.Tensor, valid: torch.Tensor, need_lse: bool, chunk: int = 1024) -> Partial:
    """Query i attends to keys idx[i, :] where valid[i, :]: time and memory O(n · r · d).

    Queries go in chunks so the gathered (chunk, r, d) keys stay small.
    """
    b, h, n, d = q.shape
    outs, lses = [], []
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        ix = idx[rows]  # (C, r)
        kg, vg = k[:, :, ix], v[:, :, ix]  # (B, H, C, r, d)
        scores = (kg @ q[:, :, rows, :, None]).squeeze(-1).mul_(d**-0.5)  # (B, H, C, r)
        scores.masked_fill_(~valid[rows], NEG_INF)
        out, lse = softmax_part(scores, lambda p: (p[..., None, :] @ vg).squeeze(-2), need_lse)
        outs.append(out)
        lses.append(lse)
    return Partial(torch.cat(outs, dim=2), torch.cat(lses, dim=2) if need_lse else None)


# ------------------------------------------------------------------------------- dense key subset
def keys_part(q, k, v, *, keys: torch.Tensor, valid: torch.Tensor, need_lse: bool) -> Partial:
    """Every query scores the same small key subset `keys` (s,), masked by valid (n, s): O(n·s·d)."""
    ks, vs = k[:, :, keys], v[:, :, keys]  # (B, H, s, d)
    scores = (q @ ks.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)  # (B, H, n, s)
    scores.masked_fill_(~valid, NEG_INF)
    out, lse = softmax_part(scores, lambda p: p @ vs, need_lse)
    return Partial(out, lse)


def full_rows(q, k, v, *, rows: int, causal: bool) -> torch.Tensor:
    """The first `rows` queries attend to every key (global tokens): O(rows · n · d)."""
    from variants.impls import dense_attention

    qg = q[:, :, :rows]
    if not causal:
        return dense_attention(qg, k, v)
    n = k.shape[-2]
    mask = torch.arange(n, device=q.device)[None, :] <= torch.arange(rows, device=q.device)[:, None]
    return dense_attention(qg, k, v, mask=mask)


# ------------------------------------------------------------------------------- residue classes
def residue_part(q, k, v, *, stride: int, causal: bool, need_lse: bool) -> Partial:
    """Keys j with (i - j) mod l == 0 and j != i, as attention within each residue class.

    Positions p = m·l + r go to (r, m): l classes of n/l rows each, so the work is
    l · (n/l)² · d = n²/l · d, i.e. O(n^1.5 · d) for l ∝ √n.
    """
    b, h, n, d = q.shape
    l = stride
    nb = -(-n // l)
    pad = nb * l - n

    def by_residue(x):  # (B, H, n, d) -> (B, H, l, nb, d)
        return F.pad(x, (0, 0, 0, pad)).view(b, h, nb, l, d).transpose(2, 3)

    qr, kr, vr = by_residue(q), by_residue(k), by_residue(v)
    scores = (qr @ kr.transpose(-1, -2)).mul_(d**-0.5)  # (B, H, l, nb, nb)
    m = torch.arange(nb, device=q.device)
    keep = m[None, :] != m[:, None]  # (nb, nb): j != i, the diagonal belongs to the local part
    if causal:
        keep = keep & (m[None, :] < m[:, None])
    real = (m[None, :] * l + torch.arange(l, device=q.device)[:, None]) < n  # (l, nb) keys < n
    scores.masked_fill_(~(keep[None] & real[:, None, :]), NEG_INF)
    out, lse = softmax_part(scores, lambda p: p @ vr, need_lse)  # (B, H, l, nb, d)
    out = out.transpose(2, 3).reshape(b, h, nb * l, d)[:, :, :n]
    lse = lse.transpose(2, 3).reshape(b, h, nb * l)[:, :, :n] if need_lse else None
    return Partial(out, lse)


def random_keys(seq_len: int, keys: int, seed: int) -> torch.Tensor:
    """r distinct keys per query drawn uniformly from [0, n) without replacement: (n, r) long.

    Robert Floyd's algorithm, vectorized over rows: r steps, O(n · r²) time, O(n · r) memory,
    deterministic for a seed on every device (drawn on the CPU).
    """
    gen = torch.Generator().manual_seed(seed)
    chosen = torch.empty(seq_len, keys, dtype=torch.long)
    for s, top in enumerate(range(seq_len - keys, seq_len)):
        pick = (torch.rand(seq_len, generator=gen, dtype=torch.float64) * (top + 1)).long().clamp_(max=top)
        seen = (chosen[:, :s] == pick[:, None]).any(dim=1)
        chosen[:, s] = torch.where(seen, torch.full_like(pick, top), pick)
    return chosen


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def isqrt_ceil(n: int) -> int:
    return math.isqrt(n - 1) + 1 if n > 1 else 1
