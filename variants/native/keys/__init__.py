"""Key lists per query (gather, or SDDMM/SpMM on a CSR pattern) and fixed key subsets."""

from variants.native.keys.csr_slices import csr_slices
from variants.native.keys.rows import KeySubset, gather_part, random_keys, row_keys

__all__ = ["KeySubset", "csr_slices", "gather_part", "random_keys", "row_keys"]
