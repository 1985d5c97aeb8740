"""Strided pattern (Sparse Transformer, Child et al. 2019, §4): |i − j| < l or (i − j) mod l = 0.

Claim: P ≈ n·(2l + n/l); with l = ⌈√n⌉ the exponent in n is 1.5, with l held constant it is 2.
"""

from __future__ import annotations

import torch

from variants.masks import causal_clip, named
from variants.native import band_plan, residue_part, union
from variants.pattern import native_impl, pattern_variant, rows
from variants.registry import Param, sqrt_n

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


def plan(n: int, causal: bool, params: dict, like):
    return band_plan(n, params["stride"] - 1, causal, like), params["stride"], causal


def run(q, k, v, p):
    band, stride, causal = p
    return union(
        q, k, v,
        lambda into: band.part(q, k, v, need_lse=True, into=into),  # |i − j| < l
        lambda into: residue_part(q, k, v, stride=stride, causal=causal, need_lse=True, into=into),  # j ≡ i mod l, j != i
    )


SPEC = pattern_variant(
    name="strided",
    doc=__doc__,
    source="Child et al. 2019, Generating Long Sequences with Sparse Transformers, §4",
    params=(STRIDE,),
    predicate=strided,
    row_counts=row_counts,
    exponent=lambda explicit: 2.0 if "stride" in explicit else 1.5,
    native=native_impl(plan=plan, run=run, cost="O(n·l·d + n²/l·d): a band plus attention within residue classes"),
)
