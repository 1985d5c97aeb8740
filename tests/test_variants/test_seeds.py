"""The systems of the seeds (reformer, linformer, rfa, rnn, conv): properties their definitions
imply, checked apart from the dense reference they are also checked against; and the per-layer table."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from helpers import inputs

import variants
from suite import analyse


def test_reformer_with_one_chunk_is_shared_qk_attention_without_self():
    """Whatever the hashes, one chunk holding every position lets every query see every key."""
    spec = variants.get("reformer")
    q, k, v = inputs(spec, seq_len=50, head_dim=16)
    keys = torch.nn.functional.normalize(q, dim=-1)
    scores = (q @ keys.transpose(-1, -2) / 4).masked_fill(torch.eye(50, dtype=torch.bool), -5e4)
    want = scores.softmax(dim=-1) @ v
    for impl in ("dense", "native"):
        assert (spec.attention(q, k, v, impl=impl, chunk=64, rounds=3) - want).abs().max() < 1e-12
    assert (spec.attention(q, k, v, impl="native", chunk=8) - want).abs().max() > 1e-3  # chunks do bite


def test_reformer_ignores_k_and_depends_on_the_seed():
    spec = variants.get("reformer")
    q, k, v = inputs(spec, seq_len=300, head_dim=16)
    a = spec.attention(q, k, v, impl="native", chunk=16)
    assert torch.equal(a, spec.attention(q, torch.randn_like(k), v, impl="native", chunk=16))  # shared QK
    assert (a - spec.attention(q, k, v, impl="native", chunk=16, seed=1)).abs().max() > 1e-3


def test_gated_rfa_is_its_recurrence_step_by_step():
    from variants.catalog.rfa import fourier_features

    spec = variants.get("rfa")
    q, k, v = inputs(spec, batch=1, heads=2, seq_len=300, head_dim=8)
    phi = fourier_features({"features": 16, "sigma": 1.0, "seed": 0, "gate": 1}, q)
    log_g, _ = phi.log_gates(k)
    fq, fk = phi.query(q), phi.key(k)[0]
    state, z, outs = 0, 0, []
    for t in range(300):
        g = log_g[..., t].exp()[..., None, None]  # (B, H, 1, 1)
        state = g * state + (1 - g) * fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = g[..., 0] * z + (1 - g[..., 0]) * fk[:, :, t]
        outs.append((fq[:, :, t, None, :] @ state).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True))
    for impl in ("dense", "native"):
        out = spec.attention(q, k, v, impl=impl, causal=True, gate=1, features=16)
        assert (out - torch.stack(outs, 2)).abs().max() < 1e-10, impl
    with pytest.raises(RuntimeError, match="gate=1 with causal=False"):
        spec.attention(q, k, v, impl="native", gate=1)


@pytest.mark.parametrize("name,params", [("rnn", {"cell": "gru"}), ("rnn", {}), ("conv", {"kernel": 4})])
def test_layers_read_only_q_and_see_no_later_position_when_causal(name, params):
    spec = variants.get(name)
    q, k, v = inputs(spec, seq_len=40)
    out = spec.attention(q, k, v, impl="native", causal=True, **params)
    later = q.clone()
    later[:, :, 30:] += 1.0
    moved = spec.attention(later, torch.randn_like(k), v, impl="native", causal=True, **params)
    assert torch.equal(out[:, :, :30], moved[:, :, :30]) and (out[:, :, 30:] - moved[:, :, 30:]).abs().max() > 1e-3


def test_conv_reaches_its_kernel_and_no_further():
    spec = variants.get("conv")
    q, k, v = inputs(spec, seq_len=40)
    bumped = q.clone()
    bumped[:, :, 20] += 1.0
    diff = spec.attention(bumped, k, v, impl="native", kernel=5) - spec.attention(q, k, v, impl="native", kernel=5)
    touched = diff.abs().amax(dim=(0, 1, 3)) > 0
    assert touched.nonzero().flatten().tolist() == [18, 19, 20, 21, 22]  # same padding: i − 2 … i + 2


def test_rnn_choice_is_validated_by_name():
    with pytest.raises(ValueError, match=r"rnn: parameter cell='elman' \(allowed: 'rnn', 'gru', 'lstm'\)"):
        variants.get("rnn").resolve(64, {"cell": "elman"})


def _series(variant, impl, axis, values, exponent, scale, claimed_n, claimed_d):
    base = dict(
        variant=variant,
        impl=impl,
        device="cpu",
        dtype="float32",
        mode="fwd",
        batch=1,
        num_heads=8,
        num_kv_heads=8,
        head_dim=64,
        seq_len=1024,
        causal=False,
        params="{}",
        status="ok",
        reason="",
        claimed_exponent_n=claimed_n,
        claimed_exponent_d=claimed_d,
        flops_counted=None,
        peak_bytes=1e6,
    )
    if axis == "head_dim":
        base["seq_len"] = 333  # no length of the n sweep: the two sweeps share no point
    return [{**base, axis: x, "time_s": scale * x**exponent, "flops": 1e9 * x**exponent} for x in values]


def test_per_layer_table_reads_exponents_and_the_crossover_off_the_fits():
    n, d = [256, 512, 1024, 2048, 4096, 8192], [8, 16, 32, 128, 256]
    rows = (
        _series("full", "sdpa", "seq_len", n, 2, 1e-8, 2, 1)
        + _series("full", "sdpa", "head_dim", d, 1, 1e-5, 2, 1)
        + _series("rnn", "native", "seq_len", n, 1, 2e-5, 1, 2)  # equal at n = 2000
        + _series("rnn", "native", "head_dim", d, 2, 1e-7, 1, 2)
    )
    table = analyse.analyse(pd.DataFrame(rows)).layers.set_index("layer")
    assert list(table.index) == ["self-attention", "recurrent"]  # conv and the window were not swept
    assert table.loc["recurrent", "n_verdict"] == "confirmed" and abs(table.loc["recurrent", "d_slope"] - 2) < 1e-6
    assert table.loc["self-attention", "d_verdict"] == "confirmed"
    assert table.loc["recurrent", "crossover"].startswith("faster above n ≈ 2,000")


def test_neighborhood_is_the_sliding_window_inside_and_shifts_at_the_borders():
    hood, window = variants.get("neighborhood"), variants.get("sliding_window")
    q, k, v = inputs(hood, seq_len=100)
    a = hood.attention(q, k, v, impl="native", kernel=21)
    b = window.attention(q, k, v, impl="native", window=10)
    assert (a[:, :, 10:90] - b[:, :, 10:90]).abs().max() < 1e-12  # interior rows: the same 21 keys
    assert (a[:, :, :10] - b[:, :, :10]).abs().max() > 1e-3  # borders: 21 keys against 11..20
    assert hood.row_counts(100, kernel=21).tolist() == [21] * 100
