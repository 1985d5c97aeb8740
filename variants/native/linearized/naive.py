"""The plain reference: linearized attention in its explicit n×n form."""

from __future__ import annotations

import torch

from variants.native.linearized.state import FeatureMap


def quadratic(phi: FeatureMap, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The explicit form: A = φ(Q)φ(K)ᵀ (n×n), out = A V / rowsum(A). O(n²) by construction."""
    a = phi.query(q) @ phi.key(k)[0].transpose(-1, -2)  # (B, H, n, n)
    if causal:
        a = a.tril()
    return (a @ v) / a.sum(dim=-1, keepdim=True)
