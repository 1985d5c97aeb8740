"""variants.native.core.expo: the exponential every native softmax and feature map takes."""

import torch

from variants.native.core import exp_


def test_exp_is_in_place_and_within_a_few_ulp_of_float64_where_softmax_weights_live():
    x = torch.linspace(-30.0, 10.0, 100_001)
    want, near = x.double().exp(), (x > -5) & (x <= 0)  # near: a softmax's largest terms, x - max near 0
    got = exp_(x)
    assert got.data_ptr() == x.data_ptr()
    rel = (got.double() - want).abs() / want
    assert rel.max() < 3e-6  # measured 1.8e-6 at |x| <= 30, growing with |x| (the rounded product)
    assert rel[near].max() < 5e-7  # measured 2.7e-7


def test_other_dtypes_take_torch_exp_unchanged():
    for dtype in (torch.bfloat16, torch.float64):
        x = torch.linspace(-8.0, 3.0, 1001, dtype=dtype)
        assert torch.equal(exp_(x.clone()), x.exp())


def test_linear_features_are_elu_plus_one_and_elu_itself_under_autograd():
    """Against float64: F.elu(x) + 1 itself cancels below about -8 (e^x − 1 + 1 in float32)."""
    from variants.catalog.linear import elu_plus_one

    x = torch.cat([torch.linspace(-12.0, 6.0, 10_001), torch.zeros(3)])
    torch.testing.assert_close(elu_plus_one(x).double(), torch.nn.functional.elu(x.double()) + 1, rtol=2e-6, atol=0)
    recorded = x.clone().requires_grad_()
    assert torch.equal(elu_plus_one(recorded), torch.nn.functional.elu(x) + 1)  # its fused backward
