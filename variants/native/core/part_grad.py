"""A key set's own backward: forward and backward in bounded memory.

Autograd through a part's steps keeps every step's scores, probabilities and copies of K and V:
per-query key lists held r outputs' worth (random 86×, bigbird 101× the output at n = 2048), a
band its span's. Here the forward runs without autograd (the in-place steps, one alive at a time)
and keeps only its output and log-sum-exp; the backward recomputes the scores tile by tile from
them, FlashAttention's way. With P = exp(S − lse) and shift = rowsum(dO ∘ O) − dlse:

    dV += Pᵀ·dO,   dS = P ∘ (dO·Vᵀ − shift),   dQ += scale · dS·K,   dK += scale · dSᵀ·Q

For a union of disjoint key sets, lse and O are the union's, and each set adds its tiles' share.
A key set (variants.native.KeySet) says which tiles it has (`grads`); `tile_grads` does the
arithmetic of one.
"""

from __future__ import annotations

import torch

from variants.native.core import onednn
from variants.native.core.expo import exp_


class OwnBackward(torch.autograd.Function):
    """(q, k, v) → (out, lse) of a key set: its `steps` forward, its `grads` backward."""

    @staticmethod
    def forward(ctx, q, k, v, keys):
        with torch.no_grad():
            res = keys.steps(q, k, v, need_lse=True, into=None)
        ctx.save_for_backward(q, k, v, res.out, res.lse)
        ctx.keys = keys
        return res.out, res.lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dout = dout.contiguous()  # the sets take views of it by rows and classes
        shift = rowdot(dout, out)  # (B, H, n)
        if dlse is not None:
            shift.sub_(dlse)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        lse = lse.masked_fill(lse == float("-inf"), 0.0)  # a row with no key: its scores are −inf, P = 0
        ctx.keys.grads(q, k, v, lse, dout, shift, dq, dk, dv)
        return dq, dk, dv, None


def rowdot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Σ_d a ∘ b of (B, H, n, d) tensors: (B, H, n), by chunks of rows of at most half the output.
    NB: linalg.vecdot and (a * b).sum(-1) on CPU both make the whole product first (one output)."""
    n, d = a.shape[-2:]
    out = a.new_empty(a.shape[:-1])
    chunk = max(1, n // 2)
    for r0 in range(0, n, chunk):
        out[..., r0 : r0 + chunk] = (a[..., r0 : r0 + chunk, :] * b[..., r0 : r0 + chunk, :]).sum(-1)
    return out


def tile_grads(scores, qr, kt, vt, lse, dor, shift, scale: float):
    """One tile: scores (…, R, K) = scale·qr·ktᵀ + mask, already made (and used up here); qr, dor
    (…, R, d); kt, vt (…, K, d); lse, shift (…, R). Returns dq (…, R, d), dk and dv (…, K, d)."""
    p = exp_(scores.sub_(lse[..., None]))  # (…, R, K)
    if p.dim() == 2 and onednn.onednn(qr, kt):
        return _grads_onednn(p, qr, kt, vt, dor, shift, scale)
    dv = p.transpose(-1, -2) @ dor
    ds = (dor @ vt.transpose(-1, -2)).sub_(shift[..., None]).mul_(p)
    return (ds @ kt).mul_(scale), (ds.transpose(-1, -2) @ qr).mul_(scale), dv


def _grads_onednn(p, qr, kt, vt, dor, shift, scale: float):
    """A 2-D tile's four products through oneDNN (variants.native.core.onednn): Pᵀ and dSᵀ are read as
    copies, one alive at a time beside P: faster than MKL's batched products, copies included
    (docs/performance.md, "(18) The grouped heads' products, one group at a time through oneDNN")."""
    pt = p.T.contiguous()
    dv = onednn.linear(pt, dor.T)  # (K, d) = Pᵀ·dO
    del pt
    ds = onednn.linear(dor, vt).sub_(shift[:, None]).mul_(p)  # (R, K)
    dst = ds.T.contiguous()
    dk = onednn.linear(dst, qr.T).mul_(scale)
    del dst
    return onednn.linear(ds, kt.T).mul_(scale), dk, dv
