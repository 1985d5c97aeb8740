"""Band kernels: each block of queries against the key blocks its band reaches (sliding window,
neighborhood, fixed's blocks and summary keys, global rows and keys), forward and backward."""

from variants.triton.band.bwd import band_bwd
from variants.triton.band.fwd import band_fwd
from variants.triton.band.naive import band_mask, band_reference
from variants.triton.band.ranges import BLOCKS, KINDS, NEIGHBORHOOD, RECT, SUMMARY, WINDOW

__all__ = [
    "BLOCKS",
    "KINDS",
    "NEIGHBORHOOD",
    "RECT",
    "SUMMARY",
    "WINDOW",
    "band_bwd",
    "band_fwd",
    "band_mask",
    "band_reference",
]
