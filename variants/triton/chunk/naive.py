"""The chunk family's reference: the explicit n×n form over features computed in torch. O(n²)."""

from __future__ import annotations


def chunk_reference(fa, fb, c, *, causal: bool, normalize: bool):
    """mask(fa fbᵀ) c, divided by mask(fa fbᵀ) 1 when `normalize`: (B, H, n_a, c_width)."""
    a = fa @ fb.transpose(-1, -2)
    if causal:
        a = a.tril()
    out = a @ c
    return out / a.sum(dim=-1, keepdim=True) if normalize else out
