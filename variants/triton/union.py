"""A pattern as disjoint parts, each a kernel family's (a band, key lists, residue classes), merged
exactly by log-sum-exp: each part's kernel starts from the (out, lse) the parts before it left and
writes them back (variants.triton.online), so the merge costs no pass of its own. The backward
recomputes each part's probabilities from the whole pattern's lse and adds its share of dQ, dK, dV.
Imports Triton (through the families): only a prepared `triton` path imports this module."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from variants.triton.backward import row_delta
from variants.triton.band import KINDS, band_bwd, band_fwd
from variants.triton.gather import gather_bwd, gather_fwd, transpose
from variants.triton.residue import residue_bwd, residue_fwd
from variants.triton.tiles import Tiles, accumulator


@dataclass(frozen=True)
class Band:
    """A band part (variants.triton.band.ranges): its kind's name, its two numbers, the rows it holds."""

    kind: str
    p1: int
    p2: int = 0
    rows: tuple[int, int] | None = None  # [r0, r1); None: every row

    @property
    def every_row(self) -> bool:
        return self.rows is None

    @property
    def covers(self) -> bool:
        """Whether its backward reaches every row of dQ and every key of dK, dV (its key space is the positions)."""
        return self.every_row and self.kind in ("window", "neighborhood", "blocks")

    def forward(self, q, k, v, out, lse, *, causal: bool, first: bool) -> None:
        band_fwd(
            q, k, v, out, lse, kind=KINDS[self.kind], p1=self.p1, p2=self.p2, rows=self.rows, causal=causal, first=first
        )

    def backward(self, q, k, v, do, lse, delta, dq, dk, dv, *, causal: bool, add: bool = True) -> None:
        band_bwd(
            q,
            k,
            v,
            do,
            lse,
            delta,
            dq,
            dk,
            dv,
            kind=KINDS[self.kind],
            p1=self.p1,
            p2=self.p2,
            rows=self.rows,
            causal=causal,
            add=add,
        )


@dataclass(frozen=True)
class KeyList:
    """Per-row key lists (n, R) int32 (−1: none; causality is in the lists) and their transpose."""

    idx: torch.Tensor
    by_key: tuple

    every_row = True  # every row is written: an empty list leaves out = 0, lse = −inf

    @property
    def covers(self) -> bool:
        """Every row's dQ and every key's dK, dV (a key no list names: 0); lists of no slot launch nothing."""
        return self.idx.shape[1] > 0

    @classmethod
    def of(cls, idx: torch.Tensor, valid: torch.Tensor, like: torch.Tensor) -> "KeyList":
        """From (n, R) key indices and which of them count; sorted per row (the gathers' locality). Setup."""
        idx = idx.to(like.device).where(valid.to(like.device), -1)
        idx = idx.sort(dim=1).values.int().contiguous()
        return cls(idx, transpose(idx, Tiles.gather(like).bm))

    def forward(self, q, k, v, out, lse, *, causal: bool, first: bool) -> None:
        gather_fwd(q, k, v, out, lse, self.idx, first=first)

    def backward(self, q, k, v, do, lse, delta, dq, dk, dv, *, causal: bool, add: bool = True) -> None:
        gather_bwd(q, k, v, do, lse, delta, dq, dk, dv, self.idx, self.by_key, add=add)


@dataclass(frozen=True)
class Residues:
    """Strided's residue classes of stride l: keys j ≡ i (mod l), j ≠ i."""

    stride: int

    every_row = True  # every position is in one class: a class of one leaves out = 0, lse = −inf
    covers = True

    def forward(self, q, k, v, out, lse, *, causal: bool, first: bool) -> None:
        residue_fwd(q, k, v, out, lse, stride=self.stride, causal=causal, first=first)

    def backward(self, q, k, v, do, lse, delta, dq, dk, dv, *, causal: bool, add: bool = True) -> None:
        residue_bwd(q, k, v, do, lse, delta, dq, dk, dv, stride=self.stride, causal=causal, add=add)


def forward(q, k, v, parts: tuple, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse), every part merged in: lse in the accumulator's dtype, out too where a later part resumes
    from it (a lone part writes it in the inputs' dtype)."""
    b, h, n, d = q.shape
    acc = accumulator(q)
    first = parts[0].every_row
    alone = first and len(parts) == 1
    out = q.new_empty((b, h, n, d), dtype=q.dtype if alone else acc) if first else q.new_zeros((b, h, n, d), dtype=acc)
    lse = q.new_empty((b, h, n), dtype=acc) if first else q.new_full((b, h, n), float("-inf"), dtype=acc)
    for number, part in enumerate(parts):
        part.forward(q, k, v, out, lse, causal=causal, first=first and number == 0)
    return out, lse


class Attend(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, parts, causal):
        out, lse = forward(q, k, v, parts, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.parts, ctx.causal = parts, causal
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        parts = ctx.parts
        dout = dout.contiguous()
        delta = row_delta(out, dout)
        # the first part writes its share where it reaches every row and key (later parts add theirs): no
        # zeroed buffers, and a lone part's in the inputs' dtype
        writes = parts[0].covers
        dtype = q.dtype if writes and len(parts) == 1 else lse.dtype
        dq, dk, dv = ((torch.empty if writes else torch.zeros)(q.shape, dtype=dtype, device=q.device) for _ in range(3))
        for number, part in enumerate(parts):
            part.backward(q, k, v, dout, lse, delta, dq, dk, dv, causal=ctx.causal, add=number > 0 or not writes)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def attend(q, k, v, parts: tuple, causal: bool) -> torch.Tensor:
    """Softmax attention over the union of `parts` (B, H, n, d); with its own backward under autograd."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return Attend.apply(q, k, v, parts, causal)
    return forward(q, k, v, parts, causal)[0].to(q.dtype)
