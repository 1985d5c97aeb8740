"""Additive attention (Bahdanau et al. 2015): score = vᵀ tanh(W_q q + W_k k). Claim: O(n²·d_a) time, and
O(n²·d_a) memory when broadcast."""

from __future__ import annotations

from variants.impls.classic import (
    ATTN_DIM,
    SEED,
    additive,
    additive_native,
    additive_theory,
    additive_weights,
    classic_variant,
    reference_impl,
)
from variants.rules import MemoryClaim

SPEC = classic_variant(
    "additive",
    "Additive (Bahdanau) attention: score = vᵀ tanh(W_q q + W_k k).",
    "Bahdanau et al. 2015, Neural Machine Translation by Jointly Learning to Align and Translate",
    (ATTN_DIM, SEED),
    additive_theory,
    (
        reference_impl(additive, "O(n²·d_a) time and memory: all pairs broadcast at once", additive_weights),
        additive_native(),
    ),
    memory=MemoryClaim(
        "Bahdanau et al. 2015: the alignment weights of every pair, n_q·n_k, which the model shows",
        forward=2.0,
        training=2.0,
    ),
)
