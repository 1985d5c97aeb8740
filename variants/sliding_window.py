"""Sliding window (Longformer, Beltagy et al. 2020): query i attends to keys with |i - j| <= w.

Claim: P ≈ n·(2w+1) pairs, so time O(n·w·d), exponent 1 in n for a fixed window.
"""

from __future__ import annotations

import torch

from variants.impls import xformers_bias, xformers_impl
from variants.masks import causal_clip, named
from variants.native import band_plan, merge
from variants.pattern import native_impl, pattern_variant, rows
from variants.registry import Param

WINDOW = Param("window", 128, "one-sided reach w: keys with |i - j| <= w", minimum=0)


def window(n: int, params: dict):
    w = params["window"]
    return named(lambda b, h, q_idx, kv_idx: (q_idx - kv_idx).abs() <= w, f"window({w})")


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    i, w = rows(n), params["window"]
    return causal_clip((i - w).clamp(min=0), (i + w).clamp(max=n - 1), i, causal)


SPEC = pattern_variant(
    name="sliding_window",
    doc=__doc__,
    source="Beltagy et al. 2020, Longformer",
    params=(WINDOW,),
    predicate=window,
    row_counts=row_counts,
    exponent=lambda explicit: 1.0,
    native=native_impl(
        plan=lambda n, causal, p, like: band_plan(n, p["window"], causal, like),
        run=lambda q, k, v, plan: merge([plan.part(q, k, v, need_lse=False)]),
        cost="O(n·w·d): blocks of queries against their neighbouring key blocks",
    ),
    extra_impls=(xformers_impl(xformers_bias("window")),),
)
