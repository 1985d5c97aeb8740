"""Key-list kernels: each query row against its own keys, gathered by index (random keys, bigbird's
random part), forward and backward."""

from variants.kernels.gather.bwd import gather_bwd, transpose
from variants.kernels.gather.fwd import gather_fwd
from variants.kernels.gather.naive import gather_reference, list_mask

__all__ = ["gather_bwd", "gather_fwd", "gather_reference", "list_mask", "transpose"]
