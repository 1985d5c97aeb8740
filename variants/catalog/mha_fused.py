"""Multi-head attention with one projection for all heads (Vaswani et al. 2017). Claim: the FLOPs of
`mha_per_head`, and faster: one GEMM per projection instead of H."""

from __future__ import annotations

from variants.impls.classic import SEED, FusedMHA, classic_variant, mha_dense, mha_theory, module_impl

SPEC = classic_variant("mha_fused", "Multi-head attention with one projection for all heads.",
                       "Vaswani et al. 2017, Attention Is All You Need", (SEED,), mha_theory, (mha_dense(), module_impl(FusedMHA)))
