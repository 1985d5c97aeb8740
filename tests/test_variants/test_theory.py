"""theory() follows docs/CLAIMS.md: pairs counted from mask() equal the formula, FLOPs are 4·B·H·P·d."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import patterns, theory
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import variants


@pytest.mark.parametrize("name", patterns())
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq_len", [1, 2, 63, 200])
def test_pairs_per_row_equal_mask(name, causal, seq_len):
    spec = variants.get(name)
    mask = spec.mask(seq_len, causal=causal)
    assert mask.shape == (seq_len, seq_len) and mask.dtype.is_floating_point is False
    assert mask.diagonal().all(), "docs/CLAIMS.md: the diagonal is always allowed"
    assert (mask.sum(dim=1) == spec.row_counts(seq_len, causal=causal)).all()
    assert theory(spec, seq_len=seq_len, causal=causal).pairs == int(mask.sum())
    if causal:
        assert not mask.triu(1).any(), "causal requires j <= i"


@pytest.mark.parametrize("name", patterns())
def test_pairs_property_over_parameters(name):
    spec = variants.get(name)

    @settings(max_examples=40, deadline=None)
    @given(st.integers(1, 120), st.booleans(), st.data())
    def check(seq_len, causal, data):
        params = {}
        for p in spec.params:
            if p.default is None and p.derive is None:
                continue
            upper = p.maximum(seq_len) if p.maximum is not None else seq_len + 3
            params[p.name] = data.draw(st.integers(int(p.minimum), max(int(p.minimum), upper)))
        try:
            spec.resolve(seq_len, params)
        except ValueError:
            assume(False)
        mask = spec.mask(seq_len, causal=causal, **params)
        assert (mask.sum(dim=1) == spec.row_counts(seq_len, causal=causal, **params)).all()

    check()


@pytest.mark.parametrize("name", patterns())
def test_flops_are_four_b_h_p_d(name):
    spec = variants.get(name)
    kv = 1 if spec.kv_heads == "one" else (2 if spec.kv_heads == "divides" else 4)
    t = spec.theory(seq_len=300, batch=3, num_heads=4, num_kv_heads=kv, head_dim=16)
    assert t.flops == 4 * 3 * 4 * t.pairs * 16
    assert t.extra_flops["softmax"] > 0  # a separate named term, not inside `flops`
    assert t.kv_bytes == 2 * 3 * kv * 300 * 16 * 4


# Interior approximations from docs/CLAIMS.md, checked at large n where edge effects are small.
APPROX = {
    "full": lambda n: n * n,
    "sliding_window": lambda n: n * (2 * 128 + 1),
    "neighborhood": lambda n: n * 257,
    "global": lambda n: 2 * n * 16 - 16**2 + n,
    "random": lambda n: n * (32 + 1),
    "strided": lambda n: n * (2 * math.ceil(math.sqrt(n)) + n / math.ceil(math.sqrt(n))),
    "fixed": lambda n: n * (math.ceil(math.sqrt(n)) + n / math.ceil(math.sqrt(n))),
}


@pytest.mark.parametrize("name", sorted(APPROX))
def test_pairs_match_claims_approximation(name):
    n = 16384
    pairs = theory(variants.get(name), seq_len=n).pairs
    assert abs(pairs / APPROX[name](n) - 1) < 0.03, (pairs, APPROX[name](n))


def test_claimed_exponents():
    expect = {
        "full": 2,
        "sliding_window": 1,
        "global": 1,
        "random": 1,
        "strided": 1.5,
        "fixed": 1.5,
        "bigbird": 1,
        "linear": 1,
        "performer": 1,
        "mqa": 2,
        "gqa": 2,
        "mha_fused": 2,
        "mha_per_head": 2,
        "additive": 2,
        "multiplicative": 2,
        "reformer": 1,
        "rfa": 1,
        "linformer": 1,
        "rnn": 1,
        "conv": 1,
        "neighborhood": 1,
    }
    got = {
        n: variants.get(n).theory(seq_len=1024, num_kv_heads=None if n != "gqa" else 2).claimed_exponent_n
        for n in variants.names()
    }
    assert got == expect
    # Holding the block or stride constant makes the pattern quadratic (docs/CLAIMS.md).
    assert variants.get("fixed").theory(seq_len=1024, block=32).claimed_exponent_n == 2
    assert variants.get("strided").theory(seq_len=1024, stride=32).claimed_exponent_n == 2
    assert variants.get("linear").theory(seq_len=1024).claimed_exponent_d == 2
    assert variants.get("performer").theory(seq_len=1024).claimed_exponent_d == 1


def counted(name: str, impl: str, *, seq_len: int, heads: int = 2, head_dim: int = 8, **params) -> int:
    """FlopCounterMode's matmul FLOPs of one forward call (float64, CPU)."""
    from torch.utils.flop_counter import FlopCounterMode

    spec = variants.get(name)
    q, k, v = (torch.randn(1, heads, seq_len, head_dim, dtype=torch.float64) for _ in range(3))
    prepared = spec.prepare(q, k, v, impl=impl, **params)
    with FlopCounterMode(display=False) as counter:
        prepared()
    return counter.get_total_flops()


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_recurrent_flops_are_the_counted_products(cell):
    t = variants.get("rnn").theory(seq_len=50, num_heads=2, head_dim=8, cell=cell)
    assert t.flops == counted("rnn", "dense", seq_len=50, cell=cell)  # input and hidden products
    assert t.claimed_exponent_n == 1 and t.claimed_exponent_d == 2


@pytest.mark.parametrize("separable", [0, 1])
def test_convolution_flops_are_the_counted_products(separable):
    t = variants.get("conv").theory(seq_len=64, num_heads=2, head_dim=8, kernel=5, separable=separable)
    assert t.total_flops == counted("conv", "dense", seq_len=64, kernel=5, separable=separable)
    assert t.flops == 2 * 64 * 5 * 16 * (1 if separable else 16)


def test_linformer_and_reformer_flops_follow_their_shapes():
    t = variants.get("linformer").theory(seq_len=1000, batch=2, num_heads=3, head_dim=16, proj_len=64)
    assert t.flops == 4 * 2 * 3 * 1000 * 64 * 16 and t.pairs == 1000 * 64
    assert (
        t.total_flops - t.extra_flops["softmax"]
        == counted("linformer", "dense", seq_len=1000, heads=3, head_dim=16, proj_len=64) * 2
    )
    r = variants.get("reformer").theory(seq_len=4096, rounds=3, chunk=32)
    assert r.pairs == 3 * 4096 * 64  # a chunk and the one before
    assert variants.get("reformer").theory(seq_len=40, chunk=64).pairs == 4 * 40 * 40  # one chunk: all keys


def test_linear_flops_formulas():
    assert (
        variants.get("linear").theory(seq_len=1000, batch=2, num_heads=3, head_dim=16).flops
        == 4 * 2 * 3 * 1000 * 16 * 16
    )
    t = variants.get("performer").theory(seq_len=1000, batch=2, num_heads=3, head_dim=16, features=64)
    assert t.flops == 4 * 2 * 3 * 1000 * 64 * 16 and t.extra_flops["feature_map"] > 0


def test_mqa_gqa_kv_bytes_between_mqa_and_mha():
    mha = variants.get("full").theory(seq_len=2048, num_heads=8).kv_bytes
    gqa = variants.get("gqa").theory(seq_len=2048, num_heads=8, num_kv_heads=2).kv_bytes
    mqa = variants.get("mqa").theory(seq_len=2048, num_heads=8).kv_bytes
    assert mqa * 8 == mha and mqa < gqa < mha
    assert variants.get("mqa").theory(seq_len=2048).flops == variants.get("full").theory(seq_len=2048).flops


def test_fused_and_per_head_claim_the_same_flops():
    a = variants.get("mha_fused").theory(seq_len=512)
    b = variants.get("mha_per_head").theory(seq_len=512)
    assert a.total_flops == b.total_flops


def test_random_draw_is_deterministic_and_distinct():
    from variants.native.keys import random_keys

    a, b = random_keys(500, 32, seed=3), random_keys(500, 32, seed=3)
    assert (a == b).all() and not (a == random_keys(500, 32, seed=4)).all()
    assert all(len(set(row.tolist())) == 32 for row in a)  # without replacement
    assert a.min() >= 0 and a.max() < 500
    # uniform: every key is drawn about 32 times over 500 rows
    counts = a.flatten().bincount(minlength=500).double()
    assert abs(counts.mean().item() - 32) < 1e-9 and counts.std().item() < 12
