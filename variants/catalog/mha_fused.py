"""Multi-head attention with one projection for all heads (Vaswani et al. 2017). Claim: the FLOPs of
`mha_per_head`, and faster: one GEMM per projection instead of H."""

from __future__ import annotations

from variants.impls.classic import SEED, FusedMHA, classic_variant, mha_dense, mha_theory, module_impl
from variants.rules import MemoryClaim

SPEC = classic_variant(
    "mha_fused",
    "Multi-head attention with one projection for all heads.",
    "Vaswani et al. 2017, Attention Is All You Need",
    (SEED,),
    mha_theory,
    (mha_dense(), module_impl(FusedMHA)),
    memory=MemoryClaim(
        "Vaswani et al. 2017: the module as written keeps each head's n×n attention weights, kept for the backward",
        forward=2.0,
        training=2.0,
    ),
)
