"""Claims specific to some families: GQA against torch's reference, Performer's error, classic forms."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import inputs

import variants


@pytest.mark.parametrize("name,kv_heads", [("mqa", 1), ("gqa", 2), ("gqa", 3)])
@pytest.mark.parametrize("impl", ["dense", "sdpa", "native"])
@pytest.mark.parametrize("causal", [False, True])
def test_shared_kv_equals_sdpa_enable_gqa(name, kv_heads, impl, causal):
    spec = variants.get(name)
    q, k, v = inputs(spec, heads=6, kv_heads=kv_heads, seq_len=45)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    assert (spec.attention(q, k, v, impl=impl, causal=causal) - ref).abs().max() < 1e-10


DECODE = [
    (n, i)
    for n in variants.names()
    if variants.get(n).decode
    for i in variants.get(n).impls
    if i not in ("flex", "xformers") and not variants.get(n).reasons(i, decode=True, dtype=torch.float64)
]


@pytest.mark.parametrize("name,impl", DECODE)
@pytest.mark.parametrize("seq_len", [50, 301])
def test_decode_one_query_against_a_cache(name, impl, seq_len):
    """A decode step is the last row of the forward, causal or not (no key lies after the last position)."""
    spec = variants.get(name)
    q, k, v = inputs(spec, heads=4, seq_len=seq_len)
    for causal in (False, True):
        ref = spec.attention(q, k, v, impl="dense", causal=causal)[:, :, -1:]
        assert (spec.attention(q[:, :, -1:], k, v, impl=impl) - ref).abs().max() < 1e-10
    if spec.kv_heads != "equal":
        assert (
            spec.attention(q[:, :, -1:], k, v, impl=impl)
            - F.scaled_dot_product_attention(q[:, :, -1:], k, v, enable_gqa=True)
        ).abs().max() < 1e-10


def test_a_peer_layer_has_no_decode_step():
    assert variants.get("sliding_window").reasons("local-attention", decode=True) == [
        "mode=decode: sliding_window/local-attention has no decode step"
    ]


@pytest.mark.slow  # many feature counts drawn: the full suite runs it, the fast lane not
def test_performer_error_shrinks_as_features_grow():
    full, performer = variants.get("full"), variants.get("performer")
    q, k, v = (x * 0.5 for x in inputs(full, batch=1, heads=4, seq_len=256, head_dim=16))
    exact = full.attention(q, k, v, impl="sdpa")

    def rms_error(m):  # averaged over seeds: the error is random
        errs = [
            (performer.attention(q, k, v, impl="native", features=m, seed=s) - exact).pow(2).mean().sqrt()
            for s in range(4)
        ]
        return torch.stack(errs).mean().item()

    errors = [rms_error(m) for m in (16, 64, 256, 1024)]
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    # about 1/sqrt(m): 64× more features, at least 3× less error (8× in theory)
    assert errors[0] / errors[-1] > 3, errors


def test_performer_projection_rows_are_orthogonal_within_a_block():
    from variants.catalog.performer import projection

    omega = projection(16, 40, seed=1)
    block = omega[:16] / omega[:16].norm(dim=1, keepdim=True)
    assert torch.allclose(block @ block.T, torch.eye(16, dtype=torch.float64), atol=1e-10)


def test_fused_and_per_head_mha_compute_the_same_function():
    q, k, v = inputs(variants.get("mha_fused"), heads=4, seq_len=33, head_dim=8)
    for causal in (False, True):
        a = variants.get("mha_fused").attention(q, k, v, impl="native", causal=causal, seed=5)
        b = variants.get("mha_per_head").attention(q, k, v, impl="native", causal=causal, seed=5)
        assert (a - b).abs().max() < 1e-12
        c = variants.get("mha_fused").attention(q, k, v, impl="native", causal=causal, seed=6)
        assert (a - c).abs().max() > 1e-3  # the seed matters


def test_additive_chunks_equal_the_broadcast_form():
    from variants.impls import additive

    q, k, v = inputs(variants.get("additive"), seq_len=41)
    for causal in (False, True):
        whole = additive(q, k, v, causal, attn_dim=7, seed=0)
        chunked = additive(q, k, v, causal, attn_dim=7, seed=0, chunk=6)
        assert (whole - chunked).abs().max() < 1e-12


def test_classic_modules_are_usable_as_modules():
    from variants.impls import FusedMHA, PerHeadMHA

    x = torch.randn(2, 10, 32)
    fused, per_head = FusedMHA(32, 4, seed=1), PerHeadMHA(32, 4, seed=1)
    assert torch.allclose(fused(x, x, x), per_head(x, x, x), atol=1e-5)
    assert sum(p.numel() for p in fused.parameters()) == sum(p.numel() for p in per_head.parameters())
