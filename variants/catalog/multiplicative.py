"""Multiplicative attention (Luong et al. 2015, "general"): score = qᵀ W k. Claim: O(n²·d) plus one d×d
projection."""

from __future__ import annotations

from variants.impls.classic import (
    SEED,
    classic_variant,
    multiplicative,
    multiplicative_sdpa,
    multiplicative_theory,
    multiplicative_weights,
    reference_impl,
)
from variants.rules import MemoryClaim

SPEC = classic_variant(
    "multiplicative",
    "Multiplicative (Luong 'general') attention: score = qᵀ W k.",
    "Luong et al. 2015, Effective Approaches to Attention-based Neural Machine Translation",
    (SEED,),
    multiplicative_theory,
    (
        reference_impl(multiplicative, "O(n²·d + n·d²): n×n scores materialized", multiplicative_weights),
        multiplicative_sdpa(),
    ),
    memory=MemoryClaim(
        "Luong et al. 2015: the alignment weights of every pair, n_q·n_k, which the model shows",
        forward=2.0,
        training=2.0,
    ),
)
