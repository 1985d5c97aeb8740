"""The bidirectional linearized passes (variants.native.linearized.chunks): on the CPU in float32 the one that sums the
keys' [S, z]ᵀ (m ≥ SUM_FEATURES) and the one that applies it, one oneDNN product per head and chunk, in the chunks the
sweep times, against the float64 dense reference; elsewhere the batched products."""

from __future__ import annotations

import pytest
import torch
from helpers import inputs

import variants
from variants.native.linearized import chunks
from variants.rules import paths


@pytest.mark.slow  # a numerical check at the sweep's sizes: the full suite runs it, the fast lane not
@pytest.mark.parametrize("name", ["linear", "performer", "rfa"])
@pytest.mark.parametrize("batch, n", [(1, 2048), (2, 1500)])
def test_each_heads_product_through_onednn_equals_the_reference(name, batch, n, monkeypatch):
    """H = 8, d = 64 as the grids sweep; n = 2048 is several chunks of rows, n = 1500 a short last one."""
    spec = variants.get(name)
    q, k, v = inputs(spec, batch=batch, heads=8, head_dim=64, seq_len=n)
    calls, sums = [], []
    apply, keys = chunks._apply_onednn, chunks._keys_onednn
    monkeypatch.setattr(
        chunks, "_apply_onednn", lambda fq, weight, out: calls.append(fq.shape[2]) or apply(fq, weight, out)
    )
    monkeypatch.setattr(chunks, "_keys_onednn", lambda phi, k, v, rows: sums.append(rows) or keys(phi, k, v, rows))
    paths.clear()
    got = spec.attention(q.float(), k.float(), v.float(), impl="native")
    assert len(calls) >= 2 and sum(calls) == n, f"the oneDNN pass is the one tested, in chunks: {calls}"
    # the first pass too from SUM_FEATURES features (performer's and rfa's 256), in several chunks
    assert (not sums) if name == "linear" else (len(sums) == 1 and sums[0] < n), sums
    mapped = {"linear": "elu+1 ", "rfa": "sin and cos "}.get(name)  # a fused map's form first (test_compiled.py)
    taken = paths.taken().split(" + ", 1) if mapped else ["", paths.taken()]
    assert (
        taken[0].startswith(mapped or "")
        and taken[1] == f"sums {'batched' if name == 'linear' else 'onednn'} + apply onednn"
    )
    ref = spec.attention(q, k, v, impl="dense")
    err = (got.double() - ref).abs().max().item() / ref.abs().max().item()
    assert err <= 1e-5, f"{name}: relative max |diff| = {err:.3g}"


def test_float64_and_a_weight_over_a_quarter_of_the_output_keep_the_batched_product(monkeypatch):
    """The float64 reference checks never take oneDNN's float32 product, nor does a call whose [S, z]ᵀ would be
    over a quarter of its output (performer's 256 features at n = 256): a temporary a chunk may not hold."""
    monkeypatch.setattr(chunks, "_apply_onednn", lambda *args: pytest.fail("oneDNN taken"))
    spec = variants.get("linear")
    spec.attention(*inputs(spec, batch=1, heads=2, head_dim=16, seq_len=600), impl="native")
    spec = variants.get("performer")
    paths.clear()
    spec.attention(*inputs(spec, batch=1, heads=8, head_dim=64, seq_len=256, dtype=torch.float32), impl="native")
    assert paths.taken() == "sums batched + apply batched"  # as the sweep records it, for the cost model


@pytest.mark.slow  # a numerical check at the sweep's sizes: the full suite runs it, the fast lane not
@pytest.mark.parametrize("name", ["linear", "performer"])
def test_a_recorded_forward_through_onednn_gives_the_gradients_of_the_reference(name):
    """The forward of the fwd_bwd sweep (autograd's Function, which runs without recording) takes oneDNN too; its
    state and normalizer are the backward's: float32 gradients over several chunks against float64 dense ones."""
    spec = variants.get(name)
    q, k, v = inputs(spec, batch=1, heads=8, head_dim=64, seq_len=1500)
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    grads = {}
    for impl, dtype in (("native", torch.float32), ("dense", torch.float64)):
        xs = [x.to(dtype).requires_grad_(True) for x in (q, k, v)]
        grads[impl] = torch.autograd.grad(spec.attention(*xs, impl=impl), xs, upstream.to(dtype))
    for x, a, b in zip("qkv", grads["native"], grads["dense"]):
        err = (a.double() - b).abs().max().item() / b.abs().max().item()
        assert err <= 1e-5, f"{name}: d{x} relative max |diff| = {err:.3g}"


@pytest.mark.slow  # a numerical check at the sweep's sizes: the full suite runs it, the fast lane not
@pytest.mark.parametrize("name", ["performer", "rfa"])
def test_the_first_pass_over_another_sequences_keys_equals_the_reference(name, monkeypatch):
    """Cross attention (n_k = 700 keys for n = 1024 queries, B = 2): the first pass sums [S, z]ᵀ over the keys' own
    rows through oneDNN, in several chunks and a short last one."""
    spec = variants.get(name)
    q, _, _ = inputs(spec, batch=2, heads=8, head_dim=64, seq_len=1024)
    _, k, v = inputs(spec, batch=2, heads=8, head_dim=64, seq_len=700, seed=1)
    sums = []
    keys = chunks._keys_onednn
    monkeypatch.setattr(chunks, "_keys_onednn", lambda phi, k, v, rows: sums.append(rows) or keys(phi, k, v, rows))
    got = spec.attention(q.float(), k.float(), v.float(), impl="native")
    assert len(sums) == 1 and sums[0] < 700, sums
    ref = spec.attention(q, k, v, impl="dense")
    err = (got.double() - ref).abs().max().item() / ref.abs().max().item()
    assert err <= 1e-5, f"{name}: relative max |diff| = {err:.3g}"
