"""Contiguous key ranges per block of queries (neighborhood attention's shifted windows): each block
scores its key range with the rows' [lo, hi) masked in, the interior in runs for the fused kernel."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from variants.native.band.windows import FUSED_BLOCK, run_windows
from variants.native.core import (
    KeySet,
    Partial,
    additive,
    cache_sized,
    fused,
    grad_of,
    softmax_part,
    step_elements,
    tile_grads,
)
from variants.rules.paths import took


def key_ranges(lo: torch.Tensor, hi: torch.Tensor, like: torch.Tensor, block: int = 128) -> "KeyRanges":
    """Row i's keys are [lo_i, hi_i), both ends non-decreasing: per block of queries, the key range its
    rows reach and each row's [lo, hi) within it; on the CPU also the forward's blocks of FUSED_BLOCK
    rows, the interior ones in runs for the fused kernel."""
    ranges = _ranges(lo, hi, like, block)
    if not fused(like):  # off the CPU the interior goes in runs of these blocks (run_windows)
        return KeyRanges(ranges) if cache_sized(like) else KeyRanges(ranges, *fused_runs(ranges, like))
    runs, rest = fused_runs(_ranges(lo, hi, like, FUSED_BLOCK), like)
    return KeyRanges(ranges, runs, rest)


def _ranges(lo: torch.Tensor, hi: torch.Tensor, like: torch.Tensor, block: int) -> tuple:
    """(q0, q1, k0, k1, allowed (rows, keys)) per block of `block` queries."""
    n = lo.shape[0]
    lo, hi = lo.to(like.device), hi.to(like.device)
    out = []
    for q0 in range(0, n, block):
        q1 = min(q0 + block, n)
        k0, k1 = int(lo[q0]), int(hi[q1 - 1])
        cols = torch.arange(k0, k1, device=like.device)
        allowed = (cols >= lo[q0:q1, None]) & (cols < hi[q0:q1, None])  # (rows, keys)
        out.append((q0, q1, k0, k1, allowed))
    return tuple(out)


def fused_runs(blocks: tuple, like: torch.Tensor) -> tuple[tuple, tuple]:
    """Runs of consecutive whole blocks whose key ranges are as wide, step as their rows do and
    allow the same keys relative to the block (the interior), each (q0, g, k0, span, bias (1,
    block, span): one mask for the run); and the blocks in no run of 2 or more."""
    runs, rest, i = [], [], 0
    while i < len(blocks):
        q0, q1, k0, k1, allowed = blocks[i]
        j = i + 1
        while j < len(blocks) and _continues(blocks[j - 1], blocks[j], q1 - q0, k1 - k0):
            j += 1
        if j - i > 1:
            bias = additive(allowed, like.dtype)
            runs.append((q0, j - i, k0, k1 - k0, bias[None]))
        else:
            rest.append(blocks[i])
        i = j
    return tuple(runs), tuple(rest)


def _continues(prev: tuple, block: tuple, rows: int, span: int) -> bool:
    q0, q1, k0, k1, allowed = block
    return (
        q1 - q0 == rows
        and k1 - k0 == span
        and q0 - prev[0] == rows
        and k0 - prev[2] == rows
        and torch.equal(allowed, prev[4])
    )


@dataclass(frozen=True)
class KeyRanges(KeySet):
    """Blocks of queries, each against its contiguous key range (q0, q1, k0, k1, allowed (rows, keys)):
    O(n·(K + block)·d) both ways. Heads go in groups so that a step holds at most `step_elements`
    (a small n keeps one output); the backward recomputes each block's scores (variants.native.core.part_grad)."""

    blocks: tuple
    runs: tuple = ()  # the forward's interior: (q0, g, k0, span, bias) runs (CPU: for the fused kernel)
    rest: tuple = ()  # the forward's other blocks, as `blocks`

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        if into is not None:
            raise NotImplementedError("KeyRanges is a whole pattern: it folds into no other set")
        out = torch.empty_like(q)
        lse = q.new_empty(q.shape[:-1]) if need_lse else None
        blocks = self.blocks
        alone = not grad_of(q, k, v)  # the output alone: where the fused runs can be taken, and are named
        if alone:
            took("fused runs" if self.runs else "no fused runs")
        if self.runs and alone:  # the interior in runs: the CPU's fused kernel, or matmuls
            blocks = self.rest
            for q0, g, k0, span, bias in self.runs:
                run_windows(q, k, v, q0, g, k0, span, bias, out, lse)
        for (q0, q1, k0, k1), hs, scores in self._tiles(q, k, tensors=1, blocks=blocks):
            o, l = softmax_part(scores, lambda p: p @ v[:, hs, k0:k1], need_lse)
            out[:, hs, q0:q1] = o
            if need_lse:
                lse[:, hs, q0:q1] = l
            del scores, o, l  # before the next step's (see variants.native.core.steps)
        return Partial(out, lse)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        for (q0, q1, k0, k1), hs, scores in self._tiles(q, k, tensors=2):  # P and dS
            rows, keys = (slice(None), hs, slice(q0, q1)), (slice(None), hs, slice(k0, k1))
            gq, gk, gv = tile_grads(
                scores, q[rows], k[keys], v[keys], lse[rows], dout[rows], shift[rows], q.shape[-1] ** -0.5
            )
            dq[rows] += gq
            dk[keys] += gk
            dv[keys] += gv
            del scores, gq, gk, gv

    def _tiles(self, q, k, tensors: int, blocks: tuple | None = None):
        """((q0, q1, k0, k1), heads, scores (B, heads, rows, keys)) with masked keys at −inf."""
        b, h, n, d = q.shape
        for q0, q1, k0, k1, allowed in self.blocks if blocks is None else blocks:
            heads = max(1, min(h, step_elements(q) // (b * (q1 - q0) * (tensors * (k1 - k0) + d))))
            for hs in (slice(h0, h0 + heads) for h0 in range(0, h, heads)):
                scores = (q[:, hs, q0:q1] @ k[:, hs, k0:k1].transpose(-1, -2)).mul_(d**-0.5)
                yield (q0, q1, k0, k1), hs, scores.masked_fill_(~allowed, float("-inf"))
                del scores  # NB: the generator's name kept this step alive beside the next (1.47 -> 1.75 outputs)
