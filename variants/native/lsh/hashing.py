"""LSH buckets: a seeded random rotation's argmax, positions sorted by (bucket, position), and the
rounds' outputs merged by their log-sum-exp."""

from __future__ import annotations

import torch


def hashes(q: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Bucket of every position in every round: (B, H, rounds, n), argmax of [xR, −xR]. One function
    for both paths, so both hash alike (ties included: the first maximum, as argmax of the
    concatenation), and in float64 whatever q's dtype (rot is float64), so that a float32 call and
    its float64 reference hash alike: in float32 a near tie put one position in another bucket,
    4e-4 off the reference at n = 97 (causal). A round and an eighth of the rows at a time."""
    b, h, n, _ = q.shape
    out = torch.empty(b, h, rot.shape[0], n, dtype=torch.long, device=q.device)
    step = max(1, -(-n // 8))
    for r in range(rot.shape[0]):
        for r0 in range(0, n, step):
            proj = q[:, :, r0 : r0 + step].double() @ rot[r]  # (B, H, rows, b/2); ‖q‖ does not move the argmax
            top, low = proj.max(dim=-1), proj.min(dim=-1)
            out[:, :, r, r0 : r0 + step] = torch.where(top.values >= -low.values, top.indices,
                                                       low.indices + proj.shape[-1])
    return out


def sort_order(buckets: torch.Tensor) -> torch.Tensor:
    """Positions sorted by (bucket, position): (B, H, R, n)."""
    n = buckets.shape[-1]
    pos = torch.arange(n, device=buckets.device)
    return torch.argsort(buckets * n + pos, dim=-1)


def merge_rounds(outs: torch.Tensor, lses: torch.Tensor) -> torch.Tensor:
    """Σ_r softmax_r(lse) · out_r: (B, H, R, n, d), (B, H, R, n) -> (B, H, n, d)."""
    return (outs * torch.softmax(lses, dim=2)[..., None]).sum(dim=2)
