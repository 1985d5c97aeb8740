"""Multi-query attention (Shazeer 2019): every query head reads the one K/V head. Claim: the FLOPs of
`full`; KV bytes 2·B·n·d·bytes, H times fewer, so decode (one query against a cache of n) gets faster."""

from __future__ import annotations

from variants.catalog import full
from variants.impls import shared_kv_variant

SPEC = shared_kv_variant(
    "mqa",
    "one",
    (),
    "Multi-query attention: all query heads share one K/V head.",
    "Shazeer 2019, Fast Transformer Decoding: One Write-Head is All You Need",
    like=full.SPEC,
    memory=full.FLASH,
)
