"""Library implementations (the `peers` extra): equal to the reference where the definitions
coincide, different where `suite list` says they differ, and reported unavailable when missing."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from helpers import inputs, peer_impls

import variants
from suite.plan.case import Case
from suite.run.measurement import check
from variants.rules import against_reference

PEERS = peer_impls()


def test_every_peer_is_named_after_its_package_and_says_how_it_differs():
    assert {impl for _, impl in PEERS} >= {"local-attention", "performer-pytorch", "reformer-pytorch", "linformer"}
    for name, impl in PEERS:
        i = variants.get(name).impls[impl]
        assert i.library == impl and len(i.differs.note) > 40


@pytest.mark.parametrize("name,impl", PEERS)
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("seq_len", [97, 301])
def test_peer_equals_reference_where_definitions_coincide(name, impl, causal, seq_len):
    spec = variants.get(name)
    if causal and not spec.impls[impl].supports_causal:
        pytest.skip(f"{name}/{impl} is non-causal only")
    at = spec.impls[impl].differs.check_shape(seq_len, spec.resolve(seq_len, {}))[0]  # where it is checked
    why = spec.reasons(impl, {}, seq_len=at, causal=causal, dtype=torch.float32)
    if why:
        pytest.skip("; ".join(why))
    dtype = torch.float64 if torch.float64 in spec.impls[impl].dtypes else torch.float32  # natten: no float64
    make = lambda n: inputs(spec, batch=1, heads=2, seq_len=n, head_dim=16, dtype=dtype)  # noqa: E731
    err, floor = against_reference(spec, impl, make, seq_len, {}, causal)
    assert err <= max(1e-8 if dtype == torch.float64 else 1e-5, floor), f"{name}/{impl} causal={causal}: {err:.3g}"


def _diff(spec, impl, q, k, v, **params):
    out = spec.attention(q, k, v, impl=impl, **params)
    return (out - spec.attention(q, k, v, impl="dense", **params)).abs().max().item()


def test_the_stated_differences_are_real():
    """Each note's claim, measured: outside the coinciding setting the outputs part."""
    window = variants.get("sliding_window")
    q, k, v = inputs(window, batch=1, heads=2, seq_len=250, head_dim=16)
    assert _diff(window, "local-attention", q, k, v, window=16) > 1e-2  # 250 is no multiple of 16
    assert _diff(window, "local-attention", q[:, :, :240], k[:, :, :240], v[:, :, :240], window=16) < 1e-12
    performer = variants.get("performer")
    q, k, v = inputs(performer, batch=1, heads=2, seq_len=97, head_dim=64)
    assert _diff(performer, "performer-pytorch", q, k, v) > 0.1  # its epsilon, on unit-variance inputs
    reformer = variants.get("reformer")
    q, k, v = inputs(reformer, batch=1, heads=2, seq_len=512, head_dim=16)
    assert _diff(reformer, "reformer-pytorch", q, k, v, chunk=32, rounds=2) > 1e-3  # its own rotations


def test_natten_causal_window_is_not_this_patterns_causal_form():
    natten = pytest.importorskip("natten")
    spec = variants.get("neighborhood")
    q, k, v = inputs(spec, batch=1, heads=2, seq_len=64, head_dim=16, dtype=torch.float32)
    theirs = natten.na1d(*(t.transpose(1, 2) for t in (q, k, v)), kernel_size=9, is_causal=True).transpose(1, 2)
    ours = spec.attention(q.double(), k.double(), v.double(), impl="dense", causal=True, kernel=9)
    assert (theirs.double() - ours).abs().max() > 1e-2  # 9 keys up to i, against 5 (the window with j <= i)


def test_the_sweep_checks_a_peer_where_it_coincides():
    """The correctness check the sweep runs before timing reaches the peer (no `invalid` row)."""
    for name, impl in PEERS:
        if variants.get(name).reasons(impl, {}, seq_len=1024):
            continue  # not installed here (natten is outside the peers extra)
        case = Case(name, impl, "cpu", "float32", "fwd", 1, 1024, 2, 2, 32, False, ())
        err, tol = check.check(case, check_seq_len=97)
        assert err <= tol, f"{name}/{impl}: {err:.3g} > {tol}"


def test_a_missing_package_is_a_reason_not_an_import_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda mod, *a: None if mod in {"local_attention", "linformer"} else real(mod, *a)
    )
    why = variants.get("sliding_window").reasons("local-attention", seq_len=1024)
    assert why == ['package local-attention is not installed (pip install -e ".[peers]")']
    assert variants.get("linformer").reasons("linformer", seq_len=1024)
    assert not variants.get("performer").reasons("performer-pytorch", seq_len=1024)


def test_reformer_pytorch_states_its_length_rule():
    why = variants.get("reformer").reasons("reformer-pytorch", seq_len=97)
    assert why == ["seq_len=97 (reformer-pytorch needs a multiple of 2·chunk = 128)"]
