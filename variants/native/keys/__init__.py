"""Key lists per query (gather, or SDDMM/SpMM on a CSR pattern), fixed key subsets, and a block's own keys with a
subset as one tile (`block_subset`)."""

from variants.native.keys import block_subset
from variants.native.keys.csr_slices import csr_slices
from variants.native.keys.rows import KeySubset, gather_part, random_keys, row_keys

__all__ = ["KeySubset", "block_subset", "csr_slices", "gather_part", "random_keys", "row_keys"]
