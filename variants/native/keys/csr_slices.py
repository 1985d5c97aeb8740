"""Per-query key lists on a CSR pattern, cut by key into slices whose K and V rows stay in cache.

`random`'s keys (and bigbird's random part) come from anywhere in [0, n): the SDDMM reads a row of K
and the SpMM a row of V for each of the n·w listed pairs, in no order. While one head's K (n·d
values) fits in the cache, that is cheap; past it nearly every read is a miss, and the rate falls
with n. So on the CPU, past SLICE_BYTES of K, the pattern can be cut into slices of consecutive
keys, each its own CSR (n, keys of the slice): the SDDMM goes slice by slice, each writing its scores
to their places among the row's w. Each slice's pass pays for every row (its pointers, its output
row), so a slice keeps at least MIN_ENTRIES entries a row on average. The products by the pattern
(the forward's P·V, the backward's dS·K, dSᵀ·Q and Pᵀ·dO) need no slices on the CPU: `csr_matmul`
runs them as embedding bags, which prefetch.

On a CPU with a small L2 the slices were several times faster than one pass; on one with a larger L2 and
wider vectors one pass won (docs/performance.md, "(7) `random`'s keys by slices that stay in cache" and "(11)
A third host, and what it changed"). Which is faster depends on the machine, so `fastest` times both on
the pattern itself, in setup, and keeps the faster.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from variants.rules.paths import took

SLICE_BYTES = 4 << 20  # K rows of one slice (16384 keys of d = 64 in float32)
MIN_ENTRIES = 8  # listed keys a row, on average, in each slice


def _csr(crow, col, values, shape) -> torch.Tensor:
    return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


@dataclass(frozen=True)
class Slice:
    """The pairs whose key lies in [k0, k1): a CSR pattern (n, k1 − k0) and, where there is more
    than one slice, `at`, the pairs' places in the row-major (n·w) list."""

    k0: int
    k1: int
    pattern: torch.Tensor  # CSR, zero values: the SDDMM's sampling pattern
    at: torch.Tensor | None  # (e,) long, or None: the only slice, in the list's order


def csr_slices(idx: torch.Tensor, pattern: torch.Tensor, row_bytes: int) -> tuple[Slice, ...]:
    """Slices of the pattern (n, n) of sorted per-row keys idx (n, w): one, the pattern itself, off
    the CPU or while K (n rows of `row_bytes`) fits SLICE_BYTES; else about SLICE_BYTES of keys each."""
    n, w = idx.shape
    count = min(-(-n * row_bytes // SLICE_BYTES), max(1, w // MIN_ENTRIES))
    if count <= 1 or idx.device.type != "cpu":
        return (Slice(0, n, pattern, None),)
    span = -(-n // count)
    key = idx.reshape(-1)
    out = []
    for k0 in range(0, n, span):
        k1 = min(n, k0 + span)
        at = ((key >= k0) & (key < k1)).nonzero().squeeze(1)  # (e,) in row order, keys sorted in a row
        crow = torch.zeros(n + 1, dtype=torch.long)
        crow[1:] = torch.bincount(at // w, minlength=n).cumsum(0)
        zeros = torch.zeros(at.numel(), dtype=pattern.dtype)
        out.append(Slice(k0, k1, _csr(crow, key[at] - k0, zeros, (n, k1 - k0)), at))
    return tuple(out)


_CHOICES: dict[tuple, bool] = {}  # (n, entries, slices, d, dtype): whether the slices were the faster


def fastest(slices: tuple[Slice, ...], pattern: torch.Tensor, d: int, rounds: int = 3) -> tuple[Slice, ...]:
    """`slices`, or the one-pass `pattern` they cut, whichever computed the scores faster here: each
    timed `rounds` times, interleaved, on random q and k (n, d) of the pattern's dtype (setup, never
    the timed call; one decision per shape in a process)."""
    if len(slices) == 1:
        return slices
    n = pattern.shape[0]
    one = (Slice(0, n, pattern, None),)
    key = (n, pattern.values().numel(), len(slices), d, pattern.dtype)
    if key not in _CHOICES:
        gen = torch.Generator().manual_seed(0)
        q, k = (torch.randn(n, d, generator=gen, dtype=pattern.dtype) for _ in range(2))
        best = [float("inf")] * 2
        for _ in range(rounds):
            for i, candidate in enumerate((slices, one)):
                begin = time.perf_counter()
                sampled_scores(candidate, q, k, 1.0)
                best[i] = min(best[i], time.perf_counter() - begin)
        _CHOICES[key] = best[0] < best[1]
    return slices if _CHOICES[key] else one


def sampled_scores(slices: tuple[Slice, ...], q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """scale · q_i·k_j at every listed pair, q and k (n, d): the (n·w) values in the list's order."""
    took("scores in one pass" if slices[0].at is None else f"scores in {len(slices)} slices")  # (fastest's choice)
    if slices[0].at is None:
        return torch.sparse.sampled_addmm(slices[0].pattern, q, k.T, beta=0.0, alpha=scale).values()
    scores = q.new_empty(sum(s.at.numel() for s in slices))
    for s in slices:
        scores[s.at] = torch.sparse.sampled_addmm(s.pattern, q, k[s.k0 : s.k1].T, beta=0.0, alpha=scale).values()
    return scores


def csr_matmul(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The CSR matrix (crow, col, values) of n rows times `table` (keys, d): row i is
    Σ_e values_e · table[col_e] over its entries e in [crow_i, crow_i+1), (n, d).

    On the CPU by `embedding_bag` (sum with per-sample weights: each row a bag of the table's rows),
    whose kernel (FBGEMM's) prefetches the rows it gathers, about twice as fast as the CSR product
    (docs/performance.md, "(9) `random`'s products by the pattern as embedding bags"). Elsewhere torch's
    CSR × dense product."""
    if table.device.type == "cpu":
        return F.embedding_bag(col, table, crow[:-1], mode="sum", per_sample_weights=values)
    return _csr(crow, col, values, (crow.numel() - 1, table.shape[0])) @ table
