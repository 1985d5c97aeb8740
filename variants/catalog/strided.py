"""Strided pattern (Sparse Transformer, Child et al. 2019, §4): |i − j| < l or (i − j) mod l = 0.

Claim: P ≈ n·(2l + n/l); with l = ⌈√n⌉ the exponent in n is 1.5, with l held constant it is 2.
"""

from __future__ import annotations

import torch

from variants.impls import native_impl, pattern_variant, range_reads, rows, tile_bounds
from variants.native.band import band_plan
from variants.native.core import union
from variants.native.residue import Residues
from variants.rules import MemoryClaim, Param, causal_clip, named, sqrt_n

STRIDE = Param("stride", None, "stride l; default ⌈√n⌉", minimum=1, derive=sqrt_n)


def strided(n: int, params: dict):
    l = params["stride"]
    return named(
        lambda b, h, q_idx, kv_idx: ((q_idx - kv_idx).abs() < l) | ((q_idx - kv_idx) % l == 0),
        f"strided({l})",
    )


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    i, l = rows(n), params["stride"]
    local = causal_clip((i - l + 1).clamp(min=0), (i + l - 1).clamp(max=n - 1), i, causal)
    before = i // l  # j = i − m·l >= 0, m >= 1
    after = torch.zeros_like(i) if causal else (n - 1 - i) // l
    return local + before + after


def key_reads(n: int, causal: bool, params: dict) -> int:
    """The Sparse Transformer's two parts: the band |i − j| < l by tiles ([s − l + 1, e + l − 1),
    causal [s − l + 1, e)), and the classes (i − j) mod l = 0, each reading its own members once: n."""
    s, e, l = *tile_bounds(n), params["stride"]
    return range_reads((s - l + 1).clamp(min=0), e if causal else (e + l - 1).clamp(max=n)) + n


def plan(n: int, causal: bool, params: dict, like):
    band = band_plan(n, params["stride"] - 1, causal, like)  # |i − j| < l
    return band, Residues(params["stride"], causal)  # j ≡ i mod l, j != i


def run(q, k, v, p):
    return union(q, k, v, *p)


SPEC = pattern_variant(
    name="strided",
    doc=__doc__,
    source="Child et al. 2019, Generating Long Sequences with Sparse Transformers, §4",
    memory=MemoryClaim(
        "Child et al. 2019, Sparse Transformer: O(n·√n) memory (its pairs), training by recomputing the attention "
        "in the backward"
    ),
    params=(STRIDE,),
    predicate=strided,
    row_counts=row_counts,
    key_reads=key_reads,
    exponent=lambda explicit: 2.0 if "stride" in explicit else 1.5,
    native=native_impl(plan=plan, run=run, cost="O(n·l·d + n²/l·d): a band plus attention within residue classes"),
)
