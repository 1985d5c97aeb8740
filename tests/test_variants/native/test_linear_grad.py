"""Linearized attention's own backward (variants.native.linearized.grad): exact, and in a few outputs."""

from __future__ import annotations

import pytest
import torch

import variants
from suite.machine.timing import peak_cpu
from variants.native.linearized import FeatureMap

pytestmark = pytest.mark.slow  # the linearized backward against autograd, per feature map


@pytest.mark.parametrize("causal, n_k", [(False, 300), (False, 170), (True, 300)], ids=["self", "cross", "causal"])
@pytest.mark.parametrize("name", ["linear", "performer", "rfa"])
def test_gradients_equal_autograd_through_the_quadratic_form(name, causal, n_k):
    """Against the dense form φ(Q)φ(K)ᵀ (same feature map) at B = 2, H = 3, d = 16, float64: several
    chunks of rows, a performer key scale per chunk, keys of another length; causal: the prefix and
    suffix passes across chunks and the masked form within one."""
    spec = variants.get(name)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 300, 16, generator=gen, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 3, n_k, 16, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
    upstream = torch.randn(2, 3, 300, 16, generator=gen, dtype=torch.float64)
    grads = {
        impl: torch.autograd.grad(spec.attention(q, k, v, impl=impl, causal=causal), (q, k, v), upstream)
        for impl in ("native", "dense")
    }
    for x, a, b in zip("qkv", grads["native"], grads["dense"]):
        assert (a - b).abs().max().item() < 1e-10 * max(1.0, b.abs().max().item()), f"{name}: d{x}"


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("n", [1024, 4096])
@pytest.mark.parametrize("name", ["linear", "performer", "rfa"])
def test_fwd_bwd_holds_a_few_outputs(name, n, causal):
    """The timed fwd_bwd call above its inputs (H = 8, d = 64; m = 64, 256, 256): the output and the
    gradients of q, k, v (4 outputs), a chunk (half an output), S and its gradient (2·m/n outputs)
    and 0.1 for the per-row tensors. Autograd through the chunks kept every chunk's features: linear
    7.1, performer 19.1 outputs at n = 2048; causal: linear 11.0, performer 32.8, rfa 30.8 at 1024."""
    spec = variants.get(name)
    q, k, v = (torch.randn(1, 8, n, 64, requires_grad=True) for _ in range(3))
    call = spec.prepare(q, k, v, impl="native", causal=causal)
    grad = torch.ones_like(call())
    run = lambda: torch.autograd.grad(call(), (q, k, v), grad)  # noqa: E731
    run()
    held = peak_cpu(run) / (q.numel() * 4)
    m = {"linear": 64, "performer": 256, "rfa": 2 * 128}[name]  # rfa: sin and cos of its 128 frequencies
    assert held <= 4.6 + 2 * m / n, f"{name}/native fwd_bwd held {held:.2f} outputs at n = {n}, causal={causal}"


@pytest.mark.parametrize("n", [300, 40])
def test_gated_rfa_gradients_equal_autograd_through_the_quadratic_form(n):
    """rfa with gate = 1 (causal) against the dense gated form (variants.native.linearized.gated_quadratic),
    float64, B = 2, H = 3, d = 16: the prefix pass, the suffix sums decayed backwards across
    chunks (n = 300: chunks of 128 rows), and the gate's own gradient into k."""
    spec = variants.get("rfa")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 16, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    upstream = torch.randn(2, 3, n, 16, generator=gen, dtype=torch.float64)
    grads = {
        impl: torch.autograd.grad(spec.attention(q, k, v, impl=impl, causal=True, gate=1), (q, k, v), upstream)
        for impl in ("native", "dense")
    }
    for x, a, b in zip("qkv", grads["native"], grads["dense"]):
        assert (a - b).abs().max().item() < 1e-10 * max(1.0, b.abs().max().item()), f"d{x}"


@pytest.mark.parametrize("n", [512, 2048])
def test_gated_rfa_fwd_bwd_holds_a_few_outputs(n):
    """As above, for the gated recurrence's own backward (variants.native.linearized.gated_grad): the output and three
    gradients, a chunk, and S or the suffix sums P (2m/n outputs each). Autograd through its chunks
    held 40.2 outputs at n = 512, 31.8 at 2048."""
    spec = variants.get("rfa")
    q, k, v = (torch.randn(1, 8, n, 64, requires_grad=True) for _ in range(3))
    call = spec.prepare(q, k, v, impl="native", causal=True, gate=1)
    grad = torch.ones_like(call())
    run = lambda: torch.autograd.grad(call(), (q, k, v), grad)  # noqa: E731
    run()
    held = peak_cpu(run) / (q.numel() * 4)
    assert held <= 4.6 + 2 * 256 / n, f"gated rfa/native fwd_bwd held {held:.2f} outputs at n = {n}"


@pytest.mark.parametrize("n", [512, 2048])
def test_gated_rfa_forward_holds_two_outputs_and_its_state(n):
    """The gated forward carries its state in place (variants.native.linearized.gated_grad.carried): a fresh state
    beside the old held 3.47 outputs at n = 512. Bound: 2 outputs and S (2m/n of one)."""
    spec = variants.get("rfa")
    q, k, v = (torch.randn(1, 8, n, 64) for _ in range(3))
    call = spec.prepare(q, k, v, impl="native", causal=True, gate=1)
    call()
    held = peak_cpu(call) / (q.numel() * 4)
    assert held <= 2 + 256 / n, f"gated rfa/native forward held {held:.2f} outputs at n = {n}"


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", ["linear", "performer", "rfa"])
def test_the_maps_closed_form_gradient_equals_autograds_record_at_the_sweeps_shape(name, causal, monkeypatch):
    """The backward's closed-form map gradients (FeatureMap.vjp: elu+1's min(φ, 1), FAVOR+'s and
    the Fourier map's chain rule) against autograd's record of the same maps (vjp = None, the
    readable form), at the full grid's fwd_bwd shape: float32, H = 8, n = 4096, d = 64, every chunk
    the timed call takes."""
    spec = variants.get(name)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 8, 4096, 64, generator=gen, requires_grad=True) for _ in range(3))
    upstream = torch.randn(1, 8, 4096, 64, generator=gen)
    fast = torch.autograd.grad(spec.attention(q, k, v, impl="native", causal=causal), (q, k, v), upstream)
    for cls in FeatureMap.__subclasses__():  # elu+1, FAVOR+, Fourier
        assert cls.vjp is not None, cls.__name__
        monkeypatch.setattr(cls, "vjp", None)
    slow = torch.autograd.grad(spec.attention(q, k, v, impl="native", causal=causal), (q, k, v), upstream)
    for x, a, b in zip("qkv", fast, slow):
        assert (a - b).abs().max().item() < 2e-4 * b.abs().max().item(), f"{name}: d{x}"


@pytest.mark.parametrize("name, m", [("linear", 64), ("performer", 256), ("rfa", 256)])
def test_a_causal_chunk_does_no_more_masked_work_than_its_share_of_the_algorithms(name, m, monkeypatch):
    """At the sweep's shape (H = 8, d = 64, n = 4096, CPU), the forward's chunk of C rows does its
    masked products, 2·C²·(m + d) FLOPs that the useful count leaves out, in at most the algorithm's
    4·C·m·d for those rows; linear's chunks of 256 rows did 4x that (and took 1.23-1.45x as long)."""
    from variants.native.linearized import forward as lin

    steps = []
    real = lin.causal_chunks
    monkeypatch.setattr(lin, "causal_chunks", lambda phi, q, k, v, step: steps.append(step) or real(phi, q, k, v, step))
    spec = variants.get(name)
    q, k, v = (torch.randn(1, 8, 4096, 64) for _ in range(3))
    spec.prepare(q, k, v, impl="native", causal=True).fn()
    (step,) = steps
    assert 32 <= step and 2 * step * step * (m + 64) <= 4 * step * m * 64, f"{name}: chunks of {step} rows"
