"""Chunk kernels: linearized attention (linear, performer, rfa), intra-chunk quadratic and inter-chunk
state, feature maps computed in the kernels; the backward as three more chunk products."""

from variants.triton.chunk.attention import Features, linear_attention
from variants.triton.chunk.bwd import chunk_backward, product
from variants.triton.chunk.features import ELU, FAVOR, FOURIER, IDENTITY
from variants.triton.chunk.fwd import MAX_FEATURES, chunk_forward
from variants.triton.chunk.naive import chunk_reference

__all__ = [
    "ELU",
    "FAVOR",
    "FOURIER",
    "IDENTITY",
    "MAX_FEATURES",
    "Features",
    "chunk_backward",
    "chunk_forward",
    "chunk_reference",
    "linear_attention",
    "product",
]
