"""The plain reference: every hash round written out on the n×n scores, O(rounds·n²)."""

from __future__ import annotations

import torch

from variants.native.lsh.hashing import hashes, merge_rounds, sort_order
from variants.native.lsh.steps import SELF_SCORE


def allowed(order: torch.Tensor, chunk: int) -> torch.Tensor:
    """(B, H, n, n) pairs allowed in one round: the key's chunk is the query's or the one before."""
    n = order.shape[-1]
    chunks = -(-n // chunk)
    rank = torch.argsort(order, dim=-1)  # sorted position of every position
    c = rank // chunk  # (B, H, n)
    own = c[..., :, None] == c[..., None, :]
    before = c[..., None, :] == (c[..., :, None] - 1) % chunks
    return own | before


def reference(q, k, v, causal: bool, params: dict, rot) -> torch.Tensor:
    """Every round written out on the n×n scores: O(rounds·n²)."""
    n = q.shape[-2]
    keys = torch.nn.functional.normalize(q, dim=-1)
    scores = q @ keys.transpose(-1, -2) * q.shape[-1] ** -0.5  # (B, H, n, n)
    eye = torch.eye(n, dtype=torch.bool, device=q.device)
    later = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    order = sort_order(hashes(q, rot))
    outs, lses = [], []
    for r in range(order.shape[2]):
        s = scores.masked_fill(~allowed(order[:, :, r], params["chunk"]), float("-inf"))
        if causal:
            s = s.masked_fill(later, float("-inf"))
        s = s.masked_fill(eye, SELF_SCORE)
        lses.append(torch.logsumexp(s, dim=-1))
        outs.append(torch.softmax(s, dim=-1) @ v)
    return merge_rounds(torch.stack(outs, 2), torch.stack(lses, 2))
