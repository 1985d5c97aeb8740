"""Residue-class kernels: strided's keys j ≡ i (mod l), rows and keys addressed by index arithmetic,
forward and backward."""

from variants.triton.residue.bwd import residue_bwd
from variants.triton.residue.fwd import residue_fwd
from variants.triton.residue.naive import residue_mask, residue_reference

__all__ = ["residue_bwd", "residue_fwd", "residue_mask", "residue_reference"]
