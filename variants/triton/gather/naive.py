"""The key-list family's reference: the lists as a dense (n, n) mask, then a masked softmax. O(n²)."""

from __future__ import annotations

import torch

from variants.triton.band.naive import masked_softmax


def list_mask(idx: torch.Tensor, n: int) -> torch.Tensor:
    """(n, n) bool from (n, R) lists (−1: no key)."""
    mask = torch.zeros(n, n + 1, dtype=torch.bool, device=idx.device)
    mask.scatter_(1, idx.long().where(idx >= 0, n), True)
    return mask[:, :n]


def gather_reference(q, k, v, idx):
    return masked_softmax(q, k, v, list_mask(idx, q.shape[-2]))
