"""The residue family's reference: keys j ≡ i (mod l), j ≠ i (j < i when causal) as a dense mask. O(n²)."""

from __future__ import annotations

import torch

from variants.triton.band.naive import masked_softmax


def residue_mask(n: int, stride: int, causal: bool) -> torch.Tensor:
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    ok = ((i - j) % stride == 0) & (i != j)
    return ok & (j < i) if causal else ok


def residue_reference(q, k, v, *, stride: int, causal: bool):
    return masked_softmax(q, k, v, residue_mask(q.shape[-2], stride, causal).to(q.device))
