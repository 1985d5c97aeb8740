"""Reformer's buckets (variants.native.lsh.hashing): a float32 call hashes every position into the bucket its
float64 reference does, near ties included, and sorts positions by (bucket, position)."""

from __future__ import annotations

import pytest
import torch

from variants.catalog.reformer import rotations
from variants.native.lsh import hashing


def _near_ties(rot: torch.Tensor, rows: int, spread: float) -> torch.Tensor:
    """float32 queries (1, 1, rows, d) whose two largest |x·r| of round 0 differ by about `spread` of ‖x‖·‖r‖:
    each row moved along the difference of its two top columns, so the margin is set, not drawn."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(rows, rot.shape[1], generator=gen, dtype=torch.float64)
    proj = x @ rot[0]
    two = proj.abs().topk(2, dim=-1).indices
    sign = torch.sign(proj.gather(1, two))
    w = sign[:, :1] * rot[0][:, two[:, 0]].T - sign[:, 1:] * rot[0][:, two[:, 1]].T  # |p1| − |p2| = x·w
    margin = (
        (torch.rand(rows, 1, generator=gen, dtype=torch.float64) * 2 - 1)
        * spread
        * x.norm(dim=1, keepdim=True)
        * w.norm(dim=1, keepdim=True)
    )
    x = x - ((x * w).sum(1, keepdim=True) - margin) / (w * w).sum(1, keepdim=True) * w
    return x.float()[None, None]


@pytest.mark.parametrize("n, buckets", [(1, 32), (97, 32), (2048, 32), (300, 2), (500, 1024)])
def test_a_float32_call_hashes_as_the_float64_projection(n, buckets):
    rot = rotations(64, buckets, 4, 0)
    q = torch.randn(2, 3, n, 64, generator=torch.Generator().manual_seed(n))
    assert torch.equal(hashing.hashes(q, rot), hashing.exact(q.double(), rot))
    assert torch.equal(hashing.hashes(q.to(torch.bfloat16), rot), hashing.exact(q.to(torch.bfloat16).double(), rot))


def test_near_ties_float32_cannot_settle_are_hashed_again_in_float64(monkeypatch):
    """Margins of a few float32 roundings: float32 alone puts some rows in the other bucket (the check
    below without the float64 pass), and the float64 pass puts every row where the reference does."""
    rot = rotations(64, 32, 4, 0)
    q = _near_ties(rot, rows=4000, spread=3e-7)
    reference = hashing.exact(q, rot)
    assert torch.equal(hashing.hashes(q, rot), reference)
    monkeypatch.setattr(hashing, "_exactly", lambda *args: None)
    assert (hashing.hashes(q, rot) != reference).sum() > 0  # the ties are within float32's reach


def test_the_first_maximum_wins_an_exact_tie_as_the_concatenations_argmax():
    rot = torch.zeros(1, 2, 2, dtype=torch.float64)
    rot[0, 0, 0] = rot[0, 0, 1] = 1.0  # x·r equal in both columns: bucket 0; −x: bucket 2
    q = torch.tensor([[[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]]]])
    assert hashing.hashes(q, rot)[0, 0, 0].tolist() == hashing.exact(q, rot)[0, 0, 0].tolist() == [0, 2, 0]


def test_positions_are_sorted_by_bucket_then_position():
    buckets = torch.randint(0, 8, (2, 3, 4, 500), generator=torch.Generator().manual_seed(0))
    order = hashing.sort_order(buckets)
    n = buckets.shape[-1]
    assert torch.equal(order, torch.argsort(buckets * n + torch.arange(n), dim=-1))
