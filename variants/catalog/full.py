"""Full softmax attention (Vaswani et al. 2017): every query attends to every key, O(n²·d)."""

from __future__ import annotations

import torch

from variants.impls import (
    dense_impl,
    flex_impl,
    nested_impl,
    pattern_theory,
    range_reads,
    rows,
    sdpa_impl,
    tile_bounds,
    xformers_bias,
    xformers_impl,
)
from variants.rules import MemoryClaim, VariantSpec, named, register, with_causal


def everything(n: int, params: dict):
    return named(lambda b, h, q_idx, kv_idx: q_idx >= 0, "full")


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    return rows(n) + 1 if causal else torch.full((n,), n, dtype=torch.long)


def key_reads(n: int, causal: bool, params: dict) -> int:
    """Each tile of queries reads every key (causal: every key up to its last row)."""
    s, e = tile_bounds(n)
    return range_reads(torch.zeros_like(s), e if causal else torch.full_like(e, n))


# exact attention's memory: what FlashAttention showed it needs, whose own time stays n² (mqa and gqa share it)
FLASH = MemoryClaim(
    "Dao et al. 2022, FlashAttention: exact attention in O(n) extra memory; its backward recomputes the scores from "
    "the output and log-sum-exp",
    forward=1.0,
    training=1.0,
)

SPEC = register(
    VariantSpec(
        name="full",
        family="sparse",
        summary="Full softmax attention: every query attends to every key, O(n²·d).",
        source="Vaswani et al. 2017, Attention Is All You Need",
        memory=FLASH,
        params=(),
        theory_fn=pattern_theory(lambda explicit: 2.0),
        impls={
            i.name: i
            for i in (
                dense_impl(None),
                sdpa_impl(None),
                flex_impl(None, "full"),
                xformers_impl(xformers_bias("full"), work="algorithm"),
                nested_impl(),
            )
        },
        mask_fn=lambda n, causal, p, device="cpu": with_causal(everything(n, p), causal),
        row_counts_fn=row_counts,
        key_reads_fn=key_reads,
        decode=True,
        cross=True,
        padding=True,  # a prefix of full attention is full attention
    )
)
