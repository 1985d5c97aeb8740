"""Bidirectional linearized attention's own backward (variants.linearized.Bidirectional)."""

from __future__ import annotations

import pytest
import torch

import variants
from suite.run.timing import peak_cpu


@pytest.mark.parametrize("n_k", [300, 170], ids=["self", "cross"])
@pytest.mark.parametrize("name", ["linear", "performer"])
def test_gradients_equal_autograd_through_the_quadratic_form(name, n_k):
    """Against the dense form φ(Q)φ(K)ᵀ (same feature map) at B = 2, H = 3, d = 16, float64: about
    six chunks of rows, a performer key scale per chunk, keys of another length."""
    spec = variants.get(name)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 300, 16, generator=gen, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 3, n_k, 16, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
    upstream = torch.randn(2, 3, 300, 16, generator=gen, dtype=torch.float64)
    grads = {impl: torch.autograd.grad(spec.attention(q, k, v, impl=impl, causal=False), (q, k, v), upstream)
             for impl in ("native", "dense")}
    for x, a, b in zip("qkv", grads["native"], grads["dense"]):
        assert (a - b).abs().max().item() < 1e-12, f"{name}: d{x}"


@pytest.mark.parametrize("n", [1024, 4096])
@pytest.mark.parametrize("name", ["linear", "performer", "rfa"])
def test_fwd_bwd_holds_a_few_outputs(name, n):
    """The timed fwd_bwd call above its inputs (H = 8, d = 64; m = 64, 256, 256): the output and the
    gradients of q, k, v (4 outputs), a chunk (half an output), S and its gradient (2·m/n outputs)
    and 0.1 for the per-row tensors. Autograd through the chunks kept every chunk's features: linear
    7.1, performer 19.1 outputs at n = 2048."""
    spec = variants.get(name)
    q, k, v = (torch.randn(1, 8, n, 64, requires_grad=True) for _ in range(3))
    call = spec.prepare(q, k, v, impl="native", causal=False)
    grad = torch.ones_like(call())
    run = lambda: torch.autograd.grad(call(), (q, k, v), grad)  # noqa: E731
    run()
    held = peak_cpu(run) / (q.numel() * 4)
    m = {"linear": 64, "performer": 256, "rfa": 2 * 128}[name]  # rfa: sin and cos of its 128 frequencies
    assert held <= 4.6 + 2 * m / n, f"{name}/native fwd_bwd held {held:.2f} outputs at n = {n}"
