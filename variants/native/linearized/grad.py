"""Linearized attention's own backward, bidirectional and causal: memory of a few outputs both ways.

Autograd through the forward's chunks kept every chunk's features and products (tens of outputs for
a causal performer). Here the forward runs without autograd and keeps its output (and, when
bidirectional, S and z); the backward recomputes φ chunk by chunk, through autograd of that chunk's
φ alone. With N_i = φ(q_i)ᵀS_i, D_i = φ(q_i)ᵀz_i (S_i = Σ φ(k_j)v_jᵀ, z_i = Σ φ(k_j) over the keys
row i sees), out = N/D:

    dN = dO/D,  dD = −rowsum(dO ∘ out)/D,  dφ(q_i) = S_i·dN_i + z_i·dD_i,
    dφ(k_j) = G_j·v_j + g_j,  dv_j = G_jᵀ·φ(k_j),  G_j = Σ_i φ(q_i)dN_iᵀ, g_j = Σ_i φ(q_i)dD_i over the rows i that see j

Bidirectional: every row sees every key, so S, z, G, g are whole sums. Causal (Katharopoulos et al.
2020, §3.3.1, by chunks): S_i and z_i are prefix sums, taken in a forward pass that also keeps
each row's D and each chunk's log-scale; G_j and g_j are suffix sums, taken in a reverse pass;
within a chunk the masked (C × C) form.
"""

from __future__ import annotations

import torch

from variants.native.core import rowdot
from variants.native.linearized.chunks import bidirectional_chunks, causal_chunks
from variants.native.linearized.state import (
    FeatureMap,
    add_product,
    normalizer,
    row_chunks,
    rows_per_step,
    weigh,
    with_grad,
    zero_state,
)

MORE = 3  # (rows × m) a backward chunk holds beside the map's: its autograd record, dφ, φ(q)∘dD


class Bidirectional(torch.autograd.Function):
    """(q, k, v) → out; the forward keeps out, S and z (m/n of an output each)."""

    @staticmethod
    def forward(ctx, q, k, v, phi: FeatureMap, step: int):
        with torch.no_grad():
            out, state, z, scale = bidirectional_chunks(phi, q, k, v, step)
        ctx.save_for_backward(q, k, v, out, state, z, scale)
        ctx.phi, ctx.step = phi, rows_per_step(phi, q, step, more=MORE)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, state, z, scale = ctx.saved_tensors
        phi, step = ctx.phi, ctx.step
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        d_state, dz = torch.zeros_like(state), torch.zeros_like(z)
        for rows in row_chunks(q.shape[-2], step):
            f, back = mapped(phi, phi.query, q[:, :, rows])  # (B, H, C, m)
            dn = dout[:, :, rows] / normalizer(f, z)[..., None]  # (B, H, C, d)
            dd = -rowdot(dn, out[:, :, rows])[..., None]  # (B, H, C, 1)
            d_state.add_(f.transpose(-1, -2) @ dn)
            dz.add_((f * dd).sum(-2))
            dq[:, :, rows] = back((dn @ state.transpose(-1, -2)).add_(dd * z[..., None, :]))
            del f, back, dn, dd  # before the next step's (see variants.native.core.steps)
        for rows in row_chunks(k.shape[-2], step):
            fk, back = mapped(phi, lambda y: _at_scale(phi, y, scale), k[:, :, rows])
            dv[:, :, rows] = fk @ d_state
            dk[:, :, rows] = back((v[:, :, rows] @ d_state.transpose(-1, -2)).add_(dz[..., None, :]))
            del fk, back
        return dq, dk, dv, None, None


class Causal(torch.autograd.Function):
    """(q, k, v) → out, causal; the forward keeps out alone."""

    @staticmethod
    def forward(ctx, q, k, v, phi: FeatureMap, step: int):
        return keep_output(ctx, q, k, v, phi, step, lambda *args: causal_chunks(*args)[0])

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out = ctx.saved_tensors
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        chunks, dout = row_chunks(q.shape[-2], ctx.step), dout.contiguous()
        den, scales = _prefix_pass(ctx.phi, q, k, v, out, dout, chunks, dq)
        _suffix_pass(ctx.phi, q, k, v, out, dout, chunks, den, scales, dk, dv)
        return dq, dk, dv, None, None


def keep_output(ctx, q, k, v, phi: FeatureMap, step: int, run) -> torch.Tensor:
    """A causal forward `run(phi, q, k, v, step)` without autograd, keeping q, k, v and its output
    alone, and the rows of the backward's chunks."""
    with torch.no_grad():
        out = run(phi, q, k, v, step)
    ctx.save_for_backward(q, k, v, out)
    ctx.phi, ctx.step = phi, rows_per_step(phi, q, step, causal=True, more=MORE)
    return out


def _prefix_pass(phi, q, k, v, out, dout, chunks, dq):
    """Chunks in order: dq from the prefix sums S_i, z_i (brought to each chunk's running log-scale
    as the forward does). Returns each row's D (B, H, n) and each chunk's log-scale."""
    den, scales = q.new_empty(q.shape[:-1]), []
    state = z = scale = None
    for rows in chunks:
        f, back = mapped(phi, phi.query, q[:, :, rows])
        fk, s = phi.key(k[:, :, rows])
        if state is None:
            state, z = zero_state(q, fk.shape[-1])
        state, z, scale = weigh(phi, state, z, scale, fk, s)
        den[:, :, rows] = (f @ fk.transpose(-1, -2)).tril_().sum(-1).add_(normalizer(f, z))
        dn, dd, lower = _row_terms(dout, out, v, den, rows)
        dfq = (lower @ fk).add_(dn @ state.transpose(-1, -2)).add_(dd * z[..., None, :])  # (B, H, C, m)
        dq[:, :, rows] = back(dfq)
        scales.append(scale)
        add_product(state, fk, v[:, :, rows])
        z.add_(fk.sum(dim=-2))
        del f, back, fk, dn, dd, lower, dfq  # before the next step's
    return den, scales


def _suffix_pass(phi, q, k, v, out, dout, chunks, den, scales, dk, dv):
    """Chunks in reverse: dk, dv from the suffix sums G (B, H, m, d) and g (B, H, m) of the later
    rows, kept at the log-scale of the chunk at hand (the later one's is larger: factors ≤ 1)."""
    big_g = small_g = later = None
    for rows, scale in reversed(list(zip(chunks, scales))):
        f = phi.query(q[:, :, rows])  # (B, H, C, m)
        fkw, back = mapped(phi, lambda y: _at_scale(phi, y, scale), k[:, :, rows])
        if big_g is None:
            big_g, small_g = zero_state(q, f.shape[-1])
        else:
            factor = torch.exp(scale - later)  # (B, H, 1, 1)
            big_g.mul_(factor)
            small_g.mul_(factor.squeeze(-1))
        dn, dd, lower = _row_terms(dout, out, v, den, rows)
        vr = v[:, :, rows]
        dfk = (lower.transpose(-1, -2) @ f).add_(vr @ big_g.transpose(-1, -2)).add_(small_g[..., None, :])
        dv[:, :, rows] = (f @ fkw.transpose(-1, -2)).tril_().transpose(-1, -2) @ dn + fkw @ big_g
        dk[:, :, rows] = back(dfk)
        big_g.add_(f.transpose(-1, -2) @ dn)
        small_g.add_((f * dd).sum(-2))
        later = scale
        del f, back, fkw, dn, dd, lower, dfk  # before the next step's


def _row_terms(dout, out, v, den, rows):
    """dN (B, H, C, d), dD (B, H, C, 1) of a chunk's rows, and L[i, j] = dN_i·v_j + dD_i for j ≤ i
    (B, H, C, C): what row i sends to key j of its own chunk."""
    dn = dout[:, :, rows] / den[:, :, rows, None]
    dd = -rowdot(dn, out[:, :, rows])[..., None]
    lower = (dn @ v[:, :, rows].transpose(-1, -2)).add_(dd).tril_()
    return dn, dd, lower


def _at_scale(phi: FeatureMap, x, scale):
    """φ(k) of x at log-scale `scale` (a constant: the forward's weight of its chunk)."""
    fk, s = phi.key(x)
    return fk * torch.exp(s - scale)


def mapped(phi: FeatureMap, fn, x):
    """(fn(x), back): back(df) is x's gradient through fn, a map of phi's, given df (which it may
    overwrite). Through phi's closed form (`vjp`) where it has one, else through autograd's record
    of fn."""
    if phi.vjp is not None:
        with torch.no_grad():
            f = fn(x)
        return f, lambda df: phi.vjp(x, f, df)
    leaf, f = with_grad(fn, x)
    return f.detach(), lambda df: torch.autograd.grad(f, leaf, df)[0]
