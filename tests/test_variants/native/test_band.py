"""The two forwards of the band, and of the parts beside it (strided's residue classes, fixed's and
bigbird's key subsets, neighborhood's interior): the fused CPU kernel, and the steps of matmuls and
a softmax that every other device runs. Each against the dense reference at the shapes the sweeps
time, and the fused one's log-sum-exp where a row has no key (a part of a union folds by it)."""

from __future__ import annotations

import pytest
import torch
from helpers import inputs

import variants
from variants.native.band import BandPlan, band_bias, band_part
from variants.native.core import fused_kernel as fused

BANDS = ["sliding_window", "strided", "fixed", "bigbird", "neighborhood"]  # neighborhood: its interior is a band
NEG_INF = float("-inf")


def _fused_rows(monkeypatch, heads: int = 8) -> list[int]:
    """Count the query rows of one head the fused kernel scores (0: the run never reached it): its
    q is (B·H, blocks, block, d) for a band, (B·H, classes, members, d) for residue classes, (1, B·H,
    rows, d) for a key subset."""
    rows, kernel = [], fused.FUSED
    monkeypatch.setattr(
        fused, "FUSED", lambda q, *a, **kw: (rows.append(q.shape[:3].numel() // heads), kernel(q, *a, **kw))[1]
    )
    return rows


@pytest.mark.skipif(fused.FUSED is None, reason="this torch has no fused CPU attention kernel")
@pytest.mark.parametrize("n", [700, pytest.param(2048, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", BANDS)
def test_the_fused_forward_equals_dense_and_scores_the_interior(name, n, monkeypatch):
    """B = 1, H = 8, d = 64 (the grids' shape), float64 and float32: the fused kernel takes every
    interior block (at n = 2048 all but the last few rows), the ends go by the steps."""
    spec = variants.get(name)
    q, k, v = inputs(spec, batch=1, heads=8, head_dim=64, seq_len=n)
    for causal in (False, True):
        ref = spec.attention(q, k, v, impl="dense", causal=causal)
        rows = _fused_rows(monkeypatch)
        assert (spec.attention(q, k, v, impl="native", causal=causal) - ref).abs().max().item() <= 1e-9
        assert sum(rows) >= (0.85 if n == 2048 else 0.4) * n, f"{name}: the fused kernel scored {sum(rows)} rows"
        q32, k32, v32 = (x.float() for x in (q, k, v))
        assert (spec.attention(q32, k32, v32, impl="native", causal=causal).double() - ref).abs().max() <= 2e-5


@pytest.mark.parametrize("n", [256, pytest.param(2048, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", BANDS)
def test_the_unfused_forward_equals_dense(name, n, monkeypatch):
    """Without the fused kernel (a GPU, or a torch without it) the band goes by its steps, as it
    did before: that form stays exact."""
    monkeypatch.setattr(fused, "FUSED", None)
    spec = variants.get(name)
    q, k, v = inputs(spec, batch=1, heads=8, head_dim=64, seq_len=n)
    for causal in (False, True):
        ref = spec.attention(q, k, v, impl="dense", causal=causal)
        assert (spec.attention(q, k, v, impl="native", causal=causal) - ref).abs().max().item() <= 1e-9


@pytest.mark.skipif(fused.FUSED is None, reason="this torch has no fused CPU attention kernel")
def test_a_row_with_no_key_has_lse_minus_infinity_from_the_fused_kernel(monkeypatch):
    """The kernel gives such a row 0 with lse 0; the band makes its lse −inf, as the steps do, so
    that a union gives it no weight."""
    n, block = 256, 32
    q, k, v = (torch.randn(1, 2, n, 16, dtype=torch.float64) for _ in range(3))

    def allowed(i, j):
        return ((i - j).abs() <= 40) & (i % 7 != 3)  # rows 3, 10, 17, … see no key

    plan = BandPlan(block, 2, 2, band_bias(n, block, 2, 2, allowed, q))
    assert plan.empty is not None
    kernel = band_part(q, k, v, block=block, left=2, right=2, bias=plan.bias, need_lse=True, empty=plan.empty)
    monkeypatch.setattr(fused, "FUSED", None)
    steps = band_part(q, k, v, block=block, left=2, right=2, bias=plan.bias, need_lse=True)
    empty = torch.arange(n) % 7 == 3
    assert torch.isneginf(kernel.lse[..., empty]).all() and (kernel.out[..., empty, :] == 0).all()
    assert torch.equal(torch.isneginf(kernel.lse), torch.isneginf(steps.lse))
    finite = ~empty
    assert (kernel.lse[..., finite] - steps.lse[..., finite]).abs().max() < 1e-12
    assert (kernel.out - steps.out).abs().max() < 1e-12
