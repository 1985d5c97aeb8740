"""`global`'s key sets (variants.native.global_rows): the global keys and each row's own, keys-first, and the
full rows over them, against a dense masked softmax in float64: output, lse and gradients, over many chunks."""

from __future__ import annotations

import pytest
import torch

from variants.native.core import Partial
from variants.native.global_rows import GlobalKeys, GlobalRows, global_keys

NEG_INF = float("-inf")


def _inputs(n: int, d: int = 16):
    gen = torch.Generator().manual_seed(0)
    qkv = [torch.randn(2, 3, n, d, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    return (
        qkv,
        torch.randn(2, 3, n, d, generator=gen, dtype=torch.float64),
        torch.randn(2, 3, n, generator=gen, dtype=torch.float64),
    )


def _dense(q, k, v, allowed):
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~allowed, NEG_INF)
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)


def _allowed(n: int, g: int, causal: bool, full_rows: bool):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (j < g) | (i == j) | ((i < g) if full_rows else torch.zeros(n, 1, dtype=torch.bool))
    return allowed & (j <= i) if causal else allowed


def _grads(out, lse, q, k, v, g_out, g_lse):
    return torch.autograd.grad((out * g_out).sum() + (lse * g_lse).sum(), (q, k, v))


@pytest.fixture(params=[1 << 18, 40], ids=["one chunk", "a row or two a chunk"])
def budget(request, monkeypatch):
    """The scores' budget in elements: the sweep's, and so small that every chunk holds a row or two."""
    monkeypatch.setattr(global_keys, "cache_elements", lambda x, cpu: request.param)
    return request.param


@pytest.mark.parametrize("g, causal", [(0, False), (1, False), (5, False), (5, True), (16, True)])
def test_the_global_pattern_is_the_dense_softmax_output_lse_and_gradients(g, causal, budget):
    n = 40
    (q, k, v), g_out, g_lse = _inputs(n)
    part = GlobalRows(GlobalKeys(g), g, causal).part(q, k, v, need_lse=True)
    ref = _dense(q, k, v, _allowed(n, g, causal, full_rows=True))
    assert (part.out - ref[0]).abs().max().item() < 1e-12
    assert (part.lse - ref[1]).abs().max().item() < 1e-12
    ours, theirs = _grads(part.out, part.lse, q, k, v, g_out, g_lse), _grads(*ref, q, k, v, g_out, g_lse)
    for name, a, b in zip("qkv", ours, theirs):
        assert (a - b).abs().max().item() < 1e-12, f"d{name}"
    with torch.no_grad():  # the output alone, as the sweep times it
        alone = GlobalRows(GlobalKeys(g), g, causal).part(q, k, v, need_lse=False)
    assert alone.lse is None and (alone.out - ref[0]).abs().max().item() < 1e-12


def test_global_keys_fold_into_another_sets_rows(budget):
    """Rows i >= g: folded into a partial of other keys (here each row's next key), the union's softmax."""
    n, g = 30, 4
    (q, k, v), _, _ = _inputs(n)
    q, k, v = (x.detach() for x in (q, k, v))
    nxt = torch.arange(n)[None, :] == torch.arange(n)[:, None] + 1
    out, lse = _dense(q, k, v, nxt)
    into = Partial(out.nan_to_num(0.0), lse)  # the last row has no next key: out 0, lse −inf
    GlobalKeys(g).steps(q, k, v, need_lse=True, into=into)
    ref = _dense(q, k, v, _allowed(n, g, causal=False, full_rows=False) | nxt)
    assert (into.out[:, :, g:] - ref[0][:, :, g:]).abs().max().item() < 1e-12
    assert (into.lse[:, :, g:] - ref[1][:, :, g:]).abs().max().item() < 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_float32_or_bf16_call_is_the_float64_one_rounded(dtype):
    n, g = 300, 16
    (q, k, v), _, _ = _inputs(n, d=64)
    low = [x.detach().to(dtype) for x in (q, k, v)]
    with torch.no_grad():
        out = GlobalRows(GlobalKeys(g), g, False).part(*low, need_lse=False).out
    ref = _dense(*(x.detach().to(dtype).double() for x in (q, k, v)), _allowed(n, g, False, full_rows=True))[0]
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert (out.double() - ref).abs().max().item() < tol
