"""The blocked engine every native kernel builds on: key sets scored block by block into (out, lse),
folded together; the fused CPU kernel, the recomputing backward, step sizes and the exp."""

from variants.native.core.blocks import (
    NEG_INF,
    Blocks,
    KeySet,
    Partial,
    Union,
    fold,
    grad_of,
    output,
    softmax_part,
    union,
)
from variants.native.core.expo import exp_
from variants.native.core.fused_kernel import additive, empty_rows, fused, fused_attention
from variants.native.core.part_grad import rowdot, tile_grads
from variants.native.core.steps import cache_elements, cache_rows, cache_sized, step_elements

__all__ = [
    "Blocks",
    "KeySet",
    "NEG_INF",
    "Partial",
    "Union",
    "additive",
    "cache_elements",
    "cache_rows",
    "cache_sized",
    "empty_rows",
    "exp_",
    "fold",
    "fused",
    "fused_attention",
    "grad_of",
    "output",
    "rowdot",
    "softmax_part",
    "step_elements",
    "tile_grads",
    "union",
]
