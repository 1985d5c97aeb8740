"""Linearized attention: φ(Q)(φ(K)ᵀV) in linear time with its own backward, the gated recurrence, and
the explicit n×n reference (naive)."""

from variants.native.linearized.forward import decode_step, linear_time, state_of
from variants.native.linearized.gated import gated_linear_time, gated_quadratic
from variants.native.linearized.naive import quadratic
from variants.native.linearized.state import FeatureMap

__all__ = ["FeatureMap", "decode_step", "gated_linear_time", "gated_quadratic", "linear_time", "quadratic", "state_of"]
