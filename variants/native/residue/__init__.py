"""Attention within residue classes (j ≡ i mod l)."""

from variants.native.residue.classes import Residues

__all__ = ["Residues"]
