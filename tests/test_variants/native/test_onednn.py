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


def test_a_2d_tiles_gradients_go_through_onednn_and_are_the_float64_ones(monkeypatch):
    """tile_grads on a 2-D tile (a GQA group's) takes the oneDNN products; its dq, dk, dv are float64's, rounded."""
    from variants.native.core import part_grad

    gen = torch.Generator().manual_seed(2)
    r, keys, d = 70, 130, 64
    qr, kt, vt, dor = (torch.randn(m, d, generator=gen) for m in (r, keys, keys, r))
    scores = (qr @ kt.T) * d**-0.5
    lse, shift = torch.logsumexp(scores, -1), torch.randn(r, generator=gen)
    taken, grads = [], part_grad._grads_onednn
    monkeypatch.setattr(part_grad, "_grads_onednn", lambda *a: taken.append(1) or grads(*a))
    got = part_grad.tile_grads(scores.clone(), qr, kt, vt, lse, dor, shift, d**-0.5)
    want = part_grad.tile_grads(
        scores.double(), qr.double(), kt.double(), vt.double(), lse.double(), dor.double(), shift.double(), d**-0.5
    )
    assert taken == [1]
    for a, b in zip(got, want):
        assert a.dtype == torch.float32 and ((a.double() - b).abs().max() / b.abs().max()).item() < 1e-5


def test_linformers_projection_over_every_head_is_the_float64_products_rounding():
    """E·K for every head as one oneDNN product whose columns are the heads' (variants.catalog.linformer.project)."""
    from variants.catalog.linformer import project

    gen = torch.Generator().manual_seed(3)
    e, x = torch.randn(16, 97, generator=gen), torch.randn(2, 3, 97, 8, generator=gen)
    assert onednn.onednn(x, e)
    got, want = project(e, x), e.double() @ x.double()
    assert got.shape == want.shape == (2, 3, 16, 8)
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 1e-6
    assert torch.equal(project(e.double(), x.double()), want), "float64 takes the plain product"


@pytest.mark.parametrize("batch, n, proj_len", [(1, 4096, 256), (2, 1500, 64), (1, 9000, 256)])
def test_linformers_attention_over_the_projected_keys_through_onednn_equals_the_reference(
    batch, n, proj_len, monkeypatch
):
    """linformer/native in float32 on the CPU: the projected keys scored and applied by two oneDNN products per head and
    chunk of rows (variants.native.grouped), against the float64 dense reference. n = 4096 at H = 8, d = 64, k = 256 is
    the sweep's own check (k = 256 needs n >= 256), in two chunks, the last one short; n = 9000 in chunks of 4096 rows,
    whose 2²⁰ scores a head are the cap (SCORES_ELEMENTS), where the memory rule alone would allow one."""
    from helpers import inputs

    import variants
    from variants.native.grouped.heads import GroupedKeys

    chunks = []
    by_group = GroupedKeys._by_group
    monkeypatch.setattr(
        GroupedKeys,
        "_by_group",
        lambda self, q, k, v, lse: chunks.append(self._group_rows(q, k)) or by_group(self, q, k, v, lse),
    )
    spec = variants.get("linformer")
    q, k, v = inputs(spec, batch=batch, heads=8, head_dim=64, seq_len=n)
    got = spec.attention(q.float(), k.float(), v.float(), impl="native", proj_len=proj_len)
    assert chunks, "the oneDNN products are the path tested"
    assert chunks[0] < n if n == 4096 else True, f"the rows in several chunks ({chunks[0]} a chunk)"
    assert chunks[0] == 4096 if n == 9000 else True, f"capped at 2^20 scores: {chunks[0]} rows a chunk"
    ref = spec.attention(q, k, v, impl="dense", proj_len=proj_len)
    err = (got.double() - ref).abs().max().item() / ref.abs().max().item()
    assert err <= 1e-5, f"relative max |diff| = {err:.3g}"
    with torch.enable_grad():  # recorded: the fused kernel, whose backward autograd has
        xs = [x.float().requires_grad_(True) for x in (q, k, v)]
        spec.attention(*xs, impl="native", proj_len=proj_len).sum().backward()
    assert len(chunks) == 1 and xs[1].grad is not None
