"""The registry's rules: what a variant declares (spec), the registry, theory, shapes, padding, masks,
the reference check and how a library differs."""

from variants.rules.checks import against_reference
from variants.rules.differs import Differs
from variants.rules.masks import (MaskMod, causal_clip, causal_mod, dense_batch_mask, dense_mask, everything, named, or_masks,
                                  padded, shifted, show, with_causal)
from variants.rules.padding import valid_lengths
from variants.rules.registry import VariantSpec, attach, register
from variants.rules.shapes import NOT_PREFIX
from variants.rules.spec import FLOAT_DTYPES, PADDING, WORK, Impl, Param, Prepared, Problem, device_reasons, sqrt_n
from variants.rules.theory import (FWD_BWD_FLOP_FACTOR, INDEX_BYTES, MODES, PRODUCT_TERMS, SOFTMAX_OPS_PER_PAIR, TILE_ROWS, MemoryClaim, Theory,
                                   io_bytes,
                                   score_flops, score_theory, tiles)

__all__ = ["Differs", "FLOAT_DTYPES", "FWD_BWD_FLOP_FACTOR", "INDEX_BYTES", "Impl", "MODES", "MaskMod", "MemoryClaim", "NOT_PREFIX", "PADDING", "PRODUCT_TERMS", "Param", "Prepared", "Problem", "SOFTMAX_OPS_PER_PAIR", "TILE_ROWS", "Theory", "VariantSpec", "WORK", "against_reference", "attach", "causal_clip", "causal_mod", "dense_batch_mask", "dense_mask", "device_reasons", "everything", "io_bytes", "named", "or_masks", "padded", "register", "score_flops", "score_theory", "shifted", "show", "sqrt_n", "tiles", "valid_lengths", "with_causal"]
