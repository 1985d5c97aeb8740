"""The backward of per-query key lists (variants.gathered_grad): exact, and in bounded memory."""

from __future__ import annotations

import pytest
import torch

import variants
from suite.run.timing import peak_cpu
from variants import gathered_grad
from variants._checks import against_reference
from variants.native import gather_part, random_keys, row_keys


def _rows(n: int, r: int, like: torch.Tensor):
    idx = random_keys(n, r, seed=1)
    valid = torch.rand(n, r, generator=torch.Generator().manual_seed(2)) > 0.3
    valid[5] = False  # a row with no key: out 0, lse −inf, and no NaN in any gradient
    return row_keys(idx, valid, like)


@pytest.mark.parametrize("need_lse", [False, True])
def test_its_gradients_are_autograds_through_the_readable_chunks(need_lse):
    """Against autograd through `gather_part` (the slow readable form), with upstream gradients on
    both the output and the log-sum-exp (a union's merge sends both), at B = 2, H = 3, float64."""
    gen = torch.Generator().manual_seed(0)
    n, d = 300, 16
    q, k, v = (torch.randn(2, 3, n, d, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    rows = _rows(n, 20, q)
    g_out, g_lse = torch.randn(2, 3, n, d, generator=gen, dtype=torch.float64), torch.randn(2, 3, n, generator=gen,
                                                                                             dtype=torch.float64)

    def loss(part):
        lse = torch.zeros_like(g_lse) if part.lse is None else part.lse.masked_fill(part.lse == float("-inf"), 0)
        return (part.out * g_out).sum() + (lse * g_lse).sum()

    ours = torch.autograd.grad(loss(gathered_grad.gathered(q, k, v, rows, need_lse)), (q, k, v))
    valid = rows.valid.clone()
    valid[5] = True  # NB: the readable form's gradient of an empty row is 0/0; compare every other row
    ref_rows = row_keys(rows.idx, valid, q)
    ours_all = torch.autograd.grad(loss(gathered_grad.gathered(q, k, v, ref_rows, need_lse)), (q, k, v))
    ref = torch.autograd.grad(loss(gather_part(q, k, v, idx=ref_rows.idx, valid=ref_rows.valid, need_lse=need_lse)),
                              (q, k, v))
    for name, a, b in zip("qkv", ours_all, ref):
        assert (a - b).abs().max().item() < 1e-12, f"d{name}"
    assert all(torch.isfinite(g).all() for g in ours), "a row with no key gave a non-finite gradient"


def test_random_native_fwd_bwd_holds_a_few_outputs_not_r():
    """The timed fwd_bwd call (as suite.run.measure builds it) above its inputs, at n = 1024, r = 32:
    the gradients of q, k, v (3 outputs), the output, and a step. Autograd through the chunks kept
    their gathered K and V: 86 outputs at n = 2048 in the last full run."""
    spec = variants.get("random")
    q, k, v = (torch.randn(1, 8, 1024, 64, requires_grad=True) for _ in range(3))
    call = spec.prepare(q, k, v, impl="native", causal=False)
    grad = torch.ones_like(call())
    run = lambda: torch.autograd.grad(call(), (q, k, v), grad)  # noqa: E731
    run()
    held = peak_cpu(run) / (q.numel() * 4)
    assert held <= 5.0, f"random/native fwd_bwd held {held:.2f} outputs"


def test_the_sweeps_check_sees_a_wrong_backward(monkeypatch):
    """A backward that drops dK's share: the forward check passes, the fwd_bwd check does not."""
    real = gathered_grad._chunk_grads

    def no_dk(q, k, v, out, lse, dout, dlse, ix, valid, rows, dq, dk, dv):
        real(q, k, v, out, lse, dout, dlse, ix, valid, rows, dq, torch.zeros_like(dk), dv)

    monkeypatch.setattr(gathered_grad, "_chunk_grads", no_dk)
    spec = variants.get("random")
    make = lambda n: tuple(torch.randn(1, 2, n, 16, generator=torch.Generator().manual_seed(s)) for s in range(3))  # noqa: E731
    assert against_reference(spec, "native", make, 97, {}, False)[0] < 1e-4
    assert against_reference(spec, "native", make, 97, {}, False, grads=True)[0] > 1e-2
