"""Multi-head attention with a separate Linear per head, concatenated (Vaswani et al. 2017). Claim: the
FLOPs of `mha_fused`, and slower."""

from __future__ import annotations

from variants.impls.classic import SEED, PerHeadMHA, classic_variant, mha_dense, mha_theory, module_impl
from variants.rules import MemoryClaim

SPEC = classic_variant(
    "mha_per_head",
    "Multi-head attention with a separate Linear per head, concatenated.",
    "Vaswani et al. 2017, Attention Is All You Need",
    (SEED,),
    mha_theory,
    (mha_dense(), module_impl(PerHeadMHA)),
    memory=MemoryClaim(
        "Vaswani et al. 2017: the module as written keeps each head's n×n attention weights, kept for the backward",
        forward=2.0,
        training=2.0,
    ),
)
