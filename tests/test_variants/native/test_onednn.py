"""A shared-weight product through oneDNN (variants.native.core.onednn): the float64 product rounded, whatever
the input's shape and strides, and the plain product wherever oneDNN does not apply."""

from __future__ import annotations

import pytest
import torch

from variants.native.core import onednn


@pytest.mark.parametrize("shape", [(1, 8, 97, 64), (2, 3, 1, 64), (256, 64), (1, 8, 64, 5, 64)])
def test_the_product_is_the_float64_products_rounding(shape):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(*shape, generator=gen), torch.randn(130, 64, generator=gen)
    assert onednn.onednn(x, w), "float32 on the CPU, nothing recorded: the oneDNN path is the one tested"
    got = onednn.linear(x, w)
    want = x.double() @ w.double().T
    assert got.shape == want.shape and got.dtype == torch.float32
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 1e-6
    strided = onednn.linear(x.transpose(-1, -2).contiguous().transpose(-1, -2), w)  # the same values, other strides
    assert torch.equal(strided, got)


def test_float64_bf16_and_a_recorded_input_take_the_plain_product():
    w = torch.randn(16, 8, dtype=torch.float64)
    assert not onednn.onednn(torch.randn(4, 8, dtype=torch.float64), w)
    assert not onednn.onednn(torch.randn(4, 8, dtype=torch.bfloat16), w.bfloat16())
    x = torch.randn(4, 8, requires_grad=True)
    assert not onednn.onednn(x, w.float())
    onednn.linear(x, w.float()).sum().backward()  # autograd goes through the plain product
    assert torch.allclose(x.grad, w.float().sum(0).expand(4, 8))
    with torch.no_grad():
        assert onednn.onednn(x, w.float())


def test_a_transposed_weight_is_the_same_product():
    """A backward's g·ω passes ω's transpose: read contiguous in the call, the same values."""
    gen = torch.Generator().manual_seed(1)
    g, omega = torch.randn(3, 50, 130, generator=gen), torch.randn(130, 64, generator=gen)
    got = onednn.linear(g, omega.T)
    want = g.double() @ omega.double()
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 1e-6
