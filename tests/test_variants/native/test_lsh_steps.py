"""Reformer's rounds in steps (variants.native.lsh.steps): its own backward is exact, and in a few outputs."""

from __future__ import annotations

import pytest
import torch
from helpers import fwd_bwd_length

import variants
from suite.machine.timing import peak_cpu
from variants.catalog import reformer
from variants.native import lsh

SPEC = variants.get("reformer")


def _grads(impl: str, n: int, causal: bool, heads: int = 3, d: int = 16, zero_row: int | None = None, **params):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, heads, n, d, generator=gen, dtype=torch.float64) for _ in range(3))
    if zero_row is not None:
        q[:, :, zero_row] = 0.0  # its key's norm is floored (F.normalize's eps)
    q.requires_grad_(), v.requires_grad_()
    upstream = torch.randn(2, heads, n, d, generator=gen, dtype=torch.float64)
    out = SPEC.attention(q, k, v, impl=impl, causal=causal, **params)
    return torch.autograd.grad(out, (q, v), upstream)


@pytest.mark.slow  # a numerical check at the sweep's sizes: the full suite runs it, the fast lane not
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize(
    "n, params",
    [
        (300, {}),  # 5 chunks, the last padded
        (513, {"rounds": 3, "chunk": 32}),  # a last chunk of one row
        (100, {"chunk": 50}),  # two chunks: each the other's previous
        (40, {}),  # one chunk: no previous
        (97, {"chunk": 16, "zero_row": 5}),  # a query of norm 0
        (1000, {"chunk": 16, "heads": 1}),  # steps of 3 chunks: padding in the first step's and the last's
    ],
    ids=["padded", "one-row-tail", "two-chunks", "one-chunk", "zero-query", "grouped-padded"],
)
def test_gradients_equal_dense(n, params, causal):
    """Against autograd through the n×n dense reference (float64). Causal rows whose every round
    holds only their own key (position 0 always) take P = 1/R there: in float32, exp(−5·10⁴ − lse)
    missed it by 0.2% and failed the sweep's check (tests/test_correctness.py)."""
    for x, a, b in zip("qv", _grads("native", n, causal, **params), _grads("dense", n, causal, **params)):
        assert (a - b).abs().max().item() < 1e-12 * max(1.0, b.abs().max().item()), f"d{x}"


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_gradients_equal_the_readable_rounds_at_the_full_grids_fwd_bwd_shape(causal):
    """At the full grid's largest fwd_bwd length (n = 4096), H = 8, d = 64, float64: the head and
    chunk groups the timed backward takes there, against autograd through every round whole."""
    n = fwd_bwd_length("reformer")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 64, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    upstream = torch.randn(1, 8, n, 64, generator=gen, dtype=torch.float64)
    params = SPEC.resolve(n, {})
    rot = reformer.rotations(64, params["buckets"], params["rounds"], params["seed"])
    grads = [
        torch.autograd.grad(form(q, k, v, causal, params, rot), (q, v), upstream) for form in (lsh.native, lsh.readable)
    ]
    for x, a, b in zip("qv", *grads):
        assert (a - b).abs().max().item() < 1e-10 * max(1.0, b.abs().max().item()), f"d{x}"


@pytest.mark.slow  # a numerical check at the sweep's sizes: the full suite runs it, the fast lane not
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("n", [1024, pytest.param(4096, marks=pytest.mark.slow)])
def test_fwd_bwd_holds_a_few_outputs(n, causal):
    """The timed fwd_bwd call above its inputs (H = 8, d = 64, float32): the output, dQ and dV (k is
    not used: shared QK), a step (half an output) and the order (2R/d of an output: 1/8). Autograd
    through the whole rounds held 56.6 outputs (58.5 causal) at n = 1024."""
    q, k, v = (torch.randn(1, 8, n, 64, requires_grad=True) for _ in range(3))
    call = SPEC.prepare(q, k, v, impl="native", causal=causal)
    grad = torch.ones_like(call())
    run = lambda: torch.autograd.grad(call(), (q, v), grad)  # noqa: E731
    run()
    held = peak_cpu(run) / (q.numel() * 4)
    assert held <= 4.0, f"reformer/native fwd_bwd held {held:.2f} outputs at n = {n}"
