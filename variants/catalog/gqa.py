"""Grouped-query attention (Ainslie et al. 2023): query head h reads KV head ⌊h·G/H⌋. Claim: the FLOPs of
`full`; KV bytes 2·B·G·n·d·bytes shrink H/G times, so decode (one query against a cache of n) gets faster
as G falls."""

from __future__ import annotations

from variants.catalog import full
from variants.impls import shared_kv_variant
from variants.rules import Param

GROUPS = Param("groups", None, "KV heads G (H divisible by G); default: taken from the shape of k", minimum=1)

SPEC = shared_kv_variant(
    "gqa",
    "divides",
    (GROUPS,),
    "Grouped-query attention: G K/V heads, each shared by H/G query heads.",
    "Ainslie et al. 2023, GQA: Training Generalized Multi-Query Transformer Models",
    like=full.SPEC,
    memory=full.FLASH,
)
