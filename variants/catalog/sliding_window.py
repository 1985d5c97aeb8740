"""Sliding window (Longformer, Beltagy et al. 2020): query i attends to keys with |i - j| <= w.

Claim: P ≈ n·(2w+1) pairs, so time O(n·w·d), exponent 1 in n for a fixed window.
"""

from __future__ import annotations

import torch

from variants.impls import (
    native_impl,
    pattern_variant,
    peer,
    range_reads,
    rows,
    tile_bounds,
    xformers_bias,
    xformers_impl,
)
from variants.native.band import band_plan
from variants.native.core import output
from variants.rules import Differs, MemoryClaim, Param, causal_clip, named

WINDOW = Param("window", 128, "one-sided reach w: keys with |i - j| <= w", minimum=0)


def window(n: int, params: dict):
    w = params["window"]
    return named(lambda b, h, q_idx, kv_idx: (q_idx - kv_idx).abs() <= w, f"window({w})")


def local_attention_call(q, k, v, causal, params):
    """`local-attention`'s LocalAttention: buckets of w rows, each against its neighbours, exact window."""
    from local_attention import LocalAttention

    w = params["window"]
    layer = (
        LocalAttention(
            window_size=w,
            causal=causal,
            look_backward=1,
            look_forward=0 if causal else 1,
            exact_windowsize=True,
            autopad=True,
        )
        .to(q.device)
        .eval()
    )
    return lambda: layer(q, k, v)


def local_attention_reasons(problem) -> list[str]:
    w = dict(problem.params)["window"]
    return [f"window={w} (local-attention needs a window of at least 1)"] if w < 1 else []


LOCAL_ATTENTION = peer(
    "local-attention",
    "local_attention",
    local_attention_call,
    reasons=local_attention_reasons,
    cost="O(n·3w·d): buckets of w queries against 3 buckets of keys, masked to |i − j| <= w",
    differs=Differs(
        "its autopad appends zero keys when w does not divide n, and the last w rows attend to "
        "them unless causal; checked at n a multiple of w",
        seq_len=lambda n, p: -(-n // p["window"]) * p["window"],
    ),
)


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    i, w = rows(n), params["window"]
    return causal_clip((i - w).clamp(min=0), (i + w).clamp(max=n - 1), i, causal)


def key_reads(n: int, causal: bool, params: dict) -> int:
    """A tile [s, e) reads the keys [s − w, e + w) (causal: [s − w, e)), clipped to the sequence."""
    s, e, w = *tile_bounds(n), params["window"]
    return range_reads((s - w).clamp(min=0), e if causal else (e + w).clamp(max=n))


SPEC = pattern_variant(
    name="sliding_window",
    doc=__doc__,
    source="Beltagy et al. 2020, Longformer",
    memory=MemoryClaim(
        "Beltagy et al. 2020, Longformer: memory linear in n for a fixed window (its pairs), in training too"
    ),
    params=(WINDOW,),
    predicate=window,
    row_counts=row_counts,
    key_reads=key_reads,
    exponent=lambda explicit: 1.0,
    native=native_impl(
        plan=lambda n, causal, p, like: band_plan(n, p["window"], causal, like),
        run=output,  # one part: its output as it is
        cost="O(n·w·d): blocks of queries against their neighbouring key blocks",
    ),
    extra_impls=(xformers_impl(xformers_bias("window")), LOCAL_ATTENTION),
    padding=True,  # |i − j| <= w on a prefix is the window on the prefix
)
