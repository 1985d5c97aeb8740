"""Fixed pattern (Sparse Transformer, Child et al. 2019, §4): own block, plus the last c of every block.

Allowed: ⌊i/l⌋ = ⌊j/l⌋ or j mod l ≥ l − c. Claim: P ≈ n·(l + c·n/l); with l = ⌈√n⌉ the exponent
in n is 1.5, with l held constant it is 2.
"""

from __future__ import annotations

import torch

from variants.impls import native_impl, pattern_variant, rows, tile_bounds
from variants.native.band import BandPlan, band_bias
from variants.native.core import union
from variants.native.keys import KeySubset, block_subset
from variants.rules import MemoryClaim, Param, named, sqrt_n
from variants.rules.paths import took

BLOCK = Param("block", None, "block l; default ⌈√n⌉", minimum=1, derive=sqrt_n)
SUMMARY = Param("summary", 1, "summary keys c at the end of each block (c <= l)", minimum=0)


def check(n: int, params: dict) -> None:
    if params["summary"] > params["block"]:
        raise ValueError(
            f"fixed: parameter summary={params['summary']} out of range (allowed: 0..block={params['block']})"
        )


def fixed(n: int, params: dict):
    l, c = params["block"], params["summary"]
    return named(
        lambda b, h, q_idx, kv_idx: (q_idx // l == kv_idx // l) | (kv_idx % l >= l - c),
        f"fixed({l}, {c})",
    )


def summaries_before(x: torch.Tensor, l: int, c: int) -> torch.Tensor:
    """How many summary positions j < x (j mod l >= l − c)."""
    return (x // l) * c + (x % l - (l - c)).clamp(min=0)


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    i, l, c = rows(n), params["block"], params["summary"]
    start = (i // l) * l
    end = (start + l).clamp(max=n)
    if causal:
        return i - start + 1 + summaries_before(start, l, c)
    total = summaries_before(torch.tensor(n), l, c)
    own = summaries_before(end, l, c) - summaries_before(start, l, c)
    return (end - start) + total - own


def key_reads(n: int, causal: bool, params: dict) -> int:
    """A tile [s, e) reads its rows' blocks [a, b), a = ⌊s/l⌋·l, b the end of the block of e − 1
    (causal: [a, e)), and the summary keys outside them (causal: those before a)."""
    s, e, l, c = *tile_bounds(n), params["block"], params["summary"]
    a = (s // l) * l
    if causal:
        return int((e - a + summaries_before(a, l, c)).sum())
    b = (((e - 1) // l + 1) * l).clamp(max=n)
    outside = summaries_before(a, l, c) + summaries_before(torch.tensor(n), l, c) - summaries_before(b, l, c)
    return int((b - a + outside).sum())


def plan(n: int, causal: bool, params: dict, like):
    l, c = params["block"], params["summary"]
    allowed = (lambda i, j: j <= i) if causal else (lambda i, j: j >= 0)
    own_block = BandPlan(l, 0, 0, band_bias(n, l, 0, 0, allowed, like))  # a band of reach 0 in blocks of l
    device = like.device
    j = torch.arange(n, device=device)
    keys = j[j % l >= l - c]  # (s,) summary positions, s ≈ c·n/l
    i = torch.arange(n, device=device)[:, None]
    valid = keys[None, :] // l != i // l  # those in the own block are counted there
    if causal:
        valid = valid & (keys[None, :] <= i)
    return own_block, KeySubset(keys, valid), causal


def run(q, k, v, p):
    """Bidirectional, the output alone, blocks of at least 128 rows: own block and summaries as one oneDNN tile
    (variants.native.keys.block_subset); otherwise the union of the two key sets, folded."""
    own_block, summaries, causal = p
    if block_subset.applies(q, k, v, own_block.block, summaries.keys.numel(), causal):
        took("tile")
        return block_subset.block_and_subset(q, k, v, block=own_block.block, keys=summaries.keys)
    took("union")
    return union(q, k, v, own_block, summaries)


SPEC = pattern_variant(
    name="fixed",
    doc=__doc__,
    source="Child et al. 2019, Generating Long Sequences with Sparse Transformers, §4",
    memory=MemoryClaim(
        "Child et al. 2019, Sparse Transformer: O(n·√n) memory (its pairs), training by recomputing the attention "
        "in the backward"
    ),
    params=(BLOCK, SUMMARY),
    predicate=fixed,
    row_counts=row_counts,
    key_reads=key_reads,
    exponent=lambda explicit: 2.0 if "block" in explicit else 1.5,
    native=native_impl(
        plan=plan,
        run=run,
        cost="O(n·l·d + n·(c·n/l)·d): blocks plus the summary keys (one oneDNN tile a block on the CPU)",
    ),
    check=check,
)
