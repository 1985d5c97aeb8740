"""Key-list kernels: each query row against its own keys, gathered by index (random keys, bigbird's
random part), forward and backward."""

from variants.triton.gather.bwd import gather_bwd, transpose
from variants.triton.gather.fwd import gather_fwd
from variants.triton.gather.naive import gather_reference, list_mask

__all__ = ["gather_bwd", "gather_fwd", "gather_reference", "list_mask", "transpose"]
