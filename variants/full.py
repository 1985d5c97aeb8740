"""Full softmax attention (Vaswani et al. 2017): every query attends to every key, O(n²·d)."""

from __future__ import annotations

import torch

from variants.impls import dense_impl, flex_impl, nested_impl, sdpa_impl, xformers_bias, xformers_impl
from variants.masks import named, with_causal
from variants.pattern import pattern_theory, rows
from variants.registry import VariantSpec, register


def everything(n: int, params: dict):
    return named(lambda b, h, q_idx, kv_idx: q_idx >= 0, "full")


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    return rows(n) + 1 if causal else torch.full((n,), n, dtype=torch.long)


SPEC = register(
    VariantSpec(
        name="full",
        family="sparse",
        summary="Full softmax attention: every query attends to every key, O(n²·d).",
        source="Vaswani et al. 2017, Attention Is All You Need",
        params=(),
        theory_fn=pattern_theory(lambda explicit: 2.0),
        impls={
            i.name: i
            for i in (
                dense_impl(None), sdpa_impl(None), flex_impl(None, "full"),
                xformers_impl(xformers_bias("full"), work="algorithm"), nested_impl(),
            )
        },
        mask_fn=lambda n, causal, p, device="cpu": with_causal(everything(n, p), causal),
        row_counts_fn=row_counts,
        decode=True,
        cross=True,
        padding=True,  # a prefix of full attention is full attention
    )
)
