"""LSH buckets: a seeded random rotation's argmax, positions sorted by (bucket, position), and the
rounds' outputs merged by their log-sum-exp."""

from __future__ import annotations

import torch

# A float32 projection x·r lies within SAFETY·(d + 2)·2⁻²⁴·‖x‖·‖r‖ of the exact one (the inner
# product's rounding bound, γ_d·Σ|xᵢ||rᵢ| ≤ γ_d·‖x‖·‖r‖, plus r's own rounding to float32), so where
# the largest |x·r| clears the next by twice that, and zero by it, float32 picks the bucket the exact
# projection picks. SAFETY covers the norms' own rounding.
SAFETY = 4.0
ROW_SHARE = 8  # rows at a time: an eighth of the sequence


def hashes(q: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Bucket of every position in every round: (B, H, rounds, n), argmax of [xR, −xR] (the first
    maximum, as argmax of the concatenation). One function for both paths, and every dtype hashes as
    the exact projection does, so a float32 call and its float64 reference hash alike (in float32 a near
    tie put one position in another bucket, 4e-4 off the reference at n = 97, causal): a float64 call
    projects in float64 (`exact`); any other projects every round at once in float32 (one GEMM against
    R's rounds side by side, 10x the float64 rate) and projects again in float64 only the rows whose
    float32 margin is within the rounding bound (`unsure`)."""
    if q.dtype == torch.float64 or torch.get_float32_matmul_precision() != "highest":
        return exact(q, rot)
    b, h, n, d = q.shape
    rounds, _, half = rot.shape
    across = rot.float().transpose(1, 2).reshape(rounds * half, d)  # (R·b/2, d): every round in one product
    bound = SAFETY * (d + 2) * 2.0**-24 * float(rot.norm(dim=1).max())  # × ‖x‖: a row's rounding bound
    out = torch.empty(b, h, rounds, n, dtype=torch.long, device=q.device)
    step = max(1, -(-n // ROW_SHARE))
    for r0 in range(0, n, step):
        x = q[:, :, r0 : r0 + step].float()
        proj = (across @ x.transpose(-1, -2)).view(b, h, rounds, half, -1)  # (B, H, R, b/2, rows)
        index, top, second = _two_largest(proj.abs())  # NB: abs() a new tensor, which _two_largest rewrites
        negative = proj.gather(-2, index[..., None, :]).squeeze(-2) < 0
        out[..., r0 : r0 + step] = index + half * negative
        tol = bound * torch.linalg.vector_norm(x, dim=-1)[:, :, None]  # (B, H, 1, rows)
        unsure = (second >= top - 2 * tol - top * 2.0 ** (_index_bits(half) - 22)) | (top <= tol)
        if unsure.any():
            _exactly(out, q, rot, r0, unsure.nonzero())
    return out


def _index_bits(half: int) -> int:
    return max(1, (half - 1).bit_length())


def _two_largest(size: torch.Tensor):
    """Over dim −2 of `size` (≥ 0, float32, overwritten): the first largest's index, the largest and the second
    largest. Non-negative floats order as their bits do, so each value's lowest bits are replaced by
    its index (reversed: the first wins a tie) and one max over integers finds both; the values read
    back are low by at most 2^bits units in the last place (the caller's slack)."""
    half = size.shape[-2]
    mask = (1 << _index_bits(half)) - 1
    tag = (mask - torch.arange(half, dtype=torch.int32, device=size.device))[:, None]  # (b/2, 1)
    key = size.view(torch.int32).bitwise_and_(~mask).bitwise_or_(tag)  # in place: `size` is spent
    best = key.amax(dim=-2)
    index = (mask - (best & mask)).long()
    second = key.scatter_(-2, index[..., None, :], 0).amax(dim=-2)
    return index, best.view(torch.float32), second.view(torch.float32)


def _exactly(out, q, rot, r0: int, where: torch.Tensor) -> None:
    """Hash the (batch, head, round, row) entries `where` again in float64, into out."""
    bi, hi, r, row = where.unbind(-1)
    x = q[bi, hi, r0 + row].double()  # (k, d)
    proj = torch.einsum("kd,kdc->kc", x, rot[r])  # (k, b/2)
    out[bi, hi, r, r0 + row] = _pick(proj)


def exact(q: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """`hashes` with every projection in float64: a round and an eighth of the rows at a time."""
    b, h, n, _ = q.shape
    out = torch.empty(b, h, rot.shape[0], n, dtype=torch.long, device=q.device)
    step = max(1, -(-n // ROW_SHARE))
    for r in range(rot.shape[0]):
        for r0 in range(0, n, step):
            proj = q[:, :, r0 : r0 + step].double() @ rot[r]  # (B, H, rows, b/2); ‖q‖ does not move the argmax
            out[:, :, r, r0 : r0 + step] = _pick(proj)
    return out


def _pick(proj: torch.Tensor) -> torch.Tensor:
    """argmax of [proj, −proj] over the last dim, the first maximum."""
    top, low = proj.max(dim=-1), proj.min(dim=-1)
    return torch.where(top.values >= -low.values, top.indices, low.indices + proj.shape[-1])


def sort_order(buckets: torch.Tensor) -> torch.Tensor:
    """Positions sorted by (bucket, position): (B, H, R, n). A stable sort of the buckets (positions
    in order within one), faster than argsort of bucket·n + position (docs/performance.md, "(15) Reformer's
    hashing in float32, and linear's share on a faster memory")."""
    return torch.sort(buckets, dim=-1, stable=True).indices


def merge_rounds(outs: torch.Tensor, lses: torch.Tensor) -> torch.Tensor:
    """Σ_r softmax_r(lse) · out_r: (B, H, R, n, d), (B, H, R, n) -> (B, H, n, d)."""
    return (outs * torch.softmax(lses, dim=2)[..., None]).sum(dim=2)
