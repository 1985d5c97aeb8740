"""The public API: names, lookup, validation before any work, capability reasons."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from helpers import inputs

import variants

REQUIRED = [
    "full",
    "sliding_window",
    "global",
    "random",
    "strided",
    "fixed",
    "bigbird",
    "linear",
    "performer",
    "mqa",
    "gqa",
    "mha_fused",
    "mha_per_head",
    "additive",
    "multiplicative",
    "reformer",
    "linformer",
    "rfa",
    "rnn",
    "conv",
    "neighborhood",
]


def test_every_required_variant_is_registered():
    assert set(REQUIRED) <= set(variants.names())


def test_unknown_variant_lists_known_names():
    with pytest.raises(ValueError, match="unknown variant 'nope'.*sliding_window"):
        variants.get("nope")


def test_duplicate_registration_is_rejected():
    with pytest.raises(ValueError, match="already registered"):
        variants.register(variants.get("full"))


def test_every_variant_declares_claim_source_and_impls():
    for name in variants.names():
        spec = variants.get(name)
        assert spec.summary and spec.source and spec.impls
        assert spec.theory(seq_len=256, num_kv_heads=2 if spec.kv_heads == "divides" else None).flops > 0
        for impl in spec.impls.values():
            assert impl.cost, f"{name}/{impl.name} must state its own cost"
        sub_quadratic = (
            spec.theory(seq_len=256, num_kv_heads=2 if spec.kv_heads == "divides" else None).claimed_exponent_n < 2
        )
        if sub_quadratic:
            assert "native" in spec.impls, f"{name}: a sub-quadratic claim needs an impl that realizes it"


def test_every_variant_declares_its_memory_claim_with_its_source():
    """Memory is a claim too (docs/CLAIMS.md, "Memory: what a call keeps"): forward and training, from a paper, and
    carried by the theory of each mode into the results' columns; a decode step claims none."""
    for name in variants.names():
        spec = variants.get(name)
        assert spec.memory is not None and spec.memory.source, f"{name} must declare its memory claim and its source"
        kv = 2 if spec.kv_heads == "divides" else None
        for mode in ("fwd", "fwd_bwd"):
            claimed = spec.theory(seq_len=256, num_kv_heads=kv, mode=mode).claimed_memory_exponent_n
            assert claimed is not None and 1 <= claimed <= 2, (name, mode, claimed)
        if spec.decode:
            assert spec.theory(seq_len=256, num_kv_heads=kv, mode="decode").claimed_memory_exponent_n is None
    assert variants.get("full").theory(seq_len=256).claimed_memory_exponent_n == 1.0  # FlashAttention's O(n)
    assert variants.get("strided").theory(seq_len=256, stride=4).claimed_memory_exponent_n == 2.0  # its pairs, l fixed


@pytest.mark.parametrize(
    "params,match",
    [
        ({"widnow": 3}, "unknown parameter 'widnow' \\(allowed: window\\)"),
        ({"window": -1}, "window=-1 out of range \\(allowed: >= 0\\)"),
        ({"window": 2.5}, "window=2.5 must be int"),
        ({"window": "8"}, "window='8' must be int"),
    ],
)
def test_bad_parameters_name_field_value_and_range(params, match):
    spec = variants.get("sliding_window")
    q, k, v = inputs(spec, seq_len=16)
    with pytest.raises(ValueError, match=match):
        spec.attention(q, k, v, impl="native", **params)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_float_parameter_must_be_finite(value):
    """A NaN passes every comparison with a range (sigma >= 0 is False, and so is sigma < 0)."""
    spec = variants.get("rfa")
    with pytest.raises(ValueError, match=f"sigma={value!r} must be a finite number"):
        spec.resolve(16, {"sigma": value})


def test_parameter_limits_that_depend_on_n_or_other_parameters():
    with pytest.raises(ValueError, match="tokens=40 out of range \\(allowed: 0..32 for n=32\\)"):
        variants.get("global").mask(32, tokens=40)
    with pytest.raises(ValueError, match="summary=9 out of range \\(allowed: 0..block=8\\)"):
        variants.get("fixed").mask(64, block=8, summary=9)
    with pytest.raises(ValueError, match="seq_len=0 must be a positive int"):
        variants.get("full").theory(seq_len=0)
    # a default is "at most": 16 global tokens, or n if fewer
    assert variants.get("global").resolve(8, {}) == {"tokens": 8}


@pytest.mark.parametrize(
    "shapes,match",
    [
        (((2, 4, 16, 8), (2, 4, 16, 8), (2, 4, 16, 8), (16, 8)), "k.shape=\\(16, 8\\)"),
        (((2, 4, 16, 8), (2, 4, 16, 4), (2, 4, 16, 4), None), "k.shape\\[3\\]=4 \\(allowed: the head_dim of q, 8\\)"),
        (((2, 4, 16, 8), (2, 2, 16, 8), (2, 2, 16, 8), None), "k.shape\\[1\\]=2 \\(allowed: num_heads of q, 4"),
        (((2, 4, 16, 8), (2, 4, 12, 8), (2, 4, 12, 8), None), "q seq_len=16, k seq_len=12"),
        (((2, 4, 16, 8), (1, 4, 16, 8), (1, 4, 16, 8), None), "k.shape\\[0\\]=1"),
    ],
)
def test_bad_shapes_name_argument_value_and_allowed(shapes, match):
    spec = variants.get("sliding_window")
    q, k, v = (torch.randn(s) for s in shapes[:3])
    if shapes[3] is not None:
        k = torch.randn(shapes[3])
    with pytest.raises(ValueError, match=match):
        spec.attention(q, k, v, impl="native")


def test_shared_kv_head_rules():
    q = torch.randn(1, 6, 8, 4)
    kv4 = torch.randn(1, 4, 8, 4)
    with pytest.raises(ValueError, match="k.shape\\[1\\]=4 \\(allowed: a divisor of num_heads=6\\)"):
        variants.get("gqa").attention(q, kv4, kv4, impl="native")
    with pytest.raises(ValueError, match="k.shape\\[1\\]=4 \\(allowed: 1"):
        variants.get("mqa").attention(q, kv4, kv4, impl="native")
    kv2 = torch.randn(1, 2, 8, 4)
    with pytest.raises(ValueError, match="groups=3 \\(allowed: k.shape\\[1\\]=2\\)"):
        variants.get("gqa").attention(q, kv2, kv2, impl="native", groups=3)


def test_unknown_impl_lists_available():
    spec = variants.get("linear")
    q, k, v = inputs(spec, seq_len=8)
    with pytest.raises(ValueError, match="unknown impl 'sdpa' \\(available: dense, native, triton, fla-core\\)"):
        spec.attention(q, k, v, impl="sdpa")


def test_capability_reasons_are_human_readable():
    spec = variants.get("sliding_window")
    assert spec.reasons("native") == []
    assert spec.reasons("flex", dtype=torch.float64) == ["dtype=float64 (supported: float16, bfloat16, float32)"]
    if not torch.cuda.is_available():
        assert spec.reasons("native", device="cuda") == [
            "device=cuda: torch.cuda.is_available() is False on this machine"
        ]
        reasons = spec.reasons("xformers", device="cpu")
        assert reasons and all(r.startswith("xformers") for r in reasons), reasons
        assert any("device=cpu" in r for r in reasons), "xformers' own reason names the device"


def test_running_an_unsupported_impl_raises_with_the_reason():
    spec = variants.get("sliding_window")
    q, k, v = inputs(spec, seq_len=8)
    with pytest.raises(RuntimeError, match="sliding_window/flex cannot run here: dtype=float64"):
        spec.attention(q, k, v, impl="flex")


def test_mask_shows_itself():
    from variants.rules import show

    picture = show(variants.get("sliding_window").mask(8, window=1))
    assert picture.splitlines()[0] == "██······" and picture.splitlines()[4] == "···███··"


@pytest.mark.slow
def test_cli_list_shows_every_variant_and_impl_with_status():
    out = subprocess.run(
        [sys.executable, "-m", "suite", "list", "--device", "cpu"], capture_output=True, text=True, check=True
    ).stdout
    for name in variants.names():
        assert f"{name}  [" in out
    assert "native" in out and "available" in out
    assert "unavailable: xformers" in out or torch.cuda.is_available()


@pytest.mark.slow
def test_cli_rejects_unknown_variant_with_exit_2():
    res = subprocess.run([sys.executable, "-m", "suite", "list", "--variant", "nope"], capture_output=True, text=True)
    assert res.returncode == 2 and "unknown variant 'nope'" in res.stderr
