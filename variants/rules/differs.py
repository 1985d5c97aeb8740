"""Where a library's definition of a variant differs from ours, and where the two coincide (the check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Differs:
    """Where a library's definition differs from the variant's, and where the two coincide.

    The correctness check (the sweep's and the tests') runs the library at `seq_len(n, params)`
    with `params` overridden by `same`, values equal to keys where `values_are_keys`, q and k
    scaled by `input_scale`, and allows `tol` (relative) where a perturbation remains.
    """

    note: str  # shown by `suite list` and the report
    seq_len: Callable[[int, dict], int] | None = None  # a length where the definitions coincide
    same: tuple[tuple[str, Any], ...] = ()  # parameter values where they coincide (reformer: rounds=1)
    values_are_keys: bool = False  # a layer with one context input: it attends with v = k
    tol: float | None = None
    input_scale: float = 1.0  # q and k scaled where the library's perturbation is negligible

    def check_inputs(self, q, k, v):
        """The inputs the check gives both sides."""
        q, k = q * self.input_scale, k * self.input_scale
        return q, k, (k if self.values_are_keys else v)

    def check_shape(self, seq_len: int, params: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        params = {**params, **dict(self.same)}
        return (self.seq_len(seq_len, params) if self.seq_len else seq_len), params
