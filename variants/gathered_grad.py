"""Forward and backward of per-query key lists (random keys, BigBird's random part) in bounded memory.

Autograd through `gather_part` keeps every chunk's gathered copies of K and V, (B, H, n, r, d):
r outputs' worth (measured: random 86×, bigbird 101× the output at n = 2048). Here the forward
runs without autograd (the CSR or chunked path, one step alive at a time) and keeps only its
output and log-sum-exp; the backward recomputes each chunk's scores from them, FlashAttention's
way: P = exp(S − lse), dV += Pᵀ·dO, dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O) + dlse), dQ = dS·K, dK += dSᵀ·Q.
Gradients of K and V land on their keys by `index_add_`.
"""

from __future__ import annotations

import torch

from variants.native import NEG_INF, Partial, step_elements


class GatheredAttention(torch.autograd.Function):
    """(q, k, v) → (out, lse) of softmax attention over keys idx[i] where valid[i]."""

    @staticmethod
    def forward(ctx, q, k, v, rows):  # rows: variants.native.RowKeys
        with torch.no_grad():
            part = rows.part(q, k, v, need_lse=True)
        ctx.save_for_backward(q, k, v, part.out, part.lse)
        ctx.rows = rows
        return part.out, part.lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        idx, valid = ctx.rows.idx, ctx.rows.valid
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        b, h, n, d = q.shape
        r = idx.shape[1]
        chunk = max(1, step_elements(q) // (4 * b * h * max(1, r) * d))  # kg, vg and two (C, r, d) products
        for start in range(0, n, chunk):
            rows = slice(start, min(start + chunk, n))
            _chunk_grads(q, k, v, out, lse, dout, dlse, idx[rows], valid[rows], rows, dq, dk, dv)
        return dq, dk, dv, None


def _chunk_grads(q, k, v, out, lse, dout, dlse, ix, valid, rows: slice, dq, dk, dv) -> None:
    """The gradients from query rows `rows`, whose keys are ix (C, r): dq's rows, and dk, dv added."""
    scale = q.shape[-1] ** -0.5
    kg, vg = k[:, :, ix], v[:, :, ix]  # (B, H, C, r, d)
    qr, dor = q[:, :, rows], dout[:, :, rows]  # (B, H, C, d)
    scores = (kg @ qr[..., None]).squeeze(-1).mul_(scale).masked_fill_(~valid, NEG_INF)  # (B, H, C, r)
    top = lse[:, :, rows].masked_fill(lse[:, :, rows] == NEG_INF, 0.0)  # a row with no key: p = 0
    p = scores.sub_(top[..., None]).exp_()  # (B, H, C, r)
    del scores
    dp = (vg @ dor[..., None]).squeeze(-1)  # (B, H, C, r)
    shift = (dor * out[:, :, rows]).sum(-1)  # rowsum(dO ∘ O): (B, H, C)
    if dlse is not None:
        shift = shift - dlse[:, :, rows]
    ds = dp.sub_(shift[..., None]).mul_(p)  # (B, H, C, r)
    keys = ix.reshape(-1)
    b, h, c, r = p.shape
    dv.index_add_(2, keys, (p[..., None] * dor[..., None, :]).reshape(b, h, c * r, -1))
    dq[:, :, rows] = (ds[..., None, :] @ kg).squeeze(-2).mul_(scale)
    dk.index_add_(2, keys, (ds[..., None] * qr[..., None, :]).mul_(scale).reshape(b, h, c * r, -1))


def gathered(q, k, v, rows, need_lse: bool) -> Partial:
    """The part of `rows` (RowKeys) under autograd: bounded memory in forward and backward."""
    out, lse = GatheredAttention.apply(q, k, v, rows)
    return Partial(out, lse if need_lse else None)
