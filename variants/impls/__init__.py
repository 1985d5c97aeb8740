"""Implementations shared by many variants: dense (dense.py), SDPA and nested (sdpa.py), flex (flex.py),
xformers (xformers_ops.py), the peers (libraries people run), compiled steps, and the builders of the
pattern, linearized, classic and shared-KV forms."""

from variants.impls.classic import FusedMHA, PerHeadMHA, additive, to_heads, to_streams, weights_like
from variants.impls.compiled import Fused
from variants.impls.dense import REDUCED, dense_attention, dense_impl
from variants.impls.flex import flex_impl
from variants.impls.linearized import linear_theory, linearized_variant
from variants.impls.pattern import native_impl, pattern_theory, pattern_variant, range_reads, rows, tile_bounds
from variants.impls.peers import peer
from variants.impls.sdpa import nested_impl, sdpa_impl
from variants.impls.shared_kv import shared_kv_variant
from variants.impls.xformers_ops import xformers_bias, xformers_impl

__all__ = [
    "Fused",
    "FusedMHA",
    "PerHeadMHA",
    "REDUCED",
    "additive",
    "dense_attention",
    "dense_impl",
    "flex_impl",
    "linear_theory",
    "linearized_variant",
    "native_impl",
    "nested_impl",
    "pattern_theory",
    "pattern_variant",
    "peer",
    "range_reads",
    "rows",
    "sdpa_impl",
    "shared_kv_variant",
    "tile_bounds",
    "to_heads",
    "to_streams",
    "weights_like",
    "xformers_bias",
    "xformers_impl",
]
